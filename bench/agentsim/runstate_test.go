package main

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/compilefarm/compilefarm/bench/internal/agentwire"
)

// The next run number survives in --state; a directory without one
// starts at 0; a damaged record is an error, not a silent restart at 0.
func TestNextRunRecord(t *testing.T) {
	dir := t.TempDir()
	if n, err := loadNextRun(dir); n != 0 || err != nil {
		t.Fatalf("empty state: %d, %v; want 0, nil", n, err)
	}
	for _, want := range []int{1, 7, 3} {
		if err := saveNextRun(dir, want); err != nil {
			t.Fatal(err)
		}
		if n, err := loadNextRun(dir); n != want || err != nil {
			t.Fatalf("after saving %d: %d, %v", want, n, err)
		}
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 1 || ents[0].Name() != runsFile {
		t.Errorf("state holds %v, want only %s", ents, runsFile)
	}
	for _, bad := range []string{"", "{", `{"next_run":-1}`, `{"next_run":"2"}`} {
		if err := os.WriteFile(filepath.Join(dir, runsFile), []byte(bad), 0o600); err != nil {
			t.Fatal(err)
		}
		if n, err := loadNextRun(dir); err == nil {
			t.Errorf("%q: %d, no error", bad, n)
		}
	}
}

// Two invocations with the same --state, as a warm-up and then a measured
// herd: the second's runs send the facts of later runs (more uptime, other
// memory and load), not the first's again; only the timestamps would
// differ otherwise, and the herd would not show whether the broker
// compiles for what facter measures at every run.
func TestRunNumbersGoOnAcrossInvocations(t *testing.T) {
	tpl, err := newFactTemplate(agentwire.RecordedCatalogRequest)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	names := []string{"agentsim-00000.agentsim.test", "agentsim-00001.agentsim.test"}
	now := time.Date(2026, 11, 25, 18, 0, 0, 0, time.UTC)
	// invocation runs each agent runs[i] times, as runAgent numbers them,
	// and returns each agent's facts (volatile leaves) per run.
	invocation := func(runs []int) (first int, facts [][]map[string]string) {
		t.Helper()
		first, err := loadNextRun(dir)
		if err != nil {
			t.Fatal(err)
		}
		s := &sim{cfg: simConfig{runinterval: 30 * time.Minute}, facts: tpl, firstRun: first}
		for _, n := range names {
			s.agents = append(s.agents, &agent{name: n, rename: agentwire.Renamer(n)})
		}
		facts = make([][]map[string]string, len(names))
		for i, a := range s.agents {
			for range runs[i] {
				run := a.runs
				a.runs++
				doc, err := s.runFacts(a, run, now)
				if err != nil {
					t.Fatal(err)
				}
				_, leaves := decodeDoc(t, doc)
				facts[i] = append(facts[i], leaves)
			}
		}
		if err := saveNextRun(dir, s.nextRun()); err != nil {
			t.Fatal(err)
		}
		return first, facts
	}
	volatile := []string{"uptime_seconds", "system_uptime\x00seconds", "memory\x00system\x00used_bytes", "load_averages\x001m"}

	first1, warm := invocation([]int{1, 2}) // the second agent ran twice (a --rounds 2 herd, say)
	first2, herd := invocation([]int{1, 1})
	first3, _ := invocation([]int{0, 0})
	if first1 != 0 || first2 != 2 || first3 != 3 {
		t.Errorf("first run numbers %d, %d, %d; want 0, 2 (after an agent's two runs), 3", first1, first2, first3)
	}
	for i, n := range names {
		for _, w := range warm[i] {
			for _, k := range volatile {
				if w[k] == "" {
					t.Fatalf("%s: no fact %q", n, k)
				}
				if w[k] == herd[i][0][k] {
					t.Errorf("%s: fact %q is %s in the warm-up and again in the herd", n, k, w[k])
				}
			}
		}
		if up0, up1 := warm[i][len(warm[i])-1]["uptime_seconds"], herd[i][0]["uptime_seconds"]; len(up1) < len(up0) || len(up1) == len(up0) && up1 <= up0 {
			t.Errorf("%s: uptime %s in the warm-up's last run, %s in the herd's: want it to grow", n, up0, up1)
		}
	}
}

package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/compilefarm/compilefarm/internal/farmproc"
)

// TestMain removes the broker farmproc built for the herd test.
func TestMain(m *testing.M) {
	code := m.Run()
	farmproc.CleanupBinaries()
	os.Exit(code)
}

// startBroker starts `broker dev` (built once) on free loopback ports
// with the benchmark environments, autosigning; it returns the front door,
// the metrics URL and the broker's process id, and stops it at the end of
// the test.
func startBroker(t *testing.T) (target, metricsURL string, pid int) {
	t.Helper()
	p := farmproc.Start(t, farmproc.Binary(t, "broker"), nil,
		farmproc.DevArgs("../environments", filepath.Join(t.TempDir(), "data"), "--workers", "2", "--autosign")...)
	return p.Addr, p.Metrics + "/metrics", p.Pid()
}

// A herd of agents against a real broker: the first round compiles every
// node; a second round, whose facts differ from the first only in what
// changes at every agent run (timestamps, uptime, memory, load), compiles
// nothing. No run fails in either.
func TestHerdCompilesOnlyOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the Puppet compile engine; skipped with -short")
	}
	for _, tool := range []string{"ruby", "puppet"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is required and missing: run scripts/install-deps.sh (as root) first", tool)
		}
	}
	target, metricsURL, pid := startBroker(t)
	o, _, _, _, err := parseFlags([]string{"--target", target, "--metrics", metricsURL, "--broker-pid", fmt.Sprint(pid),
		"--mode", "herd", "--agents", "20", "--window", "5s", "--rounds", "2", "--warmup=false",
		"--state", filepath.Join(t.TempDir(), "state")})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	res, err := simulate(ctx, o, func(s string) { t.Log(s) })
	if err != nil {
		t.Fatal(err)
	}
	var text strings.Builder
	res.writeText(&text)
	t.Logf("results:\n%s", text.String())
	if len(res.Rounds) != 2 {
		t.Fatalf("%d rounds, want 2", len(res.Rounds))
	}
	if res.Enrol.New != 20 {
		t.Errorf("enrolled %d agents, want 20", res.Enrol.New)
	}
	for i, rd := range res.Rounds {
		if rd.Runs != 20 || rd.Failed != 0 {
			t.Errorf("round %d: %d runs, %d failed (%v)", i+1, rd.Runs, rd.Failed, rd.Errors)
		}
		for _, k := range []string{"file_metadatas", "catalog", "report"} {
			if q := rd.Requests[k]; q.Failed != 0 || q.Count < 20 {
				t.Errorf("round %d: %s requests %+v", i+1, k, q)
			}
		}
		if rd.Compiles == nil || rd.Broker == nil || rd.Broker.RSSMB == nil {
			t.Fatalf("round %d: no broker numbers: compiles %v, broker %+v", i+1, rd.Compiles, rd.Broker)
		}
	}
	first, second := res.Rounds[0], res.Rounds[1]
	if first.Compiles.OK < 20 {
		t.Errorf("first round: %+v compiles, want the 20 first compiles", *first.Compiles)
	}
	if first.Requests["node"].Count != 20 || second.Requests["node"].Count != 0 {
		t.Errorf("node requests: %d then %d, want 20 (first runs) then 0", first.Requests["node"].Count, second.Requests["node"].Count)
	}
	if n := second.Compiles.Total(); n != 0 {
		t.Errorf("second round: %v compiles (%+v), want none: only volatile facts changed", n, *second.Compiles)
	}
	if second.ConnectionsPerRun != 1 {
		t.Errorf("second round: %v TLS connections per run, want 1", second.ConnectionsPerRun)
	}
}

package main

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/compilefarm/compilefarm/internal/corpus"
	"github.com/compilefarm/compilefarm/pkg/facts"
)

func TestPlanCheckIns(t *testing.T) {
	for _, tc := range []struct {
		name           string
		nodes, uploads int
		fraction       float64
		// usedMin, usedMax bound the used-fact changes planned.
		usedMin, usedMax int
	}{
		{"no used changes", 5, 100, 0, 0, 0},
		{"every check-in", 3, 30, 1, 30, 30},
		{"one node", 1, 50, 1, 50, 50},
		{"1% of many", 36, 100_000, 0.01, 900, 1100},
		{"bench default", 36, 1000, 0.01, 1, 30},
		{"fewer uploads than nodes", 36, 10, 0.5, 1, 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			plan := planCheckIns(tc.nodes, tc.uploads, tc.fraction)
			if len(plan) != tc.uploads {
				t.Fatalf("%d check-ins planned, want %d", len(plan), tc.uploads)
			}
			if again := planCheckIns(tc.nodes, tc.uploads, tc.fraction); !reflect.DeepEqual(plan, again) {
				t.Fatalf("two plans differ: the plan must be deterministic")
			}
			runs := make([]int, tc.nodes)
			changed := make([]bool, tc.nodes)
			used := 0
			for u, ci := range plan {
				if ci.Node != u%tc.nodes {
					t.Fatalf("check-in %d is node %d's, want %d (round robin)", u, ci.Node, u%tc.nodes)
				}
				if ci.Run != runs[ci.Node] {
					t.Fatalf("check-in %d: node %d's run %d, want %d (one more per check-in)", u, ci.Node, ci.Run, runs[ci.Node])
				}
				runs[ci.Node]++
				if ci.Used {
					used++
					changed[ci.Node] = !changed[ci.Node]
				}
				// A used change flips the value (new, then back to the
				// original, ...); other check-ins keep it.
				if ci.Changed != changed[ci.Node] {
					t.Fatalf("check-in %d (used %v): changed = %v, want %v", u, ci.Used, ci.Changed, changed[ci.Node])
				}
			}
			if used < tc.usedMin || used > tc.usedMax {
				t.Errorf("%d used-fact changes, want %d..%d", used, tc.usedMin, tc.usedMax)
			}
		})
	}
}

// TestCorpusCheckIns follows every corpus node's check-ins: the identity
// facts carry the synthetic certname, and from one check-in to the next
// only volatile facts change, and the used fact exactly when the plan says
// (alternating between its new and its original value).
func TestCorpusCheckIns(t *testing.T) {
	cnodes, err := corpus.Nodes()
	if err != nil {
		t.Fatal(err)
	}
	const uploads = 400
	n := len(cnodes) + 2 // two nodes share a corpus node
	fleet := make([]*corpusNode, n)
	for i := range fleet {
		name := corpusName("t", i, cnodes[i%len(cnodes)], "fleet.test")
		if fleet[i], err = newCorpusNode(name, cnodes[i%len(cnodes)]); err != nil {
			t.Fatal(err)
		}
	}
	if !strings.HasPrefix(fleet[len(cnodes)].name, "t-00"+"18-"+strings.Split(cnodes[0].Certname, ".")[0]+".") {
		t.Errorf("node %d is %s: want corpus node %s's name in it", len(cnodes), fleet[len(cnodes)].name, cnodes[0].Certname)
	}
	prev := make([]map[string]any, n)
	orig := make([]any, n)
	usedSeen := 0
	for u, ci := range planCheckIns(n, uploads, 0.2) {
		node := fleet[ci.Node]
		vals := node.facts(ci)
		host, domain, _ := strings.Cut(node.name, ".")
		for path, want := range map[string]string{"clientcert": node.name, "fqdn": node.name, "hostname": host, "domain": domain,
			"networking.fqdn": node.name, "networking.hostname": host, "networking.domain": domain, "role": node.role} {
			if path == strings.Join(node.usedPath, ".") {
				continue // web's used fact is networking.domain
			}
			if got, _ := facts.Lookup(vals, strings.Split(path, ".")); got != want {
				t.Fatalf("check-in %d of %s: %s = %v, want %q", u, node.name, path, got, want)
			}
		}
		if prev[ci.Node] == nil {
			// The first check-in: against the node's baseline upload.
			prev[ci.Node] = node.base
			orig[ci.Node], _ = facts.Lookup(node.base, node.usedPath)
		}
		usedChanged := false
		for _, p := range changedLeaves(prev[ci.Node], vals) {
			switch {
			case slices.Equal(p, node.usedPath):
				usedChanged = true
			case !corpus.IsVolatile(p):
				t.Fatalf("check-in %d of %s (role %s) changes %s, which is neither volatile nor its used fact", u, node.name, node.role, strings.Join(p, "."))
			}
		}
		if usedChanged != ci.Used {
			t.Fatalf("check-in %d of %s: used fact %s changed = %v, want %v", u, node.name, strings.Join(node.usedPath, "."), usedChanged, ci.Used)
		}
		got, _ := facts.Lookup(vals, node.usedPath)
		if isOrig := reflect.DeepEqual(got, orig[ci.Node]); isOrig == ci.Changed {
			t.Fatalf("check-in %d of %s: %s = %v, changed = %v", u, node.name, strings.Join(node.usedPath, "."), got, ci.Changed)
		}
		if ci.Used {
			usedSeen++
		}
		prev[ci.Node] = vals
	}
	if usedSeen < 10 {
		t.Errorf("only %d used-fact changes in %d check-ins: the test checks too few", usedSeen, uploads)
	}
	if v := volatilePerCheckIn(fleet); v < 10 {
		t.Errorf("%.1f fact values change per check-in: want the many volatile facts of a real agent's run", v)
	}
	// The facts stay JSON with the corpus's numbers.
	if _, err := json.Marshal(fleet[0].facts(checkIn{Run: 3, Changed: true})); err != nil {
		t.Fatal(err)
	}
}

func TestChangedLeaves(t *testing.T) {
	a := map[string]any{"x": "1", "h": map[string]any{"a": json.Number("1"), "b": []any{"p"}}, "gone": true, "empty": map[string]any{}}
	b := map[string]any{"x": "1", "h": map[string]any{"a": json.Number("2"), "b": []any{"p", "q"}}, "new": false, "empty": map[string]any{}}
	var got []string
	for _, p := range changedLeaves(a, b) {
		got = append(got, strings.Join(p, "."))
	}
	if want := []string{"gone", "h.a", "h.b", "new"}; !slices.Equal(got, want) {
		t.Errorf("changedLeaves = %v, want %v", got, want)
	}
}

func TestUnexpectedCompiles(t *testing.T) {
	fleet := []*corpusNode{{name: "a", role: "web"}, {name: "b", role: "app"}, {name: "c", role: "cache"}, {name: "d", role: "mirror"}}
	used := []int{1, 0, 2, 0}
	before := map[string]adminNode{"a": {RequestSeq: 3}, "b": {RequestSeq: 5}, "c": {RequestSeq: 1}, "d": {RequestSeq: 2}}
	exports := &adminRequest{Reason: "exports-changed"}
	facts := &adminRequest{Reason: "facts-changed", Changes: []adminChange{{Path: []string{"networking", "ip"}, Kind: "value",
		Old: json.RawMessage(`"10.0.0.1"`), New: json.RawMessage(`"10.0.0.2"`)}}}
	after := map[string]adminNode{
		"a": {RequestSeq: 4, Requested: facts, Compile: &adminCompile{Result: "ok"}},                                    // as planned
		"b": {RequestSeq: 6, Requested: exports, Compile: &adminCompile{Result: "ok"}},                                  // one extra
		"c": {RequestSeq: 3, Requested: facts, Compile: &adminCompile{Result: "failed", Error: "Evaluation Error\nat"}}, // failed
		"d": {RequestSeq: 2},                                                                                            // nothing, as planned
	}
	got := unexpectedCompiles(fleet, used, before, after)
	if len(got) != 2 || got[0].Node != "b" || got[1].Node != "c" {
		t.Fatalf("unexpected = %+v, want b (extra) and c (failed)", got)
	}
	if got[0].Queued != 1 || got[0].UsedChanges != 0 || got[0].LastRequest != "exports-changed" {
		t.Errorf("b: %+v", got[0])
	}
	if want := `c (role cache): 2 compiles queued for 2 used-fact changes; last: facts-changed (networking.ip: "10.0.0.1" -> "10.0.0.2"), failed: Evaluation Error`; got[1].String() != want {
		t.Errorf("c: %s\nwant %s", got[1], want)
	}
}

package farm

import (
	"encoding/json"
	"fmt"
	"testing"
)

func TestReleaseTargets(t *testing.T) {
	// Find one node inside and one outside a 10% release.
	var in, out string
	for i := 0; in == "" || out == ""; i++ {
		name := fmt.Sprintf("node%d.example.test", i)
		if ReleaseBucket(name) < 10 {
			in = name
		} else {
			out = name
		}
	}
	env := func(r *Release) Environment { return Environment{Name: "production", CodeID: "new", Release: r} }
	tests := []struct {
		name     string
		env      Environment
		node     string
		wantCode string
	}{
		{"no release policy", env(nil), out, "new"},
		{"hold, not released", env(&Release{Hold: true, Stable: "old"}), out, "old"},
		{"hold, in the percentage", env(&Release{Hold: true, Stable: "old", Percent: 10}), in, "new"},
		{"hold, outside the percentage", env(&Release{Hold: true, Stable: "old", Percent: 10}), out, "old"},
		{"hold, named", env(&Release{Hold: true, Stable: "old", Nodes: []string{out}}), out, "new"},
		{"hold, all released", env(&Release{Hold: true, Stable: "old", Percent: 100}), out, "new"},
		{"hold, nothing deployed since", env(&Release{Hold: true, Stable: "new"}), out, "new"},
		{"hold off", env(&Release{Hold: false, Stable: "old"}), out, "new"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.env.TargetCode(tt.node); got != tt.wantCode {
				t.Errorf("TargetCode(%s) = %s, want %s", tt.node, got, tt.wantCode)
			}
		})
	}
	n := 0
	for i := 0; i < 2000; i++ {
		if ReleaseBucket(fmt.Sprintf("host%d", i)) < 10 {
			n++
		}
	}
	if n < 140 || n > 260 {
		t.Errorf("%d of 2000 nodes in a 10%% release, want about 200", n)
	}
}

func TestSetCatalogKeepsHistory(t *testing.T) {
	var n Node
	for i, c := range []Digest{"a", "b", "b", "c", "d", "e", "f", "g"} {
		n.SetCatalog(CatalogRef{ContentDigest: c, Seq: uint64(i)})
	}
	if n.Catalog.ContentDigest != "g" || len(n.History) != HistoryLen || n.History[0].ContentDigest != "f" || n.History[4].ContentDigest != "b" {
		t.Errorf("catalog %v history %v", n.Catalog, n.History)
	}
}

func TestSlotPending(t *testing.T) {
	n := Node{CandidateRequested: &CompileRequest{Seq: 3}}
	if n.Pending() || !n.SlotPending(SlotCandidate) {
		t.Fatalf("served pending %v, candidate pending %v", n.Pending(), n.SlotPending(SlotCandidate))
	}
	n.Candidate = &CatalogRef{Seq: 3}
	if n.SlotPending(SlotCandidate) {
		t.Errorf("candidate still pending after its catalog")
	}
}

// TestSlotServedEncoding: the served slot is encoded as no slot at all, so
// jobs in queues and records written before slots existed (and by every
// version since) read as served, and a served job's key is its certname.
func TestSlotServedEncoding(t *testing.T) {
	tests := []struct {
		name    string
		slot    Slot
		wantKey string
	}{
		{"served", SlotServed, "web01"},
		{"candidate", SlotCandidate, "web01#candidate"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			j := Job{Certname: "web01", Slot: tt.slot}
			b, err := json.Marshal(j)
			if err != nil {
				t.Fatal(err)
			}
			var fields map[string]any
			if err := json.Unmarshal(b, &fields); err != nil {
				t.Fatal(err)
			}
			if got, ok := fields["slot"]; ok != (tt.slot != SlotServed) || ok && got != string(tt.slot) {
				t.Errorf("encoded %s: slot field %v (present %v)", b, got, ok)
			}
			var back Job
			if err := json.Unmarshal(b, &back); err != nil || back.Slot != tt.slot {
				t.Errorf("decoded slot %q (%v), want %q", back.Slot, err, tt.slot)
			}
			if k := j.Key(); k != tt.wantKey {
				t.Errorf("Key() = %q, want %q", k, tt.wantKey)
			}
		})
	}
	var old Job
	if err := json.Unmarshal([]byte(`{"certname":"web01","seq":3}`), &old); err != nil || old.Slot != SlotServed {
		t.Errorf("a job without a slot decodes to slot %q (%v), want the served slot", old.Slot, err)
	}
}

package farm

import (
	"encoding/json"
	"fmt"
	"reflect"
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

// TestSlot: Node.Slot views the fields of the slot it is asked for, and
// answers Pending and Holds from them.
func TestSlot(t *testing.T) {
	req := func(seq uint64) *CompileRequest { return &CompileRequest{Seq: seq} }
	cat := func(seq uint64, content Digest) *CatalogRef { return &CatalogRef{Seq: seq, ContentDigest: content} }
	st := func(seq uint64) *CompileStatus { return &CompileStatus{Seq: seq, Result: ResultFailed} }
	tests := []struct {
		name      string
		node      Node
		slot      Slot
		want      SlotState
		pending   bool
		holds     Digest // content Holds is asked about
		wantHolds bool
	}{
		{name: "served, empty", slot: SlotServed},
		{name: "served, requested", node: Node{Requested: req(2)}, slot: SlotServed,
			want: SlotState{Requested: req(2)}, pending: true},
		{name: "served, answered by a catalog", node: Node{Requested: req(2), Catalog: cat(2, "a")}, slot: SlotServed,
			want: SlotState{Requested: req(2), Catalog: cat(2, "a")}, holds: "a", wantHolds: true},
		{name: "served, older catalog", node: Node{Requested: req(3), Catalog: cat(2, "a")}, slot: SlotServed,
			want: SlotState{Requested: req(3), Catalog: cat(2, "a")}, pending: true, holds: "b"},
		{name: "served, answered by a failed compile", node: Node{Requested: req(3), Catalog: cat(2, "a"), Compile: st(3)}, slot: SlotServed,
			want: SlotState{Requested: req(3), Catalog: cat(2, "a"), Compile: st(3)}},
		{name: "served ignores the candidate", node: Node{CandidateRequested: req(3), Candidate: cat(1, "a")}, slot: SlotServed, holds: "a"},
		{name: "candidate, requested", node: Node{Requested: req(2), Catalog: cat(2, "a"), CandidateRequested: req(3)}, slot: SlotCandidate,
			want: SlotState{Requested: req(3)}, pending: true, holds: "a"},
		{name: "candidate, answered", node: Node{CandidateRequested: req(3), Candidate: cat(3, "b"), CandidateCompile: st(2)}, slot: SlotCandidate,
			want: SlotState{Requested: req(3), Catalog: cat(3, "b"), Compile: st(2)}, holds: "b", wantHolds: true},
		{name: "candidate, failed", node: Node{CandidateRequested: req(3), CandidateCompile: st(3)}, slot: SlotCandidate,
			want: SlotState{Requested: req(3), Compile: st(3)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.node.Slot(tt.slot)
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("Slot(%q) = %+v, want %+v", tt.slot, got, tt.want)
			}
			if got.Pending() != tt.pending {
				t.Errorf("Pending() = %v, want %v", got.Pending(), tt.pending)
			}
			if tt.holds != "" && got.Holds(tt.holds) != tt.wantHolds {
				t.Errorf("Holds(%s) = %v, want %v", tt.holds, got.Holds(tt.holds), tt.wantHolds)
			}
			if want := tt.node.Slot(SlotServed).Pending(); tt.node.Pending() != want {
				t.Errorf("Node.Pending() = %v, the served slot's %v", tt.node.Pending(), want)
			}
		})
	}
}

// TestSlotSetters: SetCompiled and SetCompileStatus write the slot they
// are given and no other; the served slot keeps a replaced catalog of
// other content in History, the candidate slot keeps none; DropCandidate
// empties the candidate slot only.
func TestSlotSetters(t *testing.T) {
	ref := func(seq uint64, content Digest) CatalogRef { return CatalogRef{Seq: seq, ContentDigest: content} }
	ok := func(seq uint64) CompileStatus { return CompileStatus{Seq: seq, Result: ResultOK} }
	full := func() Node {
		a, b, c := ref(1, "a"), ref(2, "c"), ok(1)
		d := ok(2)
		return Node{
			Requested: &CompileRequest{Seq: 1}, Catalog: &a, Compile: &c,
			CandidateRequested: &CompileRequest{Seq: 2}, Candidate: &b, CandidateCompile: &d,
		}
	}
	tests := []struct {
		name string
		set  func(n *Node)
		want func(n *Node) // applied to full() to give the expected node
	}{
		{"served compiled, new content", func(n *Node) { n.SetCompiled(SlotServed, ref(3, "b"), ok(3)) },
			func(n *Node) {
				a, b, s := ref(1, "a"), ref(3, "b"), ok(3)
				n.Catalog, n.Compile, n.History = &b, &s, []CatalogRef{a}
			}},
		{"served compiled, same content", func(n *Node) { n.SetCompiled(SlotServed, ref(3, "a"), ok(3)) },
			func(n *Node) {
				a, s := ref(3, "a"), ok(3)
				n.Catalog, n.Compile = &a, &s
			}},
		{"candidate compiled, new content", func(n *Node) { n.SetCompiled(SlotCandidate, ref(3, "b"), ok(3)) },
			func(n *Node) {
				b, s := ref(3, "b"), ok(3)
				n.Candidate, n.CandidateCompile = &b, &s
			}},
		{"served status", func(n *Node) { n.SetCompileStatus(SlotServed, CompileStatus{Seq: 3, Result: ResultFailed}) },
			func(n *Node) { n.Compile = &CompileStatus{Seq: 3, Result: ResultFailed} }},
		{"candidate status", func(n *Node) { n.SetCompileStatus(SlotCandidate, CompileStatus{Seq: 3, Result: ResultFailed}) },
			func(n *Node) { n.CandidateCompile = &CompileStatus{Seq: 3, Result: ResultFailed} }},
		{"drop candidate", func(n *Node) { n.DropCandidate() },
			func(n *Node) { n.CandidateRequested, n.Candidate, n.CandidateCompile = nil, nil, nil }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, want := full(), full()
			tt.set(&got)
			tt.want(&want)
			if !reflect.DeepEqual(got, want) {
				t.Errorf("node\n got %+v\nwant %+v", got, want)
			}
		})
	}

	// The setters copy: what the caller passed is not the node's.
	var n Node
	r, s := ref(1, "a"), ok(1)
	n.SetCompiled(SlotCandidate, r, s)
	r.Seq, s.Seq = 9, 9
	if n.Candidate == nil || n.Candidate.Seq != 1 || n.CandidateCompile.Seq != 1 {
		t.Errorf("candidate %+v, status %+v: changed with the caller's values", n.Candidate, n.CandidateCompile)
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

package intake_test

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/compilefarm/compilefarm/internal/flowtest"
	"github.com/compilefarm/compilefarm/pkg/facts"
	"github.com/compilefarm/compilefarm/pkg/farm"
	"github.com/compilefarm/compilefarm/pkg/intake"
)

// TestIntakeRecordsWhatChanged: a compile request says what made the farm
// queue it: the reads of the catalog's record that changed, with their old
// and new values, or the input that changed; an upload that changes only
// facts no catalog depends on records nothing and queues nothing.
func TestIntakeRecordsWhatChanged(t *testing.T) {
	base := map[string]any{"cf_role": "web", "uptime_seconds": 10, "kernel": "6.1",
		"os": map[string]any{"family": "Debian", "release": map[string]any{"full": "12.10"}}}
	with := func(k string, v any) map[string]any { return flowtest.WithFact(base, k, v) }
	without := func(k string) map[string]any {
		m := flowtest.WithFact(base, k, nil)
		delete(m, k)
		return m
	}
	manyReads := []string{"a", "b", "c", "d", "e", "f", "g"}
	many := func(v int) map[string]any {
		m := flowtest.WithFact(base, "x", 0)
		for _, k := range manyReads {
			m[k] = v
		}
		return m
	}
	change := func(path, old, new string) string {
		return fmt.Sprintf(`{"path":%s,"kind":"value","old":%s,"new":%s}`, path, old, new)
	}
	tests := []struct {
		name        string
		reads       []string // nil: the engine records no reads
		first, next map[string]any
		newCode     bool
		wantReason  string // "": nothing queued, the request unchanged
		wantChanges string // JSON of the request's changes
		wantCause   *farm.RequestCause
	}{
		{"read fact changed", []string{"cf_role", "os.release.full"}, base,
			with("os", map[string]any{"family": "Debian", "release": map[string]any{"full": "12.11"}}),
			false, farm.ReasonFactsChanged, "[" + change(`["os","release","full"]`, `"12.10"`, `"12.11"`) + "]", nil},
		{"read fact gone", []string{"cf_role"}, base, without("cf_role"),
			false, farm.ReasonFactsChanged, `[{"path":["cf_role"],"kind":"value","old":"web","new_missing":true}]`, nil},
		{"read fact appears", []string{"cf_role", "cf_note"}, base, with("cf_note", 1.5),
			false, farm.ReasonFactsChanged, `[{"path":["cf_note"],"kind":"value","new":1.5,"old_missing":true}]`, nil},
		{"volatile fact changed", []string{"cf_role"}, base, with("uptime_seconds", 99), false, "", "", nil},
		{"unread fact changed", []string{"cf_role"}, base, with("kernel", "6.2"), false, "", "", nil},
		{"more reads changed than kept", manyReads, many(1), many(2),
			false, farm.ReasonFactsChanged, "[" + change(`["a"]`, "1", "2") + "," + change(`["b"]`, "1", "2") + "," +
				change(`["c"]`, "1", "2") + "," + change(`["d"]`, "1", "2") + "," + change(`["e"]`, "1", "2") + "]",
			&farm.RequestCause{Note: "more than 5 reads changed; the first 5 are listed"}},
		{"no read record, volatile fact changed", nil, base, with("uptime_seconds", 99), false, "", "", nil},
		{"no read record, relevant fact changed", nil, base, with("kernel", "6.2"), false, farm.ReasonFactsChanged, "null",
			&farm.RequestCause{Input: farm.CauseRelevant, Note: "no read record; relevant facts digest changed"}},
		{"code changed", []string{"cf_role"}, base, base, true, farm.ReasonCodeChanged, "null",
			&farm.RequestCause{Input: farm.CauseCodeID, Old: "code1", New: "code2"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := flowtest.New(t)
			r.Engine.Reads = tt.reads
			r.Submit(t, "n1", tt.first)
			r.Drain(t)
			before, _ := r.Store.GetNode(context.Background(), "n1")
			if tt.newCode {
				r.Store.PutEnvironment(context.Background(), farm.Environment{Name: "production", CodeID: "code2"})
			}
			out := r.Submit(t, "n1", tt.next)
			if out.Reason != tt.wantReason || out.Queued != (tt.wantReason != "") {
				t.Fatalf("queued=%v reason=%q, want reason %q", out.Queued, out.Reason, tt.wantReason)
			}
			n, _ := r.Store.GetNode(context.Background(), "n1")
			if tt.wantReason == "" {
				if n.RequestSeq != before.RequestSeq || n.Requested.Changes != nil || n.Requested.Cause != nil {
					t.Errorf("nothing queued, yet the request is %+v (was seq %d)", n.Requested, before.RequestSeq)
				}
				return
			}
			if got, _ := json.Marshal(n.Requested.Changes); string(got) != tt.wantChanges {
				t.Errorf("changes recorded:\n %s\nwant\n %s", got, tt.wantChanges)
			}
			got := n.Requested.Cause
			if got != nil && got.Input == farm.CauseRelevant {
				// The digests are the node's before and after.
				if got.Old != string(before.RelevantDigest) || got.New != string(n.RelevantDigest) || got.Old == got.New {
					t.Errorf("relevant digest change %s -> %s, want %s -> %s", got.Old, got.New, before.RelevantDigest, n.RelevantDigest)
				}
				got = &farm.RequestCause{Input: got.Input, Note: got.Note}
			}
			if !reflect.DeepEqual(got, tt.wantCause) {
				t.Errorf("cause = %+v, want %+v", got, tt.wantCause)
			}
		})
	}
}

// TestIntakeRecordsNodeChange: a change of trusted extensions records the
// node information digests it went between.
func TestIntakeRecordsNodeChange(t *testing.T) {
	r := flowtest.New(t)
	r.Engine.Reads = []string{"cf_role"}
	values := map[string]any{"cf_role": "web"}
	submit := func(role string) intake.Outcome {
		doc := flowtest.FactsDoc("n1", values)
		out, err := r.Intake.Submit(context.Background(), intake.Upload{Certname: "n1", Environment: "production",
			Facts: facts.JSONDocument(doc), TrustedExtensions: map[string]string{"pp_role": role}})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	submit("web")
	r.Drain(t)
	before, _ := r.Store.GetNode(context.Background(), "n1")
	out := submit("db")
	if out.Reason != farm.ReasonNodeChanged {
		t.Fatalf("reason %q, want %q", out.Reason, farm.ReasonNodeChanged)
	}
	c := out.Node.Requested.Cause
	if c == nil || c.Input != farm.CauseNodeInfo || c.Old != string(before.NodeInfo) || c.New != string(out.Node.NodeInfo) || c.Old == c.New {
		t.Errorf("cause = %+v, want node_info %s -> %s", c, before.NodeInfo, out.Node.NodeInfo)
	}
	if len(out.Node.Requested.Changes) != 0 {
		t.Errorf("a node change lists fact changes: %+v", out.Node.Requested.Changes)
	}
}

// TestIntakeRecordsChangeWhilePending: an upload that changes a read fact
// again while a compile is pending lists the change from what the current
// catalog read, and says so.
func TestIntakeRecordsChangeWhilePending(t *testing.T) {
	r := flowtest.New(t)
	r.Engine.Reads = []string{"cf_role"}
	r.Submit(t, "n1", map[string]any{"cf_role": "web"})
	r.Drain(t)
	if out := r.Submit(t, "n1", map[string]any{"cf_role": "db"}); !out.Queued {
		t.Fatal("a read fact change queued nothing")
	}
	out := r.Submit(t, "n1", map[string]any{"cf_role": "app"})
	if !out.Queued || out.Reason != farm.ReasonFactsChanged {
		t.Fatalf("queued=%v reason=%q, want %q", out.Queued, out.Reason, farm.ReasonFactsChanged)
	}
	req := out.Node.Requested
	if got, _ := json.Marshal(req.Changes); string(got) != `[{"path":["cf_role"],"kind":"value","old":"web","new":"app"}]` {
		t.Errorf("changes = %s, want cf_role web -> app", got)
	}
	if req.Cause == nil || !strings.Contains(req.Cause.Note, "a compile was pending") {
		t.Errorf("cause = %+v, want a note that a compile was pending", req.Cause)
	}
}

package intake_test

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/compilefarm/compilefarm/internal/flowtest"
	"github.com/compilefarm/compilefarm/pkg/classifier"
	"github.com/compilefarm/compilefarm/pkg/facts"
	"github.com/compilefarm/compilefarm/pkg/farm"
	"github.com/compilefarm/compilefarm/pkg/intake"
	"github.com/compilefarm/compilefarm/pkg/nodeinfo"
)

func TestIntakeDecides(t *testing.T) {
	base := map[string]any{"cf_role": "web", "uptime_seconds": 10, "os": map[string]any{"family": "Debian"}}
	with := func(k string, v any) map[string]any { return flowtest.WithFact(base, k, v) }
	tests := []struct {
		name       string
		second     map[string]any
		newCode    bool
		wantQueued bool
		wantReason string
	}{
		{"same facts", base, false, false, ""},
		{"volatile fact changed", with("uptime_seconds", 99), false, false, ""},
		{"used fact changed", with("cf_role", "db"), false, true, farm.ReasonFactsChanged},
		{"new fact", with("extra", true), false, true, farm.ReasonFactsChanged},
		{"code changed", base, true, true, farm.ReasonCodeChanged},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := flowtest.New(t)
			first := r.Submit(t, "n1", base)
			if !first.Queued || first.Reason != farm.ReasonNewNode {
				t.Fatalf("first upload: %+v, want queued new-node", first)
			}
			r.Drain(t)
			if tt.newCode {
				r.Store.PutEnvironment(context.Background(), farm.Environment{Name: "production", CodeID: "code2"})
			}
			out := r.Submit(t, "n1", tt.second)
			if out.Queued != tt.wantQueued || out.Reason != tt.wantReason {
				t.Errorf("second upload: queued=%v reason=%q, want %v %q", out.Queued, out.Reason, tt.wantQueued, tt.wantReason)
			}
		})
	}
}

func TestIntakeRefusesBadInput(t *testing.T) {
	r := flowtest.New(t)
	ctx := context.Background()
	tests := []struct {
		name string
		up   intake.Upload
		want error
	}{
		{"bad certname", intake.Upload{Certname: "Bad/Name", Environment: "production"}, farm.ErrInvalid},
		{"bad environment", intake.Upload{Certname: "n1", Environment: "../x"}, farm.ErrInvalid},
		{"unknown environment", intake.Upload{Certname: "n1", Environment: "staging"}, farm.ErrNotFound},
		{"facts not json", intake.Upload{Certname: "n1", Environment: "production",
			Facts: facts.JSONDocument([]byte("{"))}, farm.ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := r.Intake.Submit(ctx, tt.up); !errors.Is(err, tt.want) {
				t.Fatalf("Submit = %v, want %v", err, tt.want)
			}
			if _, err := r.Store.GetNode(ctx, "n1"); !errors.Is(err, farm.ErrNotFound) {
				t.Errorf("a node was stored after refused input: %v", err)
			}
		})
	}
}

// TestIntakeRawKeySkipsDecode: an upload whose facts repeat, byte for
// byte as sent, those of the node's last recorded upload is known
// unchanged without its document being read (facts.Upload.RawKey),
// whatever else its form holds; any other is read. A catalog request's
// facts and a document are other facts even with the same bytes.
func TestIntakeRawKeySkipsDecode(t *testing.T) {
	r := flowtest.New(t)
	reads := intake.CountDocumentReads(t)
	web := flowtest.FactsDoc("n1", map[string]any{"cf_role": "web"})
	db := flowtest.FactsDoc("n1", map[string]any{"cf_role": "db"})
	plus := flowtest.FactsDoc("n1", map[string]any{"cf_role": "a+b"})
	// A form whose facts parameter is plus, as is: '+' is a space there.
	plusForm, _ := facts.CatalogForm(append([]byte("facts="), plus...))
	steps := []struct {
		name  string
		up    facts.Upload
		reads int    // documents read after the step
		holds []byte // the facts the node holds after
	}{
		{"first upload", catalogForm(t, web, queryEscapeTwice, "t-1"), 1, web},
		{"the same facts in another run's form", catalogForm(t, web, queryEscapeTwice, "t-2"), 1, web},
		{"the same again", catalogForm(t, web, queryEscapeTwice, "t-2"), 1, web},
		{"the same facts otherwise encoded", catalogForm(t, web, escapeOuterAll, "t-3"), 2, web},
		{"the same facts as a document", facts.JSONDocument(web), 3, web},
		{"other facts", catalogForm(t, db, queryEscapeTwice, "t-4"), 4, db},
		{"back to the first", catalogForm(t, web, queryEscapeTwice, "t-5"), 5, web},
		{"a document", facts.JSONDocument(plus), 6, plus},
		{"the same document", facts.JSONDocument(plus), 6, plus},
		{"a form whose facts are the document's bytes", plusForm, 7, flowtest.FactsDoc("n1", map[string]any{"cf_role": "a b"})},
	}
	for _, s := range steps {
		if _, err := r.Intake.Submit(context.Background(), intake.Upload{Certname: "n1", Environment: "production", Facts: s.up}); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if *reads != s.reads {
			t.Errorf("%s: %d documents read, want %d", s.name, *reads, s.reads)
		}
		if n := r.Node(t, "n1"); n.FactsDigest != farm.DigestOf(s.holds) {
			t.Errorf("%s: the node holds facts %s, want %s", s.name, n.FactsDigest, farm.DigestOf(s.holds))
		}
	}
}

// TestRequeuePending loses a queued job (as a crash between recording the
// request and queueing it would) and checks that RequeuePending restores it.
func TestRequeuePending(t *testing.T) {
	r := flowtest.New(t)
	r.Submit(t, "n1", map[string]any{"cf_role": "web"})
	r.Submit(t, "n2", map[string]any{"cf_role": "web"})
	r.Drain(t) // both compiled
	r.Submit(t, "n1", map[string]any{"cf_role": "db"})
	// Drop n1's job on the floor.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	d, err := r.Queue.Receive(ctx)
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	r.Queue.Ack(context.Background(), d)

	n, err := r.Intake.RequeuePending(context.Background())
	if err != nil || n != 1 {
		t.Fatalf("RequeuePending = %d, %v; want 1 (only n1 is pending)", n, err)
	}
	r.Drain(t)
	node, _ := r.Store.GetNode(context.Background(), "n1")
	if node.Pending() || node.Catalog == nil || node.Catalog.Seq != node.Requested.Seq {
		t.Errorf("n1 after requeue: %+v", node)
	}
}

// TestIntakeUsesRecordedReads: with a record of the facts a catalog read,
// only changes to those facts compile; the volatile list no longer matters.
func TestIntakeUsesRecordedReads(t *testing.T) {
	base := map[string]any{"cf_role": "web", "kernel": "6.1", "uptime_seconds": 10}
	with := func(k string, v any) map[string]any { return flowtest.WithFact(base, k, v) }
	tests := []struct {
		name       string
		second     map[string]any
		wantQueued bool
		relevant   bool // a non-volatile fact changed (Outcome.FactsChanged once stored)
	}{
		{"unread fact changed", with("kernel", "6.2"), false, true},
		{"new unread fact", with("extra", 1), false, true},
		{"volatile fact changed", with("uptime_seconds", 99), false, false},
		{"read fact changed", with("cf_role", "db"), true, true},
		{"read fact changed type", with("cf_role", 1), true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := flowtest.New(t)
			r.Engine.Reads = []string{"cf_role"}
			r.Submit(t, "n1", base)
			r.Drain(t)
			out := r.Submit(t, "n1", tt.second)
			if out.Queued != tt.wantQueued {
				t.Errorf("queued = %v (%s), want %v", out.Queued, out.Reason, tt.wantQueued)
			}
			if out.FactsChanged != tt.wantQueued {
				t.Errorf("FactsChanged = %v, want %v (stored facts change only with a compile)", out.FactsChanged, tt.wantQueued)
			}
			// With WholeFacts (a PuppetDB to feed), any non-volatile
			// change is stored and said at once, compile or not.
			w := flowtest.New(t)
			w.Engine.Reads = []string{"cf_role"}
			w.Intake.WholeFacts = true
			w.Submit(t, "n1", base)
			w.Drain(t)
			if out := w.Submit(t, "n1", tt.second); out.FactsChanged != tt.relevant || out.Queued != tt.wantQueued {
				t.Errorf("WholeFacts: FactsChanged = %v, queued = %v; want %v, %v", out.FactsChanged, out.Queued, tt.relevant, tt.wantQueued)
			}
			// An upload that queues nothing is not written until the
			// facts are FactsRefresh old; then the node takes them.
			n, _ := r.Store.GetNode(context.Background(), "n1")
			latest := farm.DigestOf(flowtest.FactsDoc("n1", tt.second))
			if tt.wantQueued != (n.FactsDigest == latest) {
				t.Errorf("facts written = %v, want %v (only with a compile)", n.FactsDigest == latest, tt.wantQueued)
			}
			now := time.Now().Add(time.Hour)
			r.Intake.Now = func() time.Time { return now }
			refreshed := r.Submit(t, "n1", tt.second)
			if n, _ := r.Store.GetNode(context.Background(), "n1"); n.FactsDigest != latest {
				t.Errorf("facts not refreshed after FactsRefresh")
			}
			if want := tt.relevant && !tt.wantQueued; refreshed.FactsChanged != want {
				t.Errorf("refresh: FactsChanged = %v, want %v (a non-volatile change stored only now)", refreshed.FactsChanged, want)
			}
		})
	}
}

// TestPendingCompileJudgedByReads: while a node's recompile is queued,
// uploads that change only unread facts do not queue it again (each new
// request would supersede the compile in flight).
func TestPendingCompileJudgedByReads(t *testing.T) {
	r := flowtest.New(t)
	r.Engine.Reads = []string{"cf_role"}
	r.Submit(t, "n1", map[string]any{"cf_role": "web", "noise": 0})
	r.Drain(t)
	first := r.Submit(t, "n1", map[string]any{"cf_role": "db", "noise": 1})
	if !first.Queued {
		t.Fatal("a read fact change queued nothing")
	}
	for i := 2; i < 6; i++ {
		if out := r.Submit(t, "n1", map[string]any{"cf_role": "db", "noise": i}); out.Queued {
			t.Fatalf("upload %d (only an unread fact changed) queued a compile while one is pending", i)
		}
	}
	if out := r.Submit(t, "n1", map[string]any{"cf_role": "app", "noise": 9}); !out.Queued {
		t.Error("a read fact change while pending queued nothing")
	}
	n, _ := r.Store.GetNode(context.Background(), "n1")
	if n.RequestSeq != first.Node.RequestSeq+1 {
		t.Errorf("request seq went %d -> %d, want one more request", first.Node.RequestSeq, n.RequestSeq)
	}
}

// TestIntakeNodeInfo: the trusted extensions and the classifier's answer
// are compile inputs: a change of either queues a compile, an unchanged
// one does not, and the engine gets them.
func TestIntakeNodeInfo(t *testing.T) {
	values := map[string]any{"cf_role": "web"}
	web := map[string]string{"pp_role": "web"}
	base := classifier.Classification{Classes: []string{"role::web"}, Parameters: map[string]any{"tier": "gold"}}
	tests := []struct {
		name       string
		exts       map[string]string
		class      classifier.Classification
		wantQueued bool
		wantReason string
		wantEnv    string
	}{
		{"unchanged", web, base, false, "", "production"},
		{"extension changed (certificate re-issued)", map[string]string{"pp_role": "db"}, base, true, farm.ReasonNodeChanged, "production"},
		{"extension added", map[string]string{"pp_role": "web", "1.3.6.1.4.1.34380.1.2.1": "x"}, base, true, farm.ReasonNodeChanged, "production"},
		{"class added", web, classifier.Classification{Classes: []string{"role::web", "ntp"}, Parameters: base.Parameters}, true, farm.ReasonNodeChanged, "production"},
		{"parameter changed", web, classifier.Classification{Classes: base.Classes, Parameters: map[string]any{"tier": "silver"}}, true, farm.ReasonNodeChanged, "production"},
		{"classes as a hash", web, classifier.Classification{Classes: map[string]any{"role::web": nil}, Parameters: base.Parameters}, true, farm.ReasonNodeChanged, "production"},
		{"environment from the classifier", web, classifier.Classification{Classes: base.Classes, Parameters: base.Parameters, Environment: "staging"}, true, farm.ReasonCodeChanged, "staging"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := flowtest.New(t)
			ctx := context.Background()
			if err := r.Store.PutEnvironment(ctx, farm.Environment{Name: "staging", CodeID: "code-staging"}); err != nil {
				t.Fatal(err)
			}
			enc := &flowtest.Classifier{}
			r.Intake.Classifier = enc
			enc.Set("n1", base)
			if out, err := r.SubmitAs(t, "n1", "production", web, values); err != nil || !out.Queued {
				t.Fatalf("first check-in: %+v %v", out, err)
			}
			r.Drain(t)
			if got, want := r.Engine.GotNode("n1"), (nodeinfo.Info{TrustedExtensions: web, Classes: []string{"role::web"},
				Parameters: map[string]any{"tier": "gold"}}); !flowtest.SameJSON(got, want) {
				t.Fatalf("the engine got node information %+v, want %+v", got, want)
			}
			enc.Set("n1", tt.class)
			out, err := r.SubmitAs(t, "n1", "production", tt.exts, values)
			if err != nil {
				t.Fatal(err)
			}
			if out.Queued != tt.wantQueued || out.Reason != tt.wantReason {
				t.Errorf("second check-in: queued=%v reason=%q, want %v %q", out.Queued, out.Reason, tt.wantQueued, tt.wantReason)
			}
			if out.Node.Environment != tt.wantEnv {
				t.Errorf("node environment %q, want %q", out.Node.Environment, tt.wantEnv)
			}
			r.Drain(t)
			got := r.Engine.GotNode("n1")
			if !reflect.DeepEqual(got.TrustedExtensions, tt.exts) {
				t.Errorf("the engine got extensions %v, want %v", got.TrustedExtensions, tt.exts)
			}
			// The same answer again compiles nothing.
			if out, err := r.SubmitAs(t, "n1", "production", tt.exts, values); err != nil || out.Queued {
				t.Errorf("third check-in with the same inputs: %+v %v, want nothing queued", out, err)
			}
		})
	}
}

// TestIntakeClassifierFails: a failing classifier gives the caller Puppet's
// error, stores nothing but the failure, and a later success clears it.
func TestIntakeClassifierFails(t *testing.T) {
	r := flowtest.New(t)
	ctx := context.Background()
	enc := &flowtest.Classifier{}
	r.Intake.Classifier = enc
	values := map[string]any{"cf_role": "web"}

	// Unknown node: nothing but the failure is stored.
	_, err := r.SubmitAs(t, "n1", "production", nil, values)
	if !errors.Is(err, classifier.ErrFailed) || !strings.HasPrefix(err.Error(), "Failed when searching for node n1: Failed to find n1 via exec") {
		t.Fatalf("Submit with a failing classifier = %v, want Puppet's error wrapping classifier.ErrFailed", err)
	}
	n, err := r.Store.GetNode(ctx, "n1")
	if err != nil {
		t.Fatal(err)
	}
	if n.ClassifierFailure == nil || !strings.Contains(n.ClassifierFailure.Error, "unknown node") || n.FactsDigest != "" || n.Requested != nil {
		t.Fatalf("node after a failed classification: %+v", n)
	}
	if st, _ := r.Queue.Stats(ctx); st[0].Depth+st[1].Depth != 0 {
		t.Errorf("a compile was queued: %+v", st)
	}

	// Known node: its facts, catalog and requests stay as they were.
	enc.Set("n1", classifier.Classification{Classes: []string{"base"}})
	if _, err := r.SubmitAs(t, "n1", "production", nil, values); err != nil {
		t.Fatal(err)
	}
	r.Drain(t)
	before, _ := r.Store.GetNode(ctx, "n1")
	if before.ClassifierFailure != nil {
		t.Errorf("a successful classification kept the failure: %+v", before.ClassifierFailure)
	}
	enc.Forget("n1")
	if _, err := r.SubmitAs(t, "n1", "production", nil, flowtest.WithFact(values, "cf_role", "db")); !errors.Is(err, classifier.ErrFailed) {
		t.Fatalf("Submit = %v, want the classifier's failure", err)
	}
	after, _ := r.Store.GetNode(ctx, "n1")
	if after.ClassifierFailure == nil {
		t.Fatal("failure not recorded")
	}
	after.ClassifierFailure = nil
	if !reflect.DeepEqual(before, after) {
		t.Errorf("a failed classification changed the node:\nbefore %+v\nafter  %+v", before, after)
	}
}

// TestDroppedCandidateIsRetired: a candidate the node no longer needs (the
// environment went back to the code it is served) is dropped, and its
// catalog retired; a promoted candidate is not, nor the catalog it
// replaces.
func TestDroppedCandidateIsRetired(t *testing.T) {
	r := flowtest.New(t)
	r.Engine.CodeInCatalog = true
	ctx := context.Background()
	r.Submit(t, "n1", map[string]any{"cf_role": "web"})
	r.Submit(t, "n2", map[string]any{"cf_role": "web"})
	r.Drain(t)
	// A deploy under hold precompiles code2 as a candidate.
	r.Store.PutEnvironment(ctx, farm.Environment{Name: "production", CodeID: "code2", Release: &farm.Release{Hold: true, Stable: "code1"}})
	if _, err := r.Intake.Replan(ctx, "production", farm.LaneBulk); err != nil {
		t.Fatal(err)
	}
	r.Drain(t)
	node := func(name string) farm.Node {
		t.Helper()
		n, err := r.Store.GetNode(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	cand := node("n1").Candidate
	if cand == nil || cand.CodeID != "code2" {
		t.Fatalf("no code2 candidate after a deploy under hold: %+v", cand)
	}
	retired := func(d farm.Digest) bool {
		t.Helper()
		ok, err := r.Store.Retired(ctx, farm.SpaceCatalogs, d)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	// n2 is released: its candidate is promoted, nothing retired.
	r.Store.PutEnvironment(ctx, farm.Environment{Name: "production", CodeID: "code2",
		Release: &farm.Release{Hold: true, Stable: "code1", Nodes: []string{"n2"}}})
	if res, err := r.Intake.Replan(ctx, "production", farm.LaneBulk); err != nil || res.Promoted != 1 {
		t.Fatalf("release to n2: %+v, %v", res, err)
	}
	n2 := node("n2")
	for _, d := range n2.CatalogBlobs() {
		if retired(d) {
			t.Errorf("n2's blob %s retired after its candidate was promoted", d)
		}
	}
	// Back to code1 for everyone: n1's candidate goes.
	r.Store.PutEnvironment(ctx, farm.Environment{Name: "production", CodeID: "code1"})
	if _, err := r.Intake.Replan(ctx, "production", farm.LaneBulk); err != nil {
		t.Fatal(err)
	}
	if n := node("n1"); n.Candidate != nil {
		t.Fatalf("n1 keeps its candidate after the deploy went back: %+v", n.Candidate)
	}
	for _, d := range []farm.Digest{cand.Digest, cand.GzipDigest} {
		if !retired(d) {
			t.Errorf("blob %s of the dropped candidate is not retired", d)
		}
	}
	n1 := node("n1")
	for _, d := range n1.CatalogBlobs() {
		if retired(d) {
			t.Errorf("n1's blob %s retired", d)
		}
	}
}

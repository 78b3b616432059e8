package compiler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/compilefarm/compilefarm/pkg/classifier"
	"github.com/compilefarm/compilefarm/pkg/farm"
)

// tableClassifier answers from a table the test changes; a node missing from
// it fails, as a classifier that does not know it.
type tableClassifier struct {
	mu      sync.Mutex
	answers map[string]classifier.Classification
	calls   int
}

func (c *tableClassifier) Classify(ctx context.Context, certname string) (classifier.Classification, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls++
	a, ok := c.answers[certname]
	if !ok {
		return classifier.Classification{}, fmt.Errorf("Failed to find %s via exec: Execution of '/enc %s' returned 1: unknown node: %w",
			certname, certname, classifier.ErrFailed)
	}
	return a, nil
}

func (c *tableClassifier) set(certname string, a classifier.Classification) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.answers == nil {
		c.answers = map[string]classifier.Classification{}
	}
	c.answers[certname] = a
}

func (c *tableClassifier) forget(certname string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.answers, certname)
}

func (r *rig) submitAs(t *testing.T, name, env string, exts map[string]string, values map[string]any) (Outcome, error) {
	t.Helper()
	doc := factsDoc(name, values)
	return r.intake.Submit(context.Background(), Upload{Certname: name, Environment: env, TrustedExtensions: exts,
		Document: func() ([]byte, error) { return doc, nil }})
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
			r := newRig(t)
			ctx := context.Background()
			if err := r.store.PutEnvironment(ctx, farm.Environment{Name: "staging", CodeID: "code-staging"}); err != nil {
				t.Fatal(err)
			}
			enc := &tableClassifier{}
			r.intake.Classifier = enc
			enc.set("n1", base)
			if out, err := r.submitAs(t, "n1", "production", web, values); err != nil || !out.Queued {
				t.Fatalf("first check-in: %+v %v", out, err)
			}
			r.drain(t)
			if got, want := r.engine.gotNode["n1"], (NodeInfo{TrustedExtensions: web, Classes: []string{"role::web"},
				Parameters: map[string]any{"tier": "gold"}}); !sameAsJSON(got, want) {
				t.Fatalf("the engine got node information %+v, want %+v", got, want)
			}
			enc.set("n1", tt.class)
			out, err := r.submitAs(t, "n1", "production", tt.exts, values)
			if err != nil {
				t.Fatal(err)
			}
			if out.Queued != tt.wantQueued || out.Reason != tt.wantReason {
				t.Errorf("second check-in: queued=%v reason=%q, want %v %q", out.Queued, out.Reason, tt.wantQueued, tt.wantReason)
			}
			if out.Node.Environment != tt.wantEnv {
				t.Errorf("node environment %q, want %q", out.Node.Environment, tt.wantEnv)
			}
			r.drain(t)
			got := r.engine.gotNode["n1"]
			if !reflect.DeepEqual(got.TrustedExtensions, tt.exts) {
				t.Errorf("the engine got extensions %v, want %v", got.TrustedExtensions, tt.exts)
			}
			// The same answer again compiles nothing.
			if out, err := r.submitAs(t, "n1", "production", tt.exts, values); err != nil || out.Queued {
				t.Errorf("third check-in with the same inputs: %+v %v, want nothing queued", out, err)
			}
		})
	}
}

// TestIntakeClassifierFails: a failing classifier gives the caller Puppet's
// error, stores nothing but the failure, and a later success clears it.
func TestIntakeClassifierFails(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	enc := &tableClassifier{}
	r.intake.Classifier = enc
	values := map[string]any{"cf_role": "web"}

	// Unknown node: nothing but the failure is stored.
	_, err := r.submitAs(t, "n1", "production", nil, values)
	if !errors.Is(err, classifier.ErrFailed) || !strings.HasPrefix(err.Error(), "Failed when searching for node n1: Failed to find n1 via exec") {
		t.Fatalf("Submit with a failing classifier = %v, want Puppet's error wrapping classifier.ErrFailed", err)
	}
	n, err := r.store.GetNode(ctx, "n1")
	if err != nil {
		t.Fatal(err)
	}
	if n.ClassifierFailure == nil || !strings.Contains(n.ClassifierFailure.Error, "unknown node") || n.FactsDigest != "" || n.Requested != nil {
		t.Fatalf("node after a failed classification: %+v", n)
	}
	if st, _ := r.queue.Stats(ctx); st[0].Depth+st[1].Depth != 0 {
		t.Errorf("a compile was queued: %+v", st)
	}

	// Known node: its facts, catalog and requests stay as they were.
	enc.set("n1", classifier.Classification{Classes: []string{"base"}})
	if _, err := r.submitAs(t, "n1", "production", nil, values); err != nil {
		t.Fatal(err)
	}
	r.drain(t)
	before, _ := r.store.GetNode(ctx, "n1")
	if before.ClassifierFailure != nil {
		t.Errorf("a successful classification kept the failure: %+v", before.ClassifierFailure)
	}
	enc.forget("n1")
	if _, err := r.submitAs(t, "n1", "production", nil, withFact(values, "cf_role", "db")); !errors.Is(err, classifier.ErrFailed) {
		t.Fatalf("Submit = %v, want the classifier's failure", err)
	}
	after, _ := r.store.GetNode(ctx, "n1")
	if after.ClassifierFailure == nil {
		t.Fatal("failure not recorded")
	}
	after.ClassifierFailure = nil
	if !reflect.DeepEqual(before, after) {
		t.Errorf("a failed classification changed the node:\nbefore %+v\nafter  %+v", before, after)
	}
}

// TestPoolClassifiesAgain: a pool with a classifier compiles with its
// current answer (a code deploy picks up new classes) and records it on the
// catalog, so the next check-in with that answer compiles nothing.
func TestPoolClassifiesAgain(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	enc := &tableClassifier{}
	r.intake.Classifier, r.pool.Classifier = enc, enc
	values := map[string]any{"cf_role": "web"}
	enc.set("n1", classifier.Classification{Classes: []string{"base"}})
	if _, err := r.submitAs(t, "n1", "production", nil, values); err != nil {
		t.Fatal(err)
	}
	r.drain(t)

	enc.set("n1", classifier.Classification{Classes: []string{"base", "ntp"}})
	if err := r.store.PutEnvironment(ctx, farm.Environment{Name: "production", CodeID: "code2"}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.intake.Requeue(ctx, "production", farm.LaneBulk); err != nil {
		t.Fatal(err)
	}
	r.drain(t)
	if got := r.engine.gotNode["n1"].Classes; !sameAsJSON(got, []string{"base", "ntp"}) {
		t.Fatalf("the deploy's compile got classes %v, want the classifier's current answer", got)
	}
	n, _ := r.store.GetNode(ctx, "n1")
	if n.Catalog == nil || n.Catalog.NodeInfo == n.Requested.NodeInfo {
		t.Fatalf("the catalog does not record the compile's own classification: %+v", n.Catalog)
	}
	calls := r.engine.count()
	if out, err := r.submitAs(t, "n1", "production", nil, values); err != nil || out.Queued {
		t.Errorf("check-in with the classification the catalog has: %+v %v, want nothing queued", out, err)
	}
	if r.engine.count() != calls {
		t.Errorf("compiled again")
	}

	// A failing classifier at compile time is retried, then recorded.
	if err := r.store.PutEnvironment(ctx, farm.Environment{Name: "production", CodeID: "code3"}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.intake.Requeue(ctx, "production", farm.LaneBulk); err != nil {
		t.Fatal(err)
	}
	enc.forget("n1")
	for i := 0; i < r.pool.MaxAttempts; i++ {
		r.drain(t)
	}
	n, _ = r.store.GetNode(ctx, "n1")
	if n.Compile == nil || n.Compile.Result != farm.ResultFailed || !strings.Contains(n.Compile.Error, "Failed when searching for node n1") {
		t.Errorf("compile status after the classifier failed: %+v", n.Compile)
	}
}

// sameAsJSON compares values as their JSON: node information read back
// from the store holds []any where the classifier gave []string.
func sameAsJSON(a, b any) bool {
	ja, errA := json.Marshal(a)
	jb, errB := json.Marshal(b)
	return errA == nil && errB == nil && string(ja) == string(jb)
}

func TestNodeInfoEncoding(t *testing.T) {
	in := NodeInfo{TrustedExtensions: map[string]string{"pp_role": "web"},
		Classes:    map[string]any{"ntp": map[string]any{"servers": []any{"a"}}, "motd": nil},
		Parameters: map[string]any{"i": json.Number("1"), "f": json.Number("1.0"), "s": "x"}}
	b, d, err := in.encode()
	if err != nil {
		t.Fatal(err)
	}
	back, err := decodeNodeInfo(b)
	if err != nil {
		t.Fatal(err)
	}
	b2, d2, err := back.encode()
	if err != nil {
		t.Fatal(err)
	}
	if d != d2 || string(b) != string(b2) {
		t.Errorf("encode(decode(x)) differs:\n%s\n%s", b, b2)
	}
	if !strings.Contains(string(b), `"f":1.0`) {
		t.Errorf("a Float parameter lost its kind: %s", b)
	}
	if b, d, err := (NodeInfo{}).encode(); err != nil || b != nil || d != "" {
		t.Errorf("empty node information encodes as %q, %q, %v; want no document and the empty digest", b, d, err)
	}
}

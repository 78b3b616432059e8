package compiler

import (
	"context"
	"errors"
	"testing"

	"github.com/compilefarm/compilefarm/pkg/farm"
)

// TestExplain follows one node through a compile, a fact change that is
// pending, then compiles that fail, and checks what Explain says of each.
func TestExplain(t *testing.T) {
	r := newRig(t)
	r.engine.reads = []string{"cf_role", "os.family", "os.release.full"}
	d := &Deployer{Content: r.store, Envs: r.store, Nodes: r.store, Intake: r.intake}
	ctx := context.Background()
	explain := func() Explanation {
		t.Helper()
		ex, err := d.Explain(ctx, "n1")
		if err != nil {
			t.Fatal(err)
		}
		return ex
	}
	if _, err := d.Explain(ctx, "n1"); !errors.Is(err, farm.ErrNotFound) {
		t.Fatalf("explain of an unknown node: %v, want ErrNotFound", err)
	}
	values := map[string]any{"cf_role": "web", "os": map[string]any{"family": "Debian", "release": map[string]any{"full": "12.10"}}}
	r.submit(t, "n1", values)
	r.drain(t)
	ex := explain()
	if ex.State != RequestCompiled || ex.Request.Reason != farm.ReasonNewNode || ex.CodeID != "code1" || ex.Environment != "production" {
		t.Errorf("after the first compile: %+v", ex)
	}
	if s := ex.Reads; s == nil || s.Reads != 3 || len(s.Facts) != 2 || s.Facts[0] != (FactReadCount{"os", 2}) || s.Facts[1] != (FactReadCount{"cf_role", 1}) {
		t.Errorf("read summary = %+v, want 3 reads: os 2, cf_role 1", s)
	}

	r.submit(t, "n1", withFact(values, "cf_role", "db"))
	if ex := explain(); ex.State != RequestPending || len(ex.Request.Changes) != 1 || ex.Request.Changes[0].Path[0] != "cf_role" {
		t.Errorf("with a fact change queued: state %q, request %+v", ex.State, ex.Request)
	}

	r.engine.fail = func(Request) error { return &CompileError{Message: "Evaluation Error: boom"} }
	r.drain(t)
	if ex := explain(); ex.State != RequestFailed || ex.Error != "Evaluation Error: boom" {
		t.Errorf("after a failed compile: state %q, error %q", ex.State, ex.Error)
	}
}

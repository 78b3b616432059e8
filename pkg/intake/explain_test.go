package intake_test

import (
	"context"
	"errors"
	"testing"

	"github.com/compilefarm/compilefarm/internal/flowtest"
	"github.com/compilefarm/compilefarm/pkg/compiler"
	"github.com/compilefarm/compilefarm/pkg/farm"
	"github.com/compilefarm/compilefarm/pkg/intake"
)

// TestExplain follows one node through a compile, a fact change that is
// pending, then compiles that fail, and checks what Explain says of each.
func TestExplain(t *testing.T) {
	r := flowtest.New(t)
	r.Engine.Reads = []string{"cf_role", "os.family", "os.release.full"}
	d := r.Intake
	ctx := context.Background()
	explain := func() intake.Explanation {
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
	r.Submit(t, "n1", values)
	r.Drain(t)
	ex := explain()
	if ex.State != intake.RequestCompiled || ex.Request.Reason != farm.ReasonNewNode || ex.CodeID != "code1" || ex.Environment != "production" {
		t.Errorf("after the first compile: %+v", ex)
	}
	if s := ex.Reads; s == nil || s.Reads != 3 || len(s.Facts) != 2 || s.Facts[0] != (intake.FactReadCount{"os", 2}) || s.Facts[1] != (intake.FactReadCount{"cf_role", 1}) {
		t.Errorf("read summary = %+v, want 3 reads: os 2, cf_role 1", s)
	}

	r.Submit(t, "n1", flowtest.WithFact(values, "cf_role", "db"))
	if ex := explain(); ex.State != intake.RequestPending || len(ex.Request.Changes) != 1 || ex.Request.Changes[0].Path[0] != "cf_role" {
		t.Errorf("with a fact change queued: state %q, request %+v", ex.State, ex.Request)
	}

	r.Engine.Fail = func(compiler.Request) error { return &compiler.CompileError{Message: "Evaluation Error: boom"} }
	r.Drain(t)
	if ex := explain(); ex.State != intake.RequestFailed || ex.Error != "Evaluation Error: boom" {
		t.Errorf("after a failed compile: state %q, error %q", ex.State, ex.Error)
	}
}

package intake_test

import (
	"context"
	"testing"
	"time"

	"github.com/compilefarm/compilefarm/internal/flowtest"
	"github.com/compilefarm/compilefarm/pkg/compiler"
	"github.com/compilefarm/compilefarm/pkg/farm"
)

// TestIntakeRetriesFailedCompiles: a node whose compile failed is compiled
// again at a check-in with the same inputs once FailedRetry has passed (what
// failed may have been mended outside its inputs: a classifier, a key, an
// engine), not before; a node with a catalog for its inputs never is.
func TestIntakeRetriesFailedCompiles(t *testing.T) {
	tests := []struct {
		name       string
		fail       error
		after      time.Duration
		wantQueued bool
	}{
		{"code error, just now", &compiler.CompileError{Message: "Evaluation Error: key missing"}, time.Minute, false},
		{"code error, after the retry interval", &compiler.CompileError{Message: "Evaluation Error: key missing"}, 11 * time.Minute, true},
		{"engine failure, after the retry interval", farm.ErrTransient, 11 * time.Minute, true},
		{"no failure", nil, time.Hour, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := flowtest.New(t)
			now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
			clock := func() time.Time { return now }
			r.Intake.Now, r.Pool.Now = clock, clock
			r.Intake.FailedRetry = 10 * time.Minute
			failing := tt.fail
			r.Engine.Fail = func(compiler.Request) error { return failing }
			values := map[string]any{"cf_role": "web"}
			r.Submit(t, "n1", values)
			for i := 0; i < r.Pool.MaxAttempts; i++ {
				r.Drain(t)
			}
			n, _ := r.Store.GetNode(context.Background(), "n1")
			if tt.fail != nil && (n.Compile == nil || n.Compile.Result != farm.ResultFailed) {
				t.Fatalf("compile status %+v, want failed", n.Compile)
			}

			failing = nil // mended outside the node's inputs
			now = now.Add(tt.after)
			out := r.Submit(t, "n1", values)
			if out.Queued != tt.wantQueued || (tt.wantQueued && out.Reason != farm.ReasonRetry) {
				t.Fatalf("check-in %s later: queued=%v reason=%q, want queued=%v", tt.after, out.Queued, out.Reason, tt.wantQueued)
			}
			r.Drain(t)
			if n, _ := r.Store.GetNode(context.Background(), "n1"); tt.wantQueued && n.Catalog == nil {
				t.Errorf("the retried compile left no catalog: %+v", n.Compile)
			}
		})
	}
}

package intake_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/compilefarm/compilefarm/internal/flowtest"
	"github.com/compilefarm/compilefarm/pkg/farm"
)

// TestIntakeReusesClockCatalogs: a catalog that read the current time is
// served for ClockMaxAge after its latest compile (an unchanged recompile
// counts), then the next check-in compiles it again, whether its facts
// changed (volatile ones) or not at all; a change of a fact it reads
// compiles it at once.
func TestIntakeReusesClockCatalogs(t *testing.T) {
	tests := []struct {
		name       string
		after      time.Duration
		next       map[string]any
		wantReason string
	}{
		{"volatile facts changed, soon after", 10 * time.Minute, map[string]any{"cf_role": "web", "uptime_seconds": 99}, ""},
		{"same facts, soon after", 10 * time.Minute, map[string]any{"cf_role": "web", "uptime_seconds": 10}, ""},
		{"read fact changed, soon after", time.Minute, map[string]any{"cf_role": "db", "uptime_seconds": 10}, farm.ReasonFactsChanged},
		{"volatile facts changed, an hour after", time.Hour, map[string]any{"cf_role": "web", "uptime_seconds": 99}, farm.ReasonClock},
		{"same facts, an hour after", time.Hour, map[string]any{"cf_role": "web", "uptime_seconds": 10}, farm.ReasonClock},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := flowtest.New(t)
			now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
			clock := func() time.Time { return now }
			r.Intake.Now, r.Pool.Now = clock, clock
			r.Intake.ClockMaxAge = time.Hour
			r.Engine.Reads, r.Engine.Clock = []string{"cf_role"}, true
			r.Submit(t, "n1", map[string]any{"cf_role": "web", "uptime_seconds": 10})
			r.Drain(t)

			now = now.Add(tt.after)
			out := r.Submit(t, "n1", tt.next)
			if out.Reason != tt.wantReason || out.Queued != (tt.wantReason != "") {
				t.Fatalf("check-in %s later: queued=%v reason=%q, want reason %q", tt.after, out.Queued, out.Reason, tt.wantReason)
			}
			if tt.wantReason != farm.ReasonClock {
				return
			}
			n, _ := r.Store.GetNode(context.Background(), "n1")
			if c := n.Requested.Cause; c == nil || !strings.Contains(c.Note, "reads the clock (Timestamp.now") || !strings.Contains(c.Note, "compiled 1h0m0s ago") {
				t.Errorf("request cause %+v, want the clock and the catalog's age", c)
			}
			// The recompile gives the same catalog: its compile time is
			// what counts from now on.
			r.Drain(t)
			if n, _ := r.Store.GetNode(context.Background(), "n1"); n.Compile == nil || n.Compile.Result != farm.ResultUnchanged {
				t.Fatalf("compile status %+v, want unchanged", n.Compile)
			}
			now = now.Add(30 * time.Minute)
			if out := r.Submit(t, "n1", map[string]any{"cf_role": "web", "uptime_seconds": 5}); out.Queued {
				t.Errorf("check-in 30m after the unchanged recompile queued %q", out.Reason)
			}
			now = now.Add(30 * time.Minute)
			if out := r.Submit(t, "n1", map[string]any{"cf_role": "web", "uptime_seconds": 6}); out.Reason != farm.ReasonClock {
				t.Errorf("check-in an hour after the unchanged recompile: queued=%v %q, want clock", out.Queued, out.Reason)
			}
		})
	}
}

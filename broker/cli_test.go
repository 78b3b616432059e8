package main

import (
	"strings"
	"testing"
	"time"

	"github.com/compilefarm/compilefarm/pkg/release"
)

func TestStatusLine(t *testing.T) {
	tests := []struct {
		name    string
		st      release.DeployStatus
		done0   int
		elapsed time.Duration
		want    string
	}{
		{"rate and ETA", release.DeployStatus{Environment: "production", CodeID: "abcdef0123456789", Nodes: 200, Compiled: 100, Queued: 100},
			50, 10 * time.Second, "production abcdef012345  100/200 done: compiled 100, unchanged 0, failed 0; queued 100  (5.0/s, ETA 20s)"},
		{"sub-second ETA rounds", release.DeployStatus{Environment: "p", Nodes: 10, Compiled: 9, Queued: 1},
			0, 3 * time.Second, "(3.0/s, ETA 0s)"},
		{"nothing finished yet", release.DeployStatus{Environment: "p", Nodes: 10, Queued: 10},
			0, time.Second, "(0.0/s, ETA -)"},
		{"done", release.DeployStatus{Environment: "p", Nodes: 2, Compiled: 1, Unchanged: 1},
			0, time.Second, "2/2 done: compiled 1, unchanged 1, failed 0; queued 0  (2.0/s, ETA done)"},
		{"not yet queued counts as waiting", release.DeployStatus{Environment: "p", Nodes: 3, Other: 3},
			0, time.Second, "queued 3"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := statusLine(tt.st, tt.done0, tt.elapsed); !strings.Contains(got, tt.want) {
				t.Errorf("statusLine = %q, want it to contain %q", got, tt.want)
			}
		})
	}
}

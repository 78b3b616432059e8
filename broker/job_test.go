package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/compilefarm/compilefarm/internal/flowtest"
	"github.com/compilefarm/compilefarm/pkg/admin"
	"github.com/compilefarm/compilefarm/pkg/farm"
	"github.com/compilefarm/compilefarm/pkg/pcp/jobs"
	"github.com/compilefarm/compilefarm/pkg/pcp/message"
	"github.com/compilefarm/compilefarm/pkg/release"
)

// pxpAgents plays the PCP broker and the nodes' pxp-agents for the job
// runner: a node named gone* is not connected, bad* runs Puppet with exit
// code 1, the others with 0 (changed once, unchanged after).
type pxpAgents struct{ runner *jobs.Runner }

func (p *pxpAgents) URI() string { return "pcp://broker.test/controller" }

func (p *pxpAgents) Connected(ctx context.Context, uri string) (bool, error) {
	return !strings.HasPrefix(uri, "pcp://gone"), nil
}

func (p *pxpAgents) Send(ctx context.Context, m *message.Message) error {
	var d struct {
		TransactionID string `json:"transaction_id"`
	}
	json.Unmarshal(m.Data, &d)
	result := map[string]any{"exitcode": 0, "status": "changed", "transaction_uuid": "uuid-" + d.TransactionID[:8], "version": 1}
	if strings.HasPrefix(m.Targets[0], "pcp://bad") {
		result = map[string]any{"exitcode": 1, "status": "failed", "transaction_uuid": "uuid-" + d.TransactionID[:8], "version": 1,
			"error_type": "agent_exit_non_zero", "error": "Puppet agent exited with a non 0 exitcode"}
	}
	for _, a := range []struct {
		typ  string
		data any
	}{
		{"http://puppetlabs.com/rpc_provisional_response", map[string]any{"transaction_id": d.TransactionID}},
		{"http://puppetlabs.com/rpc_non_blocking_response", map[string]any{"transaction_id": d.TransactionID, "results": result}},
	} {
		b, _ := json.Marshal(a.data)
		go p.runner.Deliver(&message.Message{ID: "a", MessageType: a.typ, Sender: m.Targets[0], Targets: []string{m.Sender}, Data: b})
	}
	return nil
}

// jobRig is a farm (flowtest) with a job runner and its operator API on a
// loopback listener.
type jobRig struct {
	farm  *flowtest.Rig
	admin string // --admin URL
}

func newJobRig(t *testing.T) *jobRig {
	t.Helper()
	f := flowtest.New(t)
	agents := &pxpAgents{}
	runner := jobs.New(jobs.Config{Store: f.Store, Presence: agents, Messenger: agents, Nodes: f.Store, Name: "task-1",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	agents.runner = runner
	t.Cleanup(runner.Close)
	d := &release.Deployer{Content: f.Store, Envs: f.Store, Nodes: f.Store, Intake: f.Intake}
	srv := httptest.NewServer(adminHandler(&admin.Server{Nodes: f.Store, Envs: f.Store, Deployer: d, Jobs: runner}))
	t.Cleanup(srv.Close)
	return &jobRig{farm: f, admin: srv.URL}
}

func TestJobRun(t *testing.T) {
	r := newJobRig(t)
	tests := []struct {
		name     string
		args     []string
		wantErr  string   // "" none
		wantOut  []string // lines or parts of them, in order
		notInOut string
		anyOrder []string // lines or parts of them anywhere in the output
	}{
		// Two nodes at a time finish in either order.
		{"all finished", []string{"--nodes", "a.test,b.test"}, "", []string{
			"job ", " started: 2 nodes, 10 at a time, 30m0s per run", " finished: 2 nodes — 2 finished"}, "failed",
			[]string{"  a.test finished, exit 0, changed", "  b.test finished, exit 0, changed"}},
		{"one failed", []string{"--nodes", "a.test,bad.test", "--concurrency", "1"}, "1 of 2 nodes failed or were unreachable", []string{
			"started: 2 nodes, 1 at a time",
			"  a.test finished, exit 0, changed",
			"  bad.test failed, exit 1, failed: agent_exit_non_zero: Puppet agent exited with a non 0 exitcode",
			" failed: 2 nodes — 1 finished, 1 failed"}, "", nil},
		{"unreachable", []string{"--nodes", "gone.test", "--noop", "--timeout", "1m"}, "1 of 1 nodes failed or were unreachable", []string{
			"started: 1 nodes (noop), 10 at a time, 1m0s per run",
			"  gone.test unreachable: no PXP agent is connected as pcp://gone.test/agent",
			" failed: 1 nodes — 1 unreachable"}, "", nil},
		{"no nodes", nil, "give --nodes a,b or --environment ENV", nil, "", nil},
		{"both", []string{"--nodes", "a.test", "--environment", "production"}, "not both", nil, "", nil},
		{"concurrency 0", []string{"--nodes", "a.test", "--concurrency", "0"}, "--concurrency 0: give at least 1", nil, "", nil},
		{"bad certname", []string{"--nodes", "A B"}, "certname", nil, "", nil},
		{"environment without nodes", []string{"--environment", "empty"}, "environment empty has no nodes", nil, "", nil},
		{"backend aws", []string{"--nodes", "a.test", "--backend", "aws"}, "use --admin https://HOST:8140 --cert FILE", nil, "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			args := append([]string{"run", "--admin", r.admin, "--poll", "5ms"}, tt.args...)
			err := jobCommand(t.Context(), args, &out)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("job %v: %v\n%s", args, err, out.String())
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("job %v = %v, want an error with %q\n%s", args, err, tt.wantErr, out.String())
			}
			rest := out.String()
			for _, w := range tt.wantOut {
				i := strings.Index(rest, w)
				if i < 0 {
					t.Fatalf("output lacks %q (in order):\n%s", w, out.String())
				}
				rest = rest[i+len(w):]
			}
			for _, w := range tt.anyOrder {
				if !strings.Contains(out.String(), w) {
					t.Errorf("output lacks %q:\n%s", w, out.String())
				}
			}
			if tt.notInOut != "" && strings.Contains(out.String(), tt.notInOut) {
				t.Errorf("output has %q:\n%s", tt.notInOut, out.String())
			}
		})
	}
}

func TestJobShowAndList(t *testing.T) {
	r := newJobRig(t)
	ctx := t.Context()
	run := func(nodes string) string {
		var out bytes.Buffer
		jobCommand(ctx, []string{"run", "--nodes", nodes, "--admin", r.admin, "--poll", "5ms"}, &out)
		id, _, _ := strings.Cut(strings.TrimPrefix(out.String(), "job "), " ")
		return id
	}
	first, second := run("a.test,bad.test,gone.test"), run("c.test")
	var out bytes.Buffer
	if err := jobCommand(ctx, []string{"show", first, "--admin", r.admin}, &out); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	wantLines := []string{
		"job " + first + " failed: nodes; started ",
		"NODE       STATE        EXIT  STATUS   REPORT",
		"a.test     finished     0     changed  transaction uuid-",
		"bad.test   failed       1     failed   transaction uuid-",
		"gone.test  unreachable  -     -        -",
	}
	if len(lines) != len(wantLines) {
		t.Fatalf("job show:\n%s", out.String())
	}
	for i, w := range wantLines {
		if !strings.HasPrefix(lines[i], w) {
			t.Errorf("line %d: %q, want it to start with %q", i, lines[i], w)
		}
	}
	if !strings.Contains(lines[0], "by loopback on task-1, 10 at a time, 30m0s per run; 3 nodes — 1 finished, 1 failed, 1 unreachable") ||
		!strings.HasSuffix(lines[3], "agent_exit_non_zero: Puppet agent exited with a non 0 exitcode") {
		t.Errorf("job show:\n%s", out.String())
	}

	out.Reset()
	if err := jobCommand(ctx, []string{"list", "--admin", r.admin, "--limit", "1"}, &out); err != nil {
		t.Fatal(err)
	}
	if s := out.String(); !strings.Contains(s, second+"  finished") || strings.Contains(s, first) || !strings.Contains(s, "more: broker job list --after ") {
		t.Errorf("job list --limit 1:\n%s", s)
	}
	out.Reset()
	if err := jobCommand(ctx, []string{"list", "--admin", r.admin}, &out); err != nil {
		t.Fatal(err)
	}
	if s := out.String(); strings.Index(s, second) > strings.Index(s, first) || !strings.Contains(s, "1 finished, 1 failed, 1 unreachable") {
		t.Errorf("job list, newest first:\n%s", s)
	}
	if err := jobCommand(ctx, []string{"show", "no-such-job", "--admin", r.admin}, &out); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf("job show of an unknown job: %v", err)
	}
}

// TestReleaseRun: release --run runs the nodes the release reached, and
// only those.
func TestReleaseRun(t *testing.T) {
	r := newJobRig(t)
	ctx := t.Context()
	var names []string
	for i := range 20 {
		names = append(names, fmt.Sprintf("n%02d.example.test", i))
		r.farm.Submit(t, names[i], map[string]any{"cf_role": "web"})
	}
	r.farm.Drain(t)
	// Hold, then a deploy: new code precompiled, released to no node.
	if err := runRelease(ctx, []string{"production", "--hold", "--admin", r.admin}); err != nil {
		t.Fatal(err)
	}
	if err := r.farm.Store.PutEnvironment(ctx, farm.Environment{Name: "production", CodeID: "code2", Release: &farm.Release{Hold: true, Stable: "code1"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.farm.Intake.Requeue(ctx, "production", farm.LaneBulk); err != nil {
		t.Fatal(err)
	}
	r.farm.Drain(t)

	if err := runRelease(ctx, []string{"production", "--hold", "--run", "--admin", r.admin}); err == nil || !strings.Contains(err.Error(), "--hold releases no node") {
		t.Errorf("release --hold --run = %v", err)
	}
	tests := []struct {
		name string
		args []string
		want func(string) bool // which nodes the job runs
	}{
		{"named nodes", []string{"--nodes", names[3]}, func(n string) bool { return n == names[3] }},
		{"a share", []string{"--percent", "50", "--run-concurrency", "3"}, func(n string) bool {
			return n == names[3] || farm.ReleaseBucket(n) < 50
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"production", "--run", "--admin", r.admin}, tt.args...)
			if err := runRelease(ctx, args); err != nil {
				t.Fatalf("release %v: %v", args, err)
			}
			page, err := r.farm.Store.ListJobs(ctx, farm.RunJobQuery{Limit: 1})
			if err != nil || len(page.Jobs) != 1 {
				t.Fatalf("jobs: %+v %v", page, err)
			}
			job := page.Jobs[0]
			if job.State != farm.JobFinished || job.Release != "production@code2" {
				t.Errorf("job %+v", job)
			}
			nodes, err := r.farm.Store.ListJobNodes(ctx, farm.RunJobNodeQuery{Job: job.ID, Limit: farm.MaxNodePage})
			if err != nil {
				t.Fatal(err)
			}
			var got, want []string
			for _, n := range nodes.Nodes {
				got = append(got, n.Node)
			}
			for _, n := range names {
				if tt.want(n) {
					want = append(want, n)
				}
			}
			if !slices.Equal(got, want) || len(want) == 0 {
				t.Errorf("the job ran %v, want %v", got, want)
			}
		})
	}
}

func TestProgressLine(t *testing.T) {
	tests := []struct {
		job  farm.RunJob
		want string
	}{
		{farm.RunJob{ID: "j1", State: farm.JobRunning, Total: 3, Counts: map[string]int{farm.JobNodeFinished: 2, farm.JobNodeRunning: 1}},
			"job j1 running: 3 nodes — 1 running, 2 finished"},
		{farm.RunJob{ID: "j2", State: farm.JobFailed, Total: 4, Counts: map[string]int{farm.JobNodeUnreachable: 1, farm.JobNodeFailed: 1, farm.JobNodeFinished: 2}},
			"job j2 failed: 4 nodes — 2 finished, 1 failed, 1 unreachable"},
		{farm.RunJob{ID: "j3", State: farm.JobRunning}, "job j3 running: 0 nodes — none"},
	}
	for _, tt := range tests {
		if got := progressLine(tt.job); got != tt.want {
			t.Errorf("progressLine = %q, want %q", got, tt.want)
		}
	}
}

package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/compilefarm/compilefarm/pkg/farm"
	"github.com/compilefarm/compilefarm/pkg/memstore"
	"github.com/compilefarm/compilefarm/pkg/pcp/message"
)

// agent is how a fake pxp-agent answers: run answers a run request,
// status a status query about transaction tx.
type agent struct {
	run    func(f *fakeBroker, req *message.Message, tx string)
	status func(f *fakeBroker, req *message.Message, tx, queried string)
}

// fakeBroker plays the broker and the nodes' pxp-agents at the runner's
// consumer interfaces (Messenger, Presence), answering as pxp-agent does
// on the wire (third_party/pcp-client/README.md, sections 5 and 6).
type fakeBroker struct {
	t      *testing.T
	runner *Runner
	agents map[string]agent // by node; a node without one is not connected

	mu       sync.Mutex
	requests []*message.Message // run requests, in order
	inflight int                // runs requested and not answered finally
	maxIn    int
}

func (f *fakeBroker) URI() string { return "pcp://broker.test/controller" }

func (f *fakeBroker) Connected(ctx context.Context, uri string) (bool, error) {
	node := strings.TrimSuffix(strings.TrimPrefix(uri, "pcp://"), "/agent")
	_, ok := f.agents[node]
	return ok, nil
}

func (f *fakeBroker) Send(ctx context.Context, m *message.Message) error {
	if len(m.Targets) != 1 || m.Sender != f.URI() || m.Expires.IsZero() || m.ID == "" {
		f.t.Errorf("message %+v: want one target, the runner's sender, an expiry and an id", m)
	}
	node := strings.TrimSuffix(strings.TrimPrefix(m.Targets[0], "pcp://"), "/agent")
	a := f.agents[node]
	var d struct {
		TransactionID string `json:"transaction_id"`
		Params        struct {
			TransactionID string `json:"transaction_id"`
		} `json:"params"`
	}
	if err := json.Unmarshal(m.Data, &d); err != nil {
		f.t.Errorf("request data %s: %v", m.Data, err)
	}
	switch m.MessageType {
	case typeNonBlockingRequest:
		f.mu.Lock()
		f.requests = append(f.requests, m)
		f.inflight++
		f.maxIn = max(f.maxIn, f.inflight)
		f.mu.Unlock()
		go a.run(f, m, d.TransactionID)
	case typeBlockingRequest:
		if a.status == nil {
			go f.reply(m, typeBlockingResponse, map[string]any{"transaction_id": d.TransactionID,
				"results": map[string]any{"transaction_id": d.Params.TransactionID, "status": "unknown"}})
			return nil
		}
		go a.status(f, m, d.TransactionID, d.Params.TransactionID)
	default:
		f.t.Errorf("unexpected message type %s", m.MessageType)
	}
	return nil
}

// reply delivers an answer from req's target to the runner, as the broker
// would (no in-reply-to: pxp-agent sets none).
func (f *fakeBroker) reply(req *message.Message, messageType string, data any) {
	b, _ := json.Marshal(data)
	f.runner.Deliver(&message.Message{ID: newID(), MessageType: messageType, Sender: req.Targets[0],
		Targets: []string{req.Sender}, Expires: time.Now().Add(5 * time.Second), Data: b})
}

// final sends a run's final answer and counts the run as ended.
func (f *fakeBroker) final(req *message.Message, tx string, results map[string]any) {
	f.mu.Lock()
	f.inflight--
	f.mu.Unlock()
	f.reply(req, typeNonBlockingResponse, map[string]any{"transaction_id": tx, "results": results})
}

func puppetResult(exit int, status, errType, errText string) map[string]any {
	return map[string]any{"kind": "apply", "time": "2026-11-26T05:00:00Z", "transaction_uuid": "uuid-" + status,
		"environment": "production", "status": status, "metrics": map[string]any{}, "exitcode": exit, "version": 1,
		"error_type": errType, "error": errText}
}

// runs answers a run request with a provisional answer and then result.
func runs(result map[string]any) agent {
	return agent{run: func(f *fakeBroker, req *message.Message, tx string) {
		f.reply(req, typeProvisional, map[string]any{"transaction_id": tx})
		f.final(req, tx, result)
	}}
}

var (
	agentOK      = runs(puppetResult(0, "unchanged", "", ""))
	agentChanged = runs(puppetResult(2, "changed", "", ""))
	agentFails   = runs(puppetResult(1, "failed", "agent_exit_non_zero", "Puppet agent exited with a non 0 exitcode"))
	// agentRPCError has no pxp-module-puppet.
	agentRPCError = agent{run: func(f *fakeBroker, req *message.Message, tx string) {
		f.mu.Lock()
		f.inflight--
		f.mu.Unlock()
		f.reply(req, typeRPCError, map[string]any{"transaction_id": tx, "id": req.ID, "description": "unknown module pxp-module-puppet"})
	}}
	// agentGone disconnected between the presence check and the send.
	agentGone = agent{run: func(f *fakeBroker, req *message.Message, tx string) {
		f.mu.Lock()
		f.inflight--
		f.mu.Unlock()
		b, _ := json.Marshal(map[string]any{"id": req.ID, "description": "not connected"})
		f.runner.Deliver(&message.Message{ID: newID(), MessageType: typeError, Sender: "pcp:///server",
			Targets: []string{req.Sender}, InReplyTo: req.ID, Data: b})
	}}
	// agentSilent never answers.
	agentSilent = agent{run: func(*fakeBroker, *message.Message, string) {}}
	// agentStuck starts the run and never ends it.
	agentStuck = agent{
		run: func(f *fakeBroker, req *message.Message, tx string) {
			f.reply(req, typeProvisional, map[string]any{"transaction_id": tx})
		},
		status: func(f *fakeBroker, req *message.Message, tx, queried string) {
			f.reply(req, typeBlockingResponse, map[string]any{"transaction_id": tx,
				"results": map[string]any{"transaction_id": queried, "status": "running"}})
		},
	}
	// agentLostFinal ran, but its final answer was lost: the status query
	// tells.
	agentLostFinal = agent{
		run: func(f *fakeBroker, req *message.Message, tx string) {
			f.reply(req, typeProvisional, map[string]any{"transaction_id": tx})
		},
		status: statusSays("failure", 2, puppetResult(2, "changed", "agent_exit_non_zero", "Puppet agent exited with a non 0 exitcode")),
	}
)

// statusSays answers a status query: the run ended with exit and stdout.
func statusSays(status string, exit int, stdout map[string]any) func(*fakeBroker, *message.Message, string, string) {
	return func(f *fakeBroker, req *message.Message, tx, queried string) {
		out, _ := json.Marshal(stdout)
		f.reply(req, typeBlockingResponse, map[string]any{"transaction_id": tx,
			"results": map[string]any{"transaction_id": queried, "status": status, "exitcode": exit, "stdout": string(out)}})
	}
}

// rig is a runner over memstore with a fake broker.
type rig struct {
	store  *memstore.Store
	broker *fakeBroker
	runner *Runner
}

func newRig(t *testing.T, agents map[string]agent, cfg Config) *rig {
	t.Helper()
	st := memstore.New()
	f := &fakeBroker{t: t, agents: agents}
	cfg.Store, cfg.Presence, cfg.Messenger = st, f, f
	if cfg.Nodes == nil {
		cfg.Nodes = st
	}
	if cfg.Name == "" {
		cfg.Name = "task-1"
	}
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	if cfg.StatusWait == 0 {
		cfg.StatusWait = 2 * time.Second
	}
	r := New(cfg)
	f.runner = r
	t.Cleanup(r.Close)
	return &rig{store: st, broker: f, runner: r}
}

// wait returns the job once it has ended.
func (r *rig) wait(t *testing.T, id string) farm.RunJob {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		j, err := r.store.GetJob(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		if j.State != farm.JobRunning {
			return j
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s still running: %+v", id, j)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (r *rig) nodes(t *testing.T, id string) map[string]farm.RunJobNode {
	t.Helper()
	page, err := r.store.ListJobNodes(t.Context(), farm.RunJobNodeQuery{Job: id, Limit: farm.MaxNodePage})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]farm.RunJobNode{}
	for _, n := range page.Nodes {
		out[n.Node] = n
	}
	return out
}

// want is a node's expected end.
type want struct {
	state, status, errHas string
	exit                  int // -1: none
}

func TestRun(t *testing.T) {
	tests := []struct {
		name      string
		agents    map[string]agent
		nodes     []string
		timeout   time.Duration
		wantState string
		want      map[string]want
	}{
		{"all finished", map[string]agent{"a.test": agentOK, "b.test": agentChanged, "c.test": agentOK},
			[]string{"a.test", "b.test", "c.test"}, time.Minute, farm.JobFinished, map[string]want{
				"a.test": {farm.JobNodeFinished, "unchanged", "", 0},
				"b.test": {farm.JobNodeFinished, "changed", "", 2},
				"c.test": {farm.JobNodeFinished, "unchanged", "", 0},
			}},
		{"one failed exit code", map[string]agent{"a.test": agentOK, "b.test": agentFails},
			[]string{"a.test", "b.test"}, time.Minute, farm.JobFailed, map[string]want{
				"a.test": {farm.JobNodeFinished, "unchanged", "", 0},
				"b.test": {farm.JobNodeFailed, "failed", "agent_exit_non_zero: Puppet agent exited", 1},
			}},
		{"unreachable", map[string]agent{"a.test": agentOK},
			[]string{"a.test", "gone.test"}, time.Minute, farm.JobFailed, map[string]want{
				"a.test":    {farm.JobNodeFinished, "unchanged", "", 0},
				"gone.test": {farm.JobNodeUnreachable, "", "no PXP agent is connected as pcp://gone.test/agent", -1},
			}},
		{"the broker says not connected", map[string]agent{"a.test": agentGone},
			[]string{"a.test"}, time.Minute, farm.JobFailed, map[string]want{
				"a.test": {farm.JobNodeUnreachable, "", "could not deliver the run request: not connected", -1},
			}},
		{"RPC error", map[string]agent{"a.test": agentRPCError},
			[]string{"a.test"}, time.Minute, farm.JobFailed, map[string]want{
				"a.test": {farm.JobNodeFailed, "", "could not run Puppet: unknown module pxp-module-puppet", -1},
			}},
		{"no answer", map[string]agent{"a.test": agentSilent},
			[]string{"a.test"}, 50 * time.Millisecond, farm.JobFailed, map[string]want{
				"a.test": {farm.JobNodeFailed, "", "timed out after 50ms: the agent never acknowledged", -1},
			}},
		{"started, never ended", map[string]agent{"a.test": agentStuck},
			[]string{"a.test"}, 50 * time.Millisecond, farm.JobFailed, map[string]want{
				"a.test": {farm.JobNodeFailed, "", "timed out after 50ms: the agent says the run is still going", -1},
			}},
		{"final answer lost, the status query tells", map[string]agent{"a.test": agentLostFinal},
			[]string{"a.test"}, 50 * time.Millisecond, farm.JobFinished, map[string]want{
				"a.test": {farm.JobNodeFinished, "changed", "", 2},
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t, tt.agents, Config{})
			job, err := r.runner.Start(t.Context(), Spec{Nodes: tt.nodes, Timeout: tt.timeout, Owner: "ops.test"})
			if err != nil {
				t.Fatal(err)
			}
			if err := farm.ValidateJobID(job.ID); err != nil {
				t.Fatal(err)
			}
			if job.State != farm.JobRunning || job.Total != len(tt.nodes) || job.Counts[farm.JobNodeQueued] != len(tt.nodes) ||
				job.Runner != "task-1" || job.Owner != "ops.test" || job.Concurrency != DefaultConcurrency {
				t.Errorf("started job = %+v", job)
			}
			end := r.wait(t, job.ID)
			if end.State != tt.wantState {
				t.Errorf("job state %s, want %s (%+v)", end.State, tt.wantState, end)
			}
			counts := map[string]int{}
			got := r.nodes(t, job.ID)
			for node, w := range tt.want {
				n := got[node]
				counts[n.State]++
				if n.State != w.state || n.Status != w.status || !strings.Contains(n.Error, w.errHas) || (w.errHas == "" && n.Error != "") {
					t.Errorf("%s: state %q status %q error %q, want %q %q %q", node, n.State, n.Status, n.Error, w.state, w.status, w.errHas)
				}
				switch {
				case w.exit < 0 && n.ExitCode != nil:
					t.Errorf("%s: exit code %d, want none", node, *n.ExitCode)
				case w.exit >= 0 && (n.ExitCode == nil || *n.ExitCode != w.exit):
					t.Errorf("%s: exit code %v, want %d", node, n.ExitCode, w.exit)
				}
				if w.status != "" && n.TransactionUUID != "uuid-"+w.status {
					t.Errorf("%s: transaction_uuid %q", node, n.TransactionUUID)
				}
			}
			if !mapsEqual(end.Counts, counts) || end.Total != len(tt.nodes) {
				t.Errorf("job counts %v total %d, want %v", end.Counts, end.Total, counts)
			}
		})
	}
}

func mapsEqual(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestRunRequest: the request is what pxp-module-puppet accepts (flags
// from its allow-list, the job id as "job", notify_outcome).
func TestRunRequest(t *testing.T) {
	for _, noop := range []bool{false, true} {
		t.Run(fmt.Sprint("noop=", noop), func(t *testing.T) {
			r := newRig(t, map[string]agent{"a.test": agentOK}, Config{})
			job, err := r.runner.Start(t.Context(), Spec{Nodes: []string{"a.test"}, Noop: noop})
			if err != nil {
				t.Fatal(err)
			}
			if end := r.wait(t, job.ID); end.Noop != noop || end.State != farm.JobFinished {
				t.Errorf("job %+v", end)
			}
			r.broker.mu.Lock()
			defer r.broker.mu.Unlock()
			if len(r.broker.requests) != 1 {
				t.Fatalf("%d run requests, want 1", len(r.broker.requests))
			}
			m := r.broker.requests[0]
			var d map[string]any
			json.Unmarshal(m.Data, &d)
			flags := "[]"
			if noop {
				flags = `["--noop"]`
			}
			wantData := fmt.Sprintf(`{"transaction_id":%q,"notify_outcome":true,"module":"pxp-module-puppet","action":"run","params":{"env":[],"flags":%s,"job":%q}}`,
				d["transaction_id"], flags, job.ID)
			if string(m.Data) != wantData || m.Targets[0] != "pcp://a.test/agent" {
				t.Errorf("request to %v: %s\nwant %s", m.Targets, m.Data, wantData)
			}
			if n := r.nodes(t, job.ID)["a.test"]; n.TransactionID != d["transaction_id"] {
				t.Errorf("node's transaction id %q, want the request's %q", n.TransactionID, d["transaction_id"])
			}
		})
	}
}

// TestConcurrency: never more than Concurrency runs in flight, and that
// many are.
func TestConcurrency(t *testing.T) {
	release := make(chan struct{})
	hold := agent{run: func(f *fakeBroker, req *message.Message, tx string) {
		f.reply(req, typeProvisional, map[string]any{"transaction_id": tx})
		<-release
		f.final(req, tx, puppetResult(0, "unchanged", "", ""))
	}}
	agents := map[string]agent{}
	var nodes []string
	for i := range 10 {
		n := fmt.Sprintf("n%02d.test", i)
		agents[n], nodes = hold, append(nodes, n)
	}
	r := newRig(t, agents, Config{})
	job, err := r.runner.Start(t.Context(), Spec{Nodes: nodes, Concurrency: 3})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		r.broker.mu.Lock()
		in := r.broker.inflight
		r.broker.mu.Unlock()
		if in == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d runs in flight, want 3", in)
		}
		time.Sleep(time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond) // room for a fourth, were the limit broken
	mid, _ := r.store.GetJob(t.Context(), job.ID)
	if mid.Counts[farm.JobNodeRunning] != 3 || mid.Counts[farm.JobNodeQueued] != 7 {
		t.Errorf("counts while held: %v, want 3 running and 7 queued", mid.Counts)
	}
	close(release)
	if end := r.wait(t, job.ID); end.State != farm.JobFinished || end.Counts[farm.JobNodeFinished] != 10 {
		t.Errorf("job %+v", end)
	}
	r.broker.mu.Lock()
	defer r.broker.mu.Unlock()
	if r.broker.maxIn != 3 {
		t.Errorf("at most %d runs in flight, want 3", r.broker.maxIn)
	}
}

// TestEnvironment: an environment's nodes, listed a page at a time.
func TestEnvironment(t *testing.T) {
	r := newRig(t, map[string]agent{"a.test": agentOK, "b.test": agentOK, "c.test": agentOK}, Config{})
	for _, n := range []string{"a.test", "b.test", "c.test", "other.test"} {
		env := "production"
		if n == "other.test" {
			env = "staging"
		}
		if _, err := r.store.UpdateNode(t.Context(), n, func(rec *farm.Node) error { rec.Environment = env; return nil }); err != nil {
			t.Fatal(err)
		}
	}
	pages := &countingLister{NodeLister: r.store}
	r.runner.cfg.Nodes = pages
	job, err := r.runner.Start(t.Context(), Spec{Environment: "production"})
	if err != nil {
		t.Fatal(err)
	}
	if end := r.wait(t, job.ID); end.State != farm.JobFinished || end.Total != 3 || end.Environment != "production" {
		t.Errorf("job %+v", end)
	}
	if _, err := r.runner.Start(t.Context(), Spec{Environment: "empty"}); !errors.Is(err, farm.ErrInvalid) || !strings.Contains(err.Error(), "has no nodes") {
		t.Errorf("a job of an environment without nodes: %v", err)
	}
	for _, q := range pages.queries {
		if q.Limit != farm.MaxNodePage {
			t.Errorf("query %+v: want pages of %d", q, farm.MaxNodePage)
		}
	}
}

type countingLister struct {
	NodeLister
	queries []farm.NodeQuery
}

func (c *countingLister) QueryNodes(ctx context.Context, q farm.NodeQuery) (farm.NodePage, error) {
	c.queries = append(c.queries, q)
	return c.NodeLister.QueryNodes(ctx, q)
}

func TestSpecValidate(t *testing.T) {
	tests := []struct {
		name    string
		spec    Spec
		wantErr string
	}{
		{"nodes", Spec{Nodes: []string{"b.test", "a.test", "b.test"}}, ""},
		{"environment", Spec{Environment: "production"}, ""},
		{"nothing", Spec{}, "needs nodes (--nodes a,b) or an environment"},
		{"both", Spec{Nodes: []string{"a.test"}, Environment: "production"}, "not both"},
		{"bad certname", Spec{Nodes: []string{"A B"}}, "certname"},
		{"bad environment", Spec{Environment: "no way"}, "environment"},
		{"negative concurrency", Spec{Nodes: []string{"a.test"}, Concurrency: -1}, "concurrency -1 must be between 1"},
		{"negative timeout", Spec{Nodes: []string{"a.test"}, Timeout: -time.Second}, "timeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := tt.spec
			err := s.Validate()
			if tt.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				if s.Concurrency != DefaultConcurrency || s.Timeout != DefaultTimeout {
					t.Errorf("defaults not applied: %+v", s)
				}
				if len(s.Nodes) > 0 && !slices.Equal(s.Nodes, []string{"a.test", "b.test"}) {
					t.Errorf("nodes %v, want sorted without repeats", s.Nodes)
				}
				return
			}
			if !errors.Is(err, farm.ErrInvalid) || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("Validate = %v, want ErrInvalid with %q", err, tt.wantErr)
			}
		})
	}
}

// TestResume: a runner that starts takes over the running jobs of the
// runner it replaces: queued nodes run, running ones are asked how their
// runs ended; a job another live runner is running is left alone.
func TestResume(t *testing.T) {
	now := time.Date(2026, 11, 26, 6, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	agents := map[string]agent{
		"queued.test": agentOK,
		"ended.test":  {status: statusSays("success", 0, puppetResult(0, "changed", "", ""))},
		"forgot.test": {}, // the status query says unknown
		"live.test":   agentOK,
	}
	r := newRig(t, agents, Config{Name: "task-2", Now: clock, StaleAfter: time.Minute})
	ctx := t.Context()
	create := func(id, runner string, updated time.Time, nodes []string) {
		t.Helper()
		j := farm.RunJob{ID: id, Created: updated, Updated: updated, State: farm.JobRunning, Concurrency: 2,
			Timeout: time.Hour, Runner: runner, Total: len(nodes), Counts: map[string]int{farm.JobNodeQueued: len(nodes)}}
		if err := r.store.CreateJob(ctx, j, nodes); err != nil {
			t.Fatal(err)
		}
	}
	create("old", "task-1", now.Add(-10*time.Minute), []string{"ended.test", "forgot.test", "queued.test"})
	create("live", "task-3", now.Add(-10*time.Second), []string{"live.test"})
	for node, tx := range map[string]string{"ended.test": "tx-ended", "forgot.test": "tx-forgot"} {
		if _, err := r.store.UpdateJobNode(ctx, "old", node, func(n *farm.RunJobNode) error {
			n.State, n.TransactionID = farm.JobNodeRunning, tx
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := r.store.UpdateJob(ctx, "old", func(j *farm.RunJob) error {
		j.Counts = map[string]int{farm.JobNodeQueued: 1, farm.JobNodeRunning: 2}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := r.runner.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	end := r.wait(t, "old")
	if end.State != farm.JobFailed || end.Runner != "task-2" || end.Counts[farm.JobNodeFinished] != 2 || end.Counts[farm.JobNodeFailed] != 1 {
		t.Errorf("resumed job %+v", end)
	}
	got := r.nodes(t, "old")
	if n := got["ended.test"]; n.State != farm.JobNodeFinished || n.Status != "changed" || n.ExitCode == nil || *n.ExitCode != 0 {
		t.Errorf("ended.test: %+v", n)
	}
	if n := got["forgot.test"]; n.State != farm.JobNodeFailed || !strings.Contains(n.Error, "runner restarted; result unknown") {
		t.Errorf("forgot.test: %+v", n)
	}
	if n := got["queued.test"]; n.State != farm.JobNodeFinished {
		t.Errorf("queued.test: %+v", n)
	}
	if live, _ := r.store.GetJob(ctx, "live"); live.State != farm.JobRunning || live.Runner != "task-3" {
		t.Errorf("a live runner's job was taken: %+v", live)
	}
}

// TestClose: a runner that stops leaves its jobs running, for Resume.
func TestClose(t *testing.T) {
	r := newRig(t, map[string]agent{"a.test": agentStuck}, Config{})
	job, err := r.runner.Start(t.Context(), Spec{Nodes: []string{"a.test"}, Timeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for r.nodes(t, job.ID)["a.test"].State != farm.JobNodeRunning {
		if time.Now().After(deadline) {
			t.Fatal("the node never ran")
		}
		time.Sleep(time.Millisecond)
	}
	r.runner.Close()
	if j, _ := r.store.GetJob(t.Context(), job.ID); j.State != farm.JobRunning {
		t.Errorf("job after Close: %+v", j)
	}
}

func TestStartWithoutBroker(t *testing.T) {
	r := New(Config{Store: memstore.New()})
	defer r.Close()
	if _, err := r.Start(t.Context(), Spec{Nodes: []string{"a.test"}}); !errors.Is(err, ErrNoBroker) {
		t.Errorf("Start without a messenger = %v, want ErrNoBroker", err)
	}
}

// nodeReader plays the node store for the report link: read answers the
// try-th read of a node's record.
type nodeReader struct {
	read func(try int) (farm.Node, error)

	mu    sync.Mutex
	reads int
}

func (n *nodeReader) GetNode(ctx context.Context, certname string) (farm.Node, error) {
	n.mu.Lock()
	n.reads++
	try := n.reads
	n.mu.Unlock()
	return n.read(try)
}

func (n *nodeReader) count() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.reads
}

// reportOf is a node whose latest report is run uuid's, kept in full
// when digest is set.
func reportOf(uuid string, digest farm.Digest) (farm.Node, error) {
	return farm.Node{Certname: "a.test", Report: &farm.ReportSummary{TransactionUUID: uuid, Digest: digest,
		Status: "unchanged", At: time.Now()}}, nil
}

// TestReportLink: a node's result links to its run's report when the
// farm kept it, read again while the node's latest report is an older
// run's, and never when there is no report to link.
func TestReportLink(t *testing.T) {
	d := farm.DigestOf([]byte(`{"host":"a.test"}`))
	const run = "uuid-unchanged" // agentOK's run
	tests := []struct {
		name      string
		agent     agent
		read      func(try int) (farm.Node, error) // nil: no Config.Reports
		wantLink  string
		wantReads int
	}{
		{"link set", agentOK, func(int) (farm.Node, error) { return reportOf(run, d) }, ReportPath + string(d), 1},
		{"summary only", agentOK, func(int) (farm.Node, error) { return reportOf(run, "") }, "", 1},
		{"report of another run", agentOK, func(int) (farm.Node, error) { return reportOf("uuid-older", d) }, "", 5},
		{"report arrives after the answer", agentOK, func(try int) (farm.Node, error) {
			if try < 3 {
				return reportOf("uuid-older", farm.DigestOf([]byte("older")))
			}
			return reportOf(run, d)
		}, ReportPath + string(d), 3},
		{"no report yet", agentOK, func(int) (farm.Node, error) { return farm.Node{Certname: "a.test"}, nil }, "", 5},
		{"no node record", agentOK, func(int) (farm.Node, error) { return farm.Node{}, fmt.Errorf("get node: %w", farm.ErrNotFound) }, "", 1},
		{"node store fails", agentOK, func(int) (farm.Node, error) { return farm.Node{}, errors.New("throttled") }, "", 5},
		{"run without a transaction uuid", agentRPCError, func(int) (farm.Node, error) { return reportOf(run, d) }, "", 0},
		{"no node reader", agentOK, nil, "", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var cfg Config
			reader := &nodeReader{read: tt.read}
			if tt.read != nil {
				cfg.Reports = reader
			}
			r := newRig(t, map[string]agent{"a.test": tt.agent}, cfg)
			r.runner.reportPause = time.Millisecond
			job, err := r.runner.Start(t.Context(), Spec{Nodes: []string{"a.test"}})
			if err != nil {
				t.Fatal(err)
			}
			r.wait(t, job.ID)
			n := r.nodes(t, job.ID)["a.test"]
			if n.ReportURL != tt.wantLink {
				t.Errorf("report link %q, want %q (%+v)", n.ReportURL, tt.wantLink, n)
			}
			if got := reader.count(); got != tt.wantReads {
				t.Errorf("%d reads of the node, want %d", got, tt.wantReads)
			}
		})
	}
}

// TestReportLinkClose: a runner that stops while it waits for a run's
// report stops waiting, and leaves the node running for Resume.
func TestReportLinkClose(t *testing.T) {
	reader := &nodeReader{read: func(int) (farm.Node, error) { return reportOf("uuid-older", "") }}
	r := newRig(t, map[string]agent{"a.test": agentOK}, Config{Reports: reader})
	r.runner.reportPause = time.Hour
	job, err := r.runner.Start(t.Context(), Spec{Nodes: []string{"a.test"}})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for reader.count() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the node's record was never read")
		}
		time.Sleep(time.Millisecond)
	}
	closed := make(chan struct{})
	go func() { r.runner.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close waited for the report")
	}
	if n := r.nodes(t, job.ID)["a.test"]; n.State != farm.JobNodeRunning || n.ReportURL != "" {
		t.Errorf("node after Close: %+v", n)
	}
}

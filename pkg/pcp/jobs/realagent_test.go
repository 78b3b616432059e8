package jobs_test

import (
	"context"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/compilefarm/compilefarm/internal/pcpclients"
	"github.com/compilefarm/compilefarm/pkg/farm"
	"github.com/compilefarm/compilefarm/pkg/memstore"
	"github.com/compilefarm/compilefarm/pkg/pcp/broker"
	"github.com/compilefarm/compilefarm/pkg/pcp/jobs"
)

// TestRealAgent runs jobs against a real pxp-agent (and its
// pxp-module-puppet, running a puppet agent that has no server to talk to,
// so every run fails with exit code 1: a valid PXP answer all the same)
// through the farm's PCP broker: the request's wire shape, the final
// answer, the status query after a timeout, and Resume after a restart.
func TestRealAgent(t *testing.T) {
	tools := pcpclients.Require(t)
	pki := pcpclients.NewPKI(t)
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	b, err := broker.New(broker.Options{Name: "task-1", Log: logger})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: b.Handler(), TLSConfig: pki.ServerTLS(t, "pcp-broker.test"), ErrorLog: log.New(io.Discard, "", 0)}
	go srv.ServeTLS(ln, "", "")
	t.Cleanup(func() { srv.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go b.Run(ctx)
	agent, err := tools.StartAgent(pcpclients.AgentOptions{Broker: "wss://" + ln.Addr().String() + "/pcp/",
		Identity: pki.Identity(t, "node1.test"), Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { agent.Stop() })
	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	defer wcancel()
	if err := agent.WaitReady(wctx); err != nil {
		t.Fatal(err)
	}
	store := memstore.New()
	// newRunner is a task's runner, attached to the broker.
	newRunner := func() *jobs.Runner {
		r := jobs.New(jobs.Config{Store: store, Presence: b, Name: "task-1", Logger: logger, StatusWait: time.Second})
		local, err := b.Attach(ctx, "controller", r.Deliver)
		if err != nil {
			t.Fatal(err)
		}
		r.SetMessenger(local)
		t.Cleanup(r.Close)
		return r
	}
	nodes := func(id string) map[string]farm.RunJobNode {
		page, err := store.ListJobNodes(ctx, farm.RunJobNodeQuery{Job: id})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]farm.RunJobNode{}
		for _, n := range page.Nodes {
			out[n.Node] = n
		}
		return out
	}
	wait := func(id string) farm.RunJob {
		deadline := time.Now().Add(2 * time.Minute)
		for {
			j, err := store.GetJob(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if j.State != farm.JobRunning {
				return j
			}
			if time.Now().After(deadline) {
				t.Fatalf("job still running: %+v %+v", j, nodes(id))
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	// ranAndFailed: the agent answered with pxp-module-puppet's result.
	ranAndFailed := func(n farm.RunJobNode) bool {
		return n.State == farm.JobNodeFailed && n.ExitCode != nil && *n.ExitCode == 1 && n.Error != "" && n.TransactionID != ""
	}

	r := newRunner()
	t.Run("run", func(t *testing.T) {
		job, err := r.Start(ctx, jobs.Spec{Nodes: []string{"node1.test", "missing.test"}, Noop: true, Timeout: 2 * time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if end := wait(job.ID); end.State != farm.JobFailed {
			t.Errorf("job %+v", end)
		}
		got := nodes(job.ID)
		if n := got["node1.test"]; !ranAndFailed(n) {
			t.Errorf("node1.test: %+v", n)
		}
		if n := got["missing.test"]; n.State != farm.JobNodeUnreachable {
			t.Errorf("missing.test: %+v", n)
		}
	})
	t.Run("timeout asks the agent", func(t *testing.T) {
		job, err := r.Start(ctx, jobs.Spec{Nodes: []string{"node1.test"}, Noop: true, Timeout: 500 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		wait(job.ID)
		if n := nodes(job.ID)["node1.test"]; n.State != farm.JobNodeFailed || !strings.Contains(n.Error, "the agent says the run is still going") {
			t.Errorf("node1.test: %+v", n)
		}
	})
	t.Run("resume", func(t *testing.T) {
		// Let the previous run end: the agent runs one Puppet at a time.
		time.Sleep(8 * time.Second)
		job, err := r.Start(ctx, jobs.Spec{Nodes: []string{"node1.test"}, Noop: true, Timeout: 2 * time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		for nodes(job.ID)["node1.test"].State != farm.JobNodeRunning {
			time.Sleep(10 * time.Millisecond)
		}
		r.Close() // the task stops mid-run; another starts with its name
		r2 := newRunner()
		if err := r2.Resume(ctx); err != nil {
			t.Fatal(err)
		}
		wait(job.ID)
		if n := nodes(job.ID)["node1.test"]; !ranAndFailed(n) {
			t.Errorf("node1.test after resume: %+v", n)
		}
	})
}

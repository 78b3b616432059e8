package admin

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/compilefarm/compilefarm/pkg/farm"
	"github.com/compilefarm/compilefarm/pkg/memstore"
	"github.com/compilefarm/compilefarm/pkg/pcp/jobs"
	"github.com/compilefarm/compilefarm/pkg/pcp/message"
)

// answeringBroker plays the PCP broker and pxp-agents that run Puppet at
// once: every node but "gone.test" is connected and answers a run request
// with a finished run.
type answeringBroker struct{ runner *jobs.Runner }

func (b *answeringBroker) URI() string { return "pcp://broker.test/controller" }

func (b *answeringBroker) Connected(ctx context.Context, uri string) (bool, error) {
	return uri != "pcp://gone.test/agent", nil
}

func (b *answeringBroker) Send(ctx context.Context, m *message.Message) error {
	var d struct {
		TransactionID string `json:"transaction_id"`
	}
	json.Unmarshal(m.Data, &d)
	data, _ := json.Marshal(map[string]any{"transaction_id": d.TransactionID, "results": map[string]any{
		"exitcode": 0, "status": "unchanged", "transaction_uuid": "uuid-1", "environment": "production", "version": 1}})
	go b.runner.Deliver(&message.Message{ID: "answer", MessageType: "http://puppetlabs.com/rpc_non_blocking_response",
		Sender: m.Targets[0], Targets: []string{m.Sender}, Data: data})
	return nil
}

func jobsServer(t *testing.T, withBroker bool) (*Client, *memstore.Store) {
	t.Helper()
	st := memstore.New()
	s := &Server{}
	if withBroker {
		b := &answeringBroker{}
		r := jobs.New(jobs.Config{Store: st, Presence: b, Messenger: b, Nodes: st, Name: "task-1",
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		b.runner = r
		t.Cleanup(r.Close)
		s.Jobs = r
	}
	mux := http.NewServeMux()
	s.Register(mux)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return &Client{Base: srv.URL}, st
}

func TestJobsWithoutBroker(t *testing.T) {
	c, _ := jobsServer(t, false)
	for _, tt := range []struct{ method, path, body string }{
		{"POST", "/admin/v1/jobs", `{"nodes":["a.test"]}`},
		{"GET", "/admin/v1/jobs", ""},
		{"GET", "/admin/v1/jobs/x", ""},
	} {
		req, _ := http.NewRequestWithContext(t.Context(), tt.method, c.Base+tt.path, strings.NewReader(tt.body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(b), "start it with --pcp-listen") {
			t.Errorf("%s %s = %d %s, want 503 naming --pcp-listen", tt.method, tt.path, resp.StatusCode, b)
		}
	}
	if _, err := c.StartJob(t.Context(), JobRequest{Nodes: []string{"a.test"}}); err == nil || !strings.Contains(err.Error(), "runs no PCP broker") {
		t.Errorf("StartJob = %v", err)
	}
}

func TestStartJobRefusesBadInput(t *testing.T) {
	c, _ := jobsServer(t, true)
	tests := []struct {
		name, body, want string
	}{
		{"no nodes and no environment", `{}`, "needs nodes (--nodes a,b) or an environment (--environment ENV)"},
		{"both", `{"nodes":["a.test"],"environment":"production"}`, "not both"},
		{"bad certname", `{"nodes":["Not A Name"]}`, "certname"},
		{"concurrency 0", `{"nodes":["a.test"],"concurrency":0}`, "concurrency 0: give at least 1"},
		{"bad timeout", `{"nodes":["a.test"],"timeout":"soon"}`, "give a positive duration"},
		{"unknown field", `{"node":["a.test"]}`, "not JSON with nodes or environment"},
		{"not JSON", `nodes=a`, "not JSON"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := http.Post(c.Base+"/admin/v1/jobs", "application/json", strings.NewReader(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), tt.want) {
				t.Errorf("POST %s = %d %s, want 400 with %q", tt.body, resp.StatusCode, b, tt.want)
			}
		})
	}
}

func TestJobsThroughTheAPI(t *testing.T) {
	c, _ := jobsServer(t, true)
	ctx := t.Context()
	conc := 2
	first, err := c.StartJob(ctx, JobRequest{Nodes: []string{"b.test", "a.test", "gone.test"}, Noop: true, Concurrency: &conc, Timeout: "1m"})
	if err != nil {
		t.Fatal(err)
	}
	if first.Total != 3 || !first.Noop || first.Concurrency != 2 || first.Timeout != time.Minute || first.Owner != "loopback" {
		t.Errorf("started %+v", first)
	}
	var d JobDetail
	deadline := time.Now().Add(10 * time.Second)
	for {
		if d, err = c.Job(ctx, first.ID, ""); err != nil {
			t.Fatal(err)
		}
		if d.Job.State != farm.JobRunning {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("job still running: %+v", d)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if d.Job.State != farm.JobFailed || len(d.Nodes) != 3 || d.Nodes[0].Node != "a.test" || d.Nodes[0].State != farm.JobNodeFinished ||
		d.Nodes[2].Node != "gone.test" || d.Nodes[2].State != farm.JobNodeUnreachable {
		t.Errorf("job detail %+v", d)
	}

	// Nodes a page at a time.
	resp, err := http.Get(c.Base + "/admin/v1/jobs/" + first.ID + "?limit=1")
	if err != nil {
		t.Fatal(err)
	}
	var page JobDetail
	json.NewDecoder(resp.Body).Decode(&page)
	resp.Body.Close()
	if len(page.Nodes) != 1 || page.Next == "" {
		t.Fatalf("a page of 1: %+v", page)
	}
	if more, err := c.Job(ctx, first.ID, page.Next); err != nil || len(more.Nodes) != 2 || more.Nodes[0].Node != "b.test" {
		t.Errorf("the next page: %+v, %v", more, err)
	}
	var seen []string
	if _, err := c.EachJobNode(ctx, first.ID, func(n farm.RunJobNode) error { seen = append(seen, n.Node); return nil }); err != nil || len(seen) != 3 {
		t.Errorf("EachJobNode saw %v, %v", seen, err)
	}

	// Newest first.
	second, err := c.StartJob(ctx, JobRequest{Nodes: []string{"a.test"}})
	if err != nil {
		t.Fatal(err)
	}
	list, err := c.Jobs(ctx, "", 1)
	if err != nil || len(list.Jobs) != 1 || list.Jobs[0].ID != second.ID || list.Next == "" {
		t.Fatalf("first page %+v, %v", list, err)
	}
	list, err = c.Jobs(ctx, list.Next, 1)
	if err != nil || len(list.Jobs) != 1 || list.Jobs[0].ID != first.ID {
		t.Errorf("second page %+v, %v", list, err)
	}

	if _, err := c.Job(ctx, "no-such-job", ""); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf("an unknown job: %v", err)
	}
	if _, err := c.Jobs(ctx, "", 5000); err == nil || !strings.Contains(err.Error(), "limit") {
		t.Errorf("limit 5000: %v", err)
	}
}

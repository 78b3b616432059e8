package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/compilefarm/compilefarm/pkg/admin"
	"github.com/compilefarm/compilefarm/pkg/farm"
	"github.com/compilefarm/compilefarm/pkg/memstore"
	"github.com/compilefarm/compilefarm/pkg/pcp/jobs"
	"github.com/compilefarm/compilefarm/pkg/pcp/message"
)

// reportingAgents plays the PCP broker and pxp-agents whose runs finish
// at once, node NAME's run with transaction_uuid "uuid-NAME".
type reportingAgents struct{ runner *jobs.Runner }

func (p *reportingAgents) URI() string { return "pcp://broker.test/controller" }

func (p *reportingAgents) Connected(ctx context.Context, uri string) (bool, error) { return true, nil }

func (p *reportingAgents) Send(ctx context.Context, m *message.Message) error {
	var d struct {
		TransactionID string `json:"transaction_id"`
	}
	json.Unmarshal(m.Data, &d)
	node := strings.TrimSuffix(strings.TrimPrefix(m.Targets[0], "pcp://"), "/agent")
	b, _ := json.Marshal(map[string]any{"transaction_id": d.TransactionID, "results": map[string]any{
		"exitcode": 2, "status": "changed", "transaction_uuid": "uuid-" + node, "version": 1}})
	go p.runner.Deliver(&message.Message{ID: "a", MessageType: "http://puppetlabs.com/rpc_non_blocking_response",
		Sender: m.Targets[0], Targets: []string{m.Sender}, Data: b})
	return nil
}

// reportFarm is an operator API over a memstore where full.test's latest
// report (run uuid-full.test) is stored in full and summary.test's only
// as a summary, with a job runner that links a node's result to its
// report. It returns the --admin URL, the store and the stored report.
func reportFarm(t *testing.T) (string, *memstore.Store, []byte) {
	t.Helper()
	ctx := t.Context()
	st := memstore.New()
	report := []byte(`{"host":"full.test","status":"changed","transaction_uuid":"uuid-full.test"}`)
	d, err := st.Put(ctx, farm.SpaceReports, report)
	if err != nil {
		t.Fatal(err)
	}
	for node, digest := range map[string]farm.Digest{"full.test": d, "summary.test": ""} {
		if _, err := st.UpdateNode(ctx, node, func(n *farm.Node) error { n.Environment = "production"; return nil }); err != nil {
			t.Fatal(err)
		}
		sum := farm.ReportSummary{Digest: digest, Status: "changed", At: time.Now(), TransactionUUID: "uuid-" + node}
		if _, err := st.RecordReport(ctx, node, sum); err != nil {
			t.Fatal(err)
		}
	}
	agents := &reportingAgents{}
	runner := jobs.New(jobs.Config{Store: st, Presence: agents, Messenger: agents, Nodes: st, Reports: st, Name: "task-1",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	agents.runner = runner
	t.Cleanup(runner.Close)
	srv := httptest.NewServer(adminHandler(&admin.Server{Nodes: st, Envs: st, Jobs: runner, Reports: st}))
	t.Cleanup(srv.Close)
	return srv.URL, st, report
}

// TestJobShowReport: job show links a node's result to its run's report
// when the farm kept it, and broker report prints what the link names.
func TestJobShowReport(t *testing.T) {
	url, _, report := reportFarm(t)
	ctx := t.Context()
	var out bytes.Buffer
	if err := jobCommand(ctx, []string{"run", "--nodes", "full.test,summary.test", "--admin", url, "--poll", "5ms"}, &out); err != nil {
		t.Fatalf("job run: %v\n%s", err, out.String())
	}
	id, _, _ := strings.Cut(strings.TrimPrefix(out.String(), "job "), " ")
	out.Reset()
	if err := jobCommand(ctx, []string{"show", id, "--admin", url}, &out); err != nil {
		t.Fatal(err)
	}
	link := admin.ReportsPath + string(farm.DigestOf(report))
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	wantLines := []string{
		"job " + id + " finished: ",
		"NODE          STATE     EXIT  STATUS   REPORT",
		"full.test     finished  2     changed  " + link + "  -",
		"summary.test  finished  2     changed  transaction uuid-summary.test",
		"a run's report: broker report /admin/v1/reports/DIGEST",
	}
	if len(lines) != len(wantLines) {
		t.Fatalf("job show:\n%s", out.String())
	}
	for i, w := range wantLines {
		if !strings.HasPrefix(lines[i], w) {
			t.Errorf("line %d: %q, want it to start with %q", i, lines[i], w)
		}
	}

	out.Reset()
	if err := reportCommand(ctx, []string{link, "--admin", url}, &out); err != nil {
		t.Fatal(err)
	}
	if got, want := out.String(), string(report)+"\n"; got != want {
		t.Errorf("broker report %s = %q, want %q", link, got, want)
	}
}

func TestReportCommand(t *testing.T) {
	url, _, report := reportFarm(t)
	d := string(farm.DigestOf(report))
	absent := string(farm.DigestOf([]byte("never sent")))
	noReports := httptest.NewServer(adminHandler(&admin.Server{}))
	t.Cleanup(noReports.Close)
	tests := []struct {
		name    string
		args    []string // with --admin url unless they name one
		wantErr string   // "" none: the report is printed
	}{
		{"digest", []string{d}, ""},
		{"job show's link", []string{"/admin/v1/reports/" + d}, ""},
		{"under the front door's prefix", []string{"/compilefarm/admin/v1/reports/" + d}, ""},
		{"a whole URL", []string{"https://farm.test:8140/compilefarm/admin/v1/reports/" + d}, ""},
		{"flags first", []string{"--admin", url, d}, ""},
		{"not stored", []string{absent}, "no report " + absent + " is stored (the farm keeps only a summary of unchanged runs: see --full-report-every)"},
		{"not a digest", []string{"transaction uuid-1"}, `report "transaction uuid-1": give the report's digest (64 lowercase hex digits)`},
		{"a link to nothing", []string{"/admin/v1/reports/"}, "give the report's digest"},
		{"no digest", nil, "report: expected one DIGEST"},
		{"two digests", []string{d, d}, "report: expected one DIGEST"},
		{"a server without reports", []string{d, "--admin", noReports.URL}, "keeps no agent reports"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := tt.args
			if !strings.Contains(strings.Join(args, " "), "--admin") {
				args = append(args, "--admin", url)
			}
			var out bytes.Buffer
			err := reportCommand(t.Context(), args, &out)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("report %v = %v, want an error with %q", args, err, tt.wantErr)
				}
				if out.Len() != 0 {
					t.Errorf("report %v printed %q", args, out.String())
				}
				return
			}
			if err != nil {
				t.Fatalf("report %v: %v", args, err)
			}
			if out.String() != string(report)+"\n" {
				t.Errorf("report %v printed %q, want %q", args, out.String(), report)
			}
		})
	}
}

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/compilefarm/compilefarm/pkg/admin"
	"github.com/compilefarm/compilefarm/pkg/facts"
	"github.com/compilefarm/compilefarm/pkg/farm"
	"github.com/compilefarm/compilefarm/pkg/intake"
	"github.com/compilefarm/compilefarm/pkg/memstore"
)

// explainFarm serves the operator API over a memstore holding one node,
// web01, whose latest compile was queued by a change of two facts, and
// whose catalog read five facts.
func explainFarm(t *testing.T, at time.Time) string {
	t.Helper()
	ctx := context.Background()
	store := memstore.New()
	read := func(kind facts.ReadKind, v string, path ...string) facts.Read {
		return facts.Read{Path: path, Kind: kind, Value: json.RawMessage(v)}
	}
	rec, _ := json.Marshal(facts.ReadRecord{Reads: []facts.Read{
		read(facts.ReadValue, `"web"`, "cf_role"),
		read(facts.ReadValue, `"12.11"`, "os", "release", "full"),
		read(facts.ReadValue, `"Debian"`, "os", "family"),
		read(facts.ReadKeys, `["eth0"]`, "networking", "interfaces"),
		read(facts.ReadPresent, `true`, "cf_note"),
	}})
	recDigest, err := store.Put(ctx, farm.SpaceCatalogs, rec)
	if err != nil {
		t.Fatal(err)
	}
	_, err = store.UpdateNode(ctx, "web01", func(n *farm.Node) error {
		n.Environment = "production"
		n.RequestSeq = 4
		n.Requested = &farm.CompileRequest{Seq: 4, Environment: "production", CodeID: "0123456789abcdef",
			Reason: farm.ReasonFactsChanged, Lane: farm.LaneUrgent, At: at,
			Changes: []farm.FactChange{
				{Path: []string{"os", "release", "full"}, Kind: "value", Old: json.RawMessage(`"12.10"`), New: json.RawMessage(`"12.11"`)},
				{Path: []string{"cf_note"}, Kind: "present", Old: json.RawMessage(`false`), New: json.RawMessage(`true`)},
				{Path: []string{"cf_extra"}, Kind: "value", OldMissing: true, New: json.RawMessage(`1`)},
			}}
		n.Catalog = &farm.CatalogRef{Seq: 4, CodeID: "0123456789abcdef", ReadsDigest: recDigest, CompiledAt: at}
		n.Compile = &farm.CompileStatus{Result: farm.ResultOK, Seq: 4, At: at}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	(&admin.Server{Nodes: store, Envs: store, Explainer: &intake.Intake{Content: store, Nodes: store}}).Register(mux)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL
}

func TestExplain(t *testing.T) {
	at := time.Now().Add(-time.Minute)
	url := explainFarm(t, at)
	var out bytes.Buffer
	if err := explainCmd(context.Background(), &out, []string{"web01", "--admin", url}); err != nil {
		t.Fatal(err)
	}
	t.Logf("broker explain web01:\n%s", out.String())
	for _, want := range []string{
		"node         web01\n",
		"environment  production\n",
		"code_id      0123456789ab\n",
		"request      seq 4, facts-changed, urgent lane, at " + at.UTC().Format(time.RFC3339) + " (",
		" ago): compiled\n",
		"  facts.os.release.full: \"12.10\" -> \"12.11\"\n",
		"  facts.cf_note (present): false -> true\n",
		"  facts.cf_extra: (absent) -> 1\n",
		"reads        5 reads of 4 top-level facts (record ",
		"  os (2), cf_note (1), cf_role (1), networking (1)\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("explain output lacks %q:\n%s", want, out.String())
		}
	}

	out.Reset()
	if err := explainCmd(context.Background(), &out, []string{"--json", "web01", "--admin", url}); err != nil {
		t.Fatal(err)
	}
	var ex intake.Explanation
	if err := json.Unmarshal(out.Bytes(), &ex); err != nil {
		t.Fatalf("explain --json is not an explanation: %v\n%s", err, out.String())
	}
	if ex.State != intake.RequestCompiled || ex.Request == nil || len(ex.Request.Changes) != 3 ||
		string(ex.Request.Changes[0].New) != `"12.11"` || ex.Reads == nil || ex.Reads.Reads != 5 {
		t.Errorf("explain --json = %s", out.String())
	}
}

func TestExplainUnknownNode(t *testing.T) {
	url := explainFarm(t, time.Now())
	var out bytes.Buffer
	err := explainCmd(context.Background(), &out, []string{"db01", "--admin", url})
	if err == nil || !strings.Contains(err.Error(), "node db01 is not known to the farm") {
		t.Errorf("explain of an unknown node: err %v, want one saying it is not known\n%s", err, out.String())
	}
}

func TestPrintExplanation(t *testing.T) {
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	req := func(reason string, cause *farm.RequestCause) *farm.CompileRequest {
		return &farm.CompileRequest{Seq: 2, Reason: reason, Lane: farm.LaneBulk, At: now.Add(-time.Hour), Cause: cause}
	}
	tests := []struct {
		name string
		ex   intake.Explanation
		want []string
	}{
		{"code changed, pending, no read record",
			intake.Explanation{Node: "n1", Environment: "production", CodeID: "aaaaaaaaaaaaaaaa",
				Request: req(farm.ReasonCodeChanged, &farm.RequestCause{Input: farm.CauseCodeID, Old: "aaaaaaaaaaaaaaaa", New: "bbbbbbbbbbbbbbbb"}),
				State:   intake.RequestPending},
			[]string{"seq 2, code-changed, bulk lane, at 2026-11-23T11:00:00Z (1h0m0s ago): pending\n",
				"  code_id: aaaaaaaaaaaa -> bbbbbbbbbbbb\n",
				"reads        none recorded: any change outside the volatile facts recompiles the catalog\n"}},
		{"facts without a read record, failed",
			intake.Explanation{Node: "n1", CodeID: "c",
				Request: req(farm.ReasonFactsChanged, &farm.RequestCause{Input: farm.CauseRelevant, Old: "1111111111111111", New: "2222222222222222",
					Note: "no read record; relevant facts digest changed"}),
				State: intake.RequestFailed, Error: "Evaluation Error: boom\n  at line 3"},
			[]string{"(1h0m0s ago): failed: Evaluation Error: boom\n",
				"  relevant_digest: 111111111111 -> 222222222222\n",
				"  (no read record; relevant facts digest changed)\n"}},
		{"always recompiles",
			intake.Explanation{Node: "n1", CodeID: "c", Reads: &intake.ReadSummary{Reads: 1, AlwaysRecompile: true, Why: "generate() called",
				Facts: []intake.FactReadCount{{Fact: "", Reads: 1}}}},
			[]string{"request      none queued\n", "  always recompiles, at every fact upload: generate() called\n", "  all facts (1)\n"}},
		{"no catalog", intake.Explanation{Node: "n1"}, []string{"code_id      -\n", "reads        no catalog yet\n"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			printExplanation(&out, tt.ex, now)
			for _, w := range tt.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("output lacks %q:\n%s", w, out.String())
				}
			}
		})
	}
}

func TestReasonLabel(t *testing.T) {
	change := func(path ...string) farm.FactChange { return farm.FactChange{Path: path, Kind: "value"} }
	tests := []struct {
		name string
		r    *farm.CompileRequest
		want string
	}{
		{"no request", nil, "-"},
		{"no changes", &farm.CompileRequest{Reason: farm.ReasonCodeChanged}, "code-changed"},
		{"one fact", &farm.CompileRequest{Reason: farm.ReasonFactsChanged, Changes: []farm.FactChange{change("os", "release", "full")}},
			"facts-changed (os.release.full)"},
		{"cut to width", &farm.CompileRequest{Reason: farm.ReasonFactsChanged,
			Changes: []farm.FactChange{change("os", "release", "full"), change("networking", "interfaces"), change("cf_role")}},
			"facts-changed (os.release.full, netwo..."},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := reasonLabel(tt.r, 40); got != tt.want {
				t.Errorf("reasonLabel = %q, want %q", got, tt.want)
			}
		})
	}
}

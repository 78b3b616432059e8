package frontdoor

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/compilefarm/compilefarm/pkg/farm"
	"github.com/compilefarm/compilefarm/pkg/intake"
)

func TestKeepBefore(t *testing.T) {
	never := ReportPolicy{Every: -1}
	at := time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC)
	tests := []struct {
		name string
		h    reportHeader
		want string
	}{
		{"changed", reportHeader{Status: "changed"}, KeepChanged},
		{"failed", reportHeader{Status: "failed"}, KeepFailed},
		{"noop with pending changes", reportHeader{Status: "unchanged", NoopPending: true}, KeepNoop},
		{"cached catalog after a failure", reportHeader{Status: "unchanged", CachedCatalogStatus: "on_failure"}, KeepCached},
		{"cached catalog asked for", reportHeader{Status: "unchanged", CachedCatalogStatus: "explicitly_requested"}, ""},
		{"unchanged", reportHeader{Status: "unchanged", CachedCatalogStatus: "not_used"}, ""},
	}
	for _, tt := range tests {
		if got := never.keepBefore("web01.example.com", tt.h, at); got != tt.want {
			t.Errorf("%s: keepBefore = %q, want %q", tt.name, got, tt.want)
		}
	}
	// The node's slot keeps an unchanged run.
	p := ReportPolicy{}
	for i := 0; ; i++ {
		at := at.Add(time.Duration(i) * 10 * time.Minute)
		if p.InSlot("web01.example.com", at) {
			if got := p.keepBefore("web01.example.com", reportHeader{Status: "unchanged"}, at); got != KeepPeriodic {
				t.Errorf("unchanged run in its slot: keepBefore = %q, want %q", got, KeepPeriodic)
			}
			break
		}
		if i > 24*6 {
			t.Fatal("no time of a day is in the node's slot")
		}
	}
}

func TestKeepAfter(t *testing.T) {
	sum := farm.ReportSummary{Status: "unchanged", CatalogUUID: "cat-2"}
	tests := []struct {
		name string
		prev *farm.ReportSummary
		want string
	}{
		{"first report", nil, KeepFirst},
		{"another catalog", &farm.ReportSummary{Status: "changed", CatalogUUID: "cat-1"}, KeepCatalog},
		{"after a failure", &farm.ReportSummary{Status: "failed", CatalogUUID: "cat-2"}, KeepRecovered},
		{"steady state", &farm.ReportSummary{Status: "unchanged", CatalogUUID: "cat-2"}, ""},
		{"after a change of the same catalog", &farm.ReportSummary{Status: "changed", CatalogUUID: "cat-2"}, ""},
	}
	for _, tt := range tests {
		if got := keepAfter(tt.prev, sum); got != tt.want {
			t.Errorf("%s: keepAfter = %q, want %q", tt.name, got, tt.want)
		}
	}
}

// TestInSlotOncePerPeriod: an agent running every Slot has exactly one run
// a period in its slot, whatever its name and start; nodes' slots spread
// over the period.
func TestInSlotOncePerPeriod(t *testing.T) {
	p := ReportPolicy{Every: 24 * time.Hour, Slot: 30 * time.Minute}
	start := time.Date(2026, 11, 25, 10, 7, 13, 0, time.UTC)
	hours := map[int]int{}
	for i := range 500 {
		name := fmt.Sprintf("node%03d.example.com", i)
		first := start.Add(time.Duration(i) * 7 * time.Second)
		in := 0
		for k := range 48 {
			if at := first.Add(time.Duration(k) * 30 * time.Minute); p.InSlot(name, at) {
				in++
				hours[at.Hour()]++
			}
		}
		if in != 1 {
			t.Fatalf("%s: %d of a day's 48 runs in its slot, want 1", name, in)
		}
	}
	if len(hours) < 20 {
		t.Errorf("500 nodes' slots fall in %d hours of the day, want them spread: %v", len(hours), hours)
	}
	if (ReportPolicy{Every: -1}).InSlot("web01.example.com", start) {
		t.Error("a negative Every has a slot")
	}
}

// TestReportSummaryOfRecording reads the summary of a report Puppet 7
// sent (shared/puppet-protocol).
func TestReportSummaryOfRecording(t *testing.T) {
	b, err := os.ReadFile("../../testdata/puppet-protocol/report-request-agent1.json")
	if err != nil {
		t.Fatal(err)
	}
	h, err := scanReport(b)
	if err != nil {
		t.Fatal(err)
	}
	sum := h.summary()
	want := farm.ReportMetrics{Resources: 16, Changed: 1, OutOfSync: 1, Seconds: 17.276839273}
	if sum.Status != "changed" || sum.Metrics == nil || *sum.Metrics != want || sum.CatalogUUID == "" || sum.TransactionUUID == "" ||
		sum.ConfigVersion == "" || sum.At.IsZero() {
		t.Errorf("summary %+v metrics %+v; want status changed, metrics %+v", sum, sum.Metrics, want)
	}
}

// jsonReport is how the front door decoded reports before scanReport:
// the whole report by encoding/json. TestScanReport holds scanReport to it.
type jsonReport struct {
	Host                string `json:"host"`
	Time                string `json:"time"`
	Status              string `json:"status"`
	ConfigVersion       any    `json:"configuration_version"`
	CatalogUUID         string `json:"catalog_uuid"`
	TransactionUUID     string `json:"transaction_uuid"`
	Environment         string `json:"environment"`
	NoopPending         bool   `json:"noop_pending"`
	CachedCatalogStatus string `json:"cached_catalog_status"`
	Metrics             map[string]struct {
		Values [][]any `json:"values"`
	} `json:"metrics"`
}

// header is what the report's metrics said to the summary: of each group
// it reads, the first numeric value of each row name.
func (j jsonReport) header() reportHeader {
	h := reportHeader{Host: j.Host, Time: j.Time, Status: j.Status, ConfigVersion: j.ConfigVersion, CatalogUUID: j.CatalogUUID,
		TransactionUUID: j.TransactionUUID, Environment: j.Environment, NoopPending: j.NoopPending, CachedCatalogStatus: j.CachedCatalogStatus}
	for name, g := range j.Metrics {
		if !slices.Contains(summaryMetrics, name) {
			continue
		}
		if h.Metrics == nil {
			h.Metrics = map[string]reportMetric{}
		}
		m := reportMetric{}
		for _, row := range g.Values {
			if len(row) != 3 {
				continue
			}
			k, ok := row[0].(string)
			v, isNum := row[2].(float64)
			if _, seen := m[k]; ok && isNum && !seen {
				m[k] = v
			}
		}
		h.Metrics[name] = m
	}
	return h
}

// TestScanReport: scanReport reads what encoding/json read of a report,
// whatever the rest of the report holds.
func TestScanReport(t *testing.T) {
	recorded, err := os.ReadFile("../../testdata/puppet-protocol/report-request-agent1.json")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct{ name, doc string }{
		{"recorded", string(recorded)},
		{"run-sized", string(runSizedReport(t))},
		{"generated", string(reportBody("agent1.example.test", "unchanged", "cat-1", time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC)))},
		{"escapes", `{"host":"a\u0041\"b","status":"unchanged","catalog_uuid":"x\/y","logs":[{"message":"a \"quoted\" ]} word\\"}]}`},
		{"config version string", `{"host":"a","status":"changed","configuration_version":"deadbeef"}`},
		{"config version null", `{"host":"a","status":"changed","configuration_version":null}`},
		{"config version float", `{"host":"a","status":"changed","configuration_version":1700000000.25}`},
		{"no metrics", `{"host":"a","status":"failed","resource_statuses":{}}`},
		{"null metrics", `{"host":"a","status":"failed","metrics":null}`},
		{"null fields", `{"host":null,"status":null,"noop_pending":null,"time":null}`},
		{"other metric groups", `{"host":"a","status":"unchanged","metrics":{"changes":{"values":[["total","Total",3]]},` +
			`"resources":{"name":"resources","values":[["total","Total",7],["changed","Changed",2],["failed","Failed",1]]},` +
			`"events":{"values":[]},"time":{"values":[["file","File",0.5],["total","Total",1.25e0]]}}}`},
		{"odd metric rows", `{"host":"a","status":"unchanged","metrics":{"resources":{"values":[["total","Total",7],["total","Total",8],` +
			`["changed","Changed"],["failed","Failed","1"],[3,"x",4],["out_of_sync","Out",1,2],null,["skipped",null,-0.5]]},"time":null}}`},
		{"null values", `{"host":"a","status":"unchanged","metrics":{"resources":{"values":null}}}`},
		{"repeated field", `{"host":"a","status":"failed","status":"unchanged"}`},
		{"invalid UTF-8", "{\"host\":\"a\xff\",\"status\":\"unchanged\",\"environment\":\"caf\xc3\xa9\"}"},
		{"white space", " {\n \"host\" : \"a\" ,\n\t\"status\":\"unchanged\" ,\"noop_pending\" : true } \n"},
		{"fields after the statuses", `{"host":"a","resource_statuses":{"File[/x]":{"events":[{"desired_value":"{[\""}]}},"status":"unchanged","cached_catalog_status":"on_failure"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var j jsonReport
			if err := json.Unmarshal([]byte(tt.doc), &j); err != nil {
				t.Fatalf("encoding/json: %v", err)
			}
			want := j.header()
			got, err := scanReport([]byte(tt.doc))
			if err != nil {
				t.Fatalf("scanReport: %v", err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("scanReport = %+v\nencoding/json: %+v", got, want)
			}
			if want.Time != "" && !reflect.DeepEqual(got.summary(), want.summary()) {
				t.Errorf("summary %+v, want %+v", got.summary(), want.summary())
			}
		})
	}
}

// TestScanReportMalformed: a report that is not a JSON object, or whose
// fields the farm reads have the wrong type, is refused.
func TestScanReportMalformed(t *testing.T) {
	tests := []struct{ name, doc string }{
		{"empty", ``},
		{"array", `[]`},
		{"truncated", `{"host":"a","status":"unchanged","resource_statuses":{"File[/x]":{"title":"/x"}`},
		{"unterminated string", `{"host":"a,"status":"unchanged"}`},
		{"status a number", `{"host":"a","status":3}`},
		{"host an object", `{"host":{"name":"a"},"status":"unchanged"}`},
		{"noop_pending a string", `{"host":"a","status":"unchanged","noop_pending":"yes"}`},
		{"metrics an array", `{"host":"a","status":"unchanged","metrics":[]}`},
		{"metric values not rows", `{"host":"a","status":"unchanged","metrics":{"resources":{"values":3}}}`},
		{"metric group not an object", `{"host":"a","status":"unchanged","metrics":{"time":[]}}`},
		{"metric row not an array", `{"host":"a","status":"unchanged","metrics":{"time":{"values":[3]}}}`},
		{"bad metric value", `{"host":"a","status":"unchanged","metrics":{"time":{"values":[["total","Total",1e999]]}}}`},
		{"control character in a string", "{\"host\":\"a\nb\",\"status\":\"unchanged\"}"},
		{"bad number in a field", `{"host":"a","status":"unchanged","configuration_version":1.2.3}`},
		{"trailing data", `{"host":"a","status":"unchanged"} {}`},
		{"mismatched brackets in the statuses", `{"host":"a","resource_statuses":{"x":[}],"status":"unchanged"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if h, err := scanReport([]byte(tt.doc)); err == nil {
				t.Errorf("scanReport = %+v, nil; want an error", h)
			}
		})
	}
}

// TestPutReportMalformed: the front door answers a report it cannot read
// with 400, as before it summarised reports by scanning them.
func TestPutReportMalformed(t *testing.T) {
	r := newRig(t)
	const name = "agent1.example.test"
	a1 := r.client(name)
	for _, body := range []string{`{"host":"agent1.example.test","status":"unchanged","logs":[}`, `{"host":"agent1.example.test","status":5}`,
		`{"host":"other.example.test","status":"unchanged"}`, `{"host":"agent1.example.test","status":"weird"}`} {
		resp := r.do(a1, "PUT", "/puppet/v3/report/"+name+"?environment=production", []byte(body), map[string]string{"Content-Type": "application/json"})
		if resp.status != 400 || !strings.Contains(resp.body, "RUNTIME_ERROR") {
			t.Errorf("report %s: %d %s, want 400", body, resp.status, resp.body)
		}
	}
}

func reportBody(name, status, catalogUUID string, at time.Time) []byte {
	b, _ := json.Marshal(map[string]any{
		"host": name, "time": at.Format(time.RFC3339Nano), "status": status, "configuration_version": 1700000000,
		"catalog_uuid": catalogUUID, "transaction_uuid": fmt.Sprintf("tx-%d", at.UnixNano()), "cached_catalog_status": "not_used",
		"metrics": map[string]any{
			"resources": map[string]any{"values": [][]any{{"total", "Total", 7}, {"changed", "Changed", 0}, {"failed", "Failed", 0}}},
			"time":      map[string]any{"values": [][]any{{"total", "Total", 1.5}}},
		},
		"resource_statuses": map[string]any{}, "logs": []any{},
	})
	return b
}

// TestReportsKept: which runs' reports are stored whole, and that every
// run's summary is on the node.
func TestReportsKept(t *testing.T) {
	r := newRig(t)
	r.fd.Reports = ReportPolicy{Every: -1} // the periodic rule has its own test
	const name = "agent1.example.test"
	a1 := r.client(name)
	t0 := time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC)
	pdb := &recordingPuppetDB{}
	r.fd.PuppetDB = pdb
	steps := []struct {
		status, catalog string
		at              time.Duration
		stored          bool
		want            string // the node's report status after
		newCatalog      bool   // PuppetDB is sent the catalog too
	}{
		{"changed", "cat-1", 0, true, "changed", true},        // a node with no record yet: kept, and recorded
		{"unchanged", "cat-1", 30, false, "unchanged", false}, // steady state
		{"unchanged", "cat-1", 60, false, "unchanged", false},
		{"unchanged", "cat-2", 90, true, "unchanged", true},   // another catalog
		{"unchanged", "cat-2", 15, false, "unchanged", false}, // older, arriving late: not recorded
		{"failed", "cat-2", 120, true, "failed", false},
		{"unchanged", "cat-2", 150, true, "unchanged", false}, // recovered
		{"unchanged", "cat-2", 180, false, "unchanged", false},
	}
	var last time.Time
	for i, s := range steps {
		at := t0.Add(s.at * time.Minute)
		body := reportBody(name, s.status, s.catalog, at)
		resp := r.do(a1, "PUT", "/puppet/v3/report/"+name+"?environment=production", body, map[string]string{"Content-Type": "application/json"})
		if resp.status != 200 || resp.body != `["store"]` {
			t.Fatalf("step %d: report: %d %s", i, resp.status, resp.body)
		}
		// PuppetDB is told of every report, whatever the farm keeps.
		if got := pdb.take(); len(got) != 1 || got[0] != (puppetDBReport{name, string(body), s.catalog, s.newCatalog}) {
			t.Errorf("step %d (%s, %s): PuppetDB told %+v, want the report with newCatalog %v", i, s.status, s.catalog, got, s.newCatalog)
		}
		stored, err := r.store.Has(context.Background(), farm.SpaceReports, farm.DigestOf(body))
		if err != nil || stored != s.stored {
			t.Errorf("step %d (%s, %s): full report stored %v (%v), want %v", i, s.status, s.catalog, stored, err, s.stored)
		}
		n, err := r.store.GetNode(context.Background(), name)
		if err != nil || n.Report == nil {
			t.Fatalf("step %d: node %+v %v", i, n.Report, err)
		}
		if at.After(last) {
			last = at
			wantDigest := farm.Digest("")
			if s.stored {
				wantDigest = farm.DigestOf(body)
			}
			if n.Report.Status != s.want || !n.Report.At.Equal(at) || n.Report.Digest != wantDigest || n.Report.CatalogUUID != s.catalog ||
				n.Report.Metrics == nil || n.Report.Metrics.Resources != 7 || n.Report.Metrics.Seconds != 1.5 {
				t.Errorf("step %d: node's report %+v (metrics %+v), want status %s at %s, digest %q", i, n.Report, n.Report.Metrics, s.want, at, wantDigest)
			}
		} else if !n.Report.At.Equal(last) {
			t.Errorf("step %d: a late report replaced the newer summary: %+v", i, n.Report)
		}
	}

	// The node's slot keeps an unchanged run whole.
	r.fd.Reports = ReportPolicy{}
	at := t0.Add(4 * time.Hour)
	for !r.fd.Reports.InSlot(name, at) {
		at = at.Add(10 * time.Minute)
	}
	body := reportBody(name, "unchanged", "cat-2", at)
	r.do(a1, "PUT", "/puppet/v3/report/"+name+"?environment=production", body, map[string]string{"Content-Type": "application/json"})
	if ok, _ := r.store.Has(context.Background(), farm.SpaceReports, farm.DigestOf(body)); !ok {
		t.Error("an unchanged run in the node's slot: full report not stored")
	}
}

// recordingPuppetDB records what the front door tells the PuppetDB sink.
type recordingPuppetDB struct {
	mu      sync.Mutex
	reports []puppetDBReport
	facts   []puppetDBFacts
}

type puppetDBReport struct {
	node, body, catalogUUID string
	newCatalog              bool
}

type puppetDBFacts struct {
	node, env       string
	facts, nodeInfo farm.Digest
	changed         bool
}

func (p *recordingPuppetDB) Facts(ctx context.Context, node, env string, facts, nodeInfo farm.Digest, changed bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.facts = append(p.facts, puppetDBFacts{node, env, facts, nodeInfo, changed})
}

func (p *recordingPuppetDB) Report(ctx context.Context, node string, body []byte, sum farm.ReportSummary, newCatalog bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.reports = append(p.reports, puppetDBReport{node, string(body), sum.CatalogUUID, newCatalog})
}

func (p *recordingPuppetDB) take() []puppetDBReport {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := p.reports
	p.reports = nil
	return out
}

func (p *recordingPuppetDB) takeFacts() []puppetDBFacts {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := p.facts
	p.facts = nil
	return out
}

// countingNodes counts the node reads of a node store.
type countingNodes struct {
	farm.NodeStore
	reads atomic.Int64
}

func (c *countingNodes) GetNode(ctx context.Context, certname string) (farm.Node, error) {
	c.reads.Add(1)
	return c.NodeStore.GetNode(ctx, certname)
}

// countingFacts counts the facts documents read from a content store.
type countingFacts struct {
	Content
	reads atomic.Int64
}

func (c *countingFacts) Get(ctx context.Context, space farm.Space, d farm.Digest) ([]byte, error) {
	if space == farm.SpaceFacts {
		c.reads.Add(1)
	}
	return c.Content.Get(ctx, space, d)
}

// TestRunReadsNodeOnce: an agent run with a node request reads the node's
// record once; the node request's facts come from memory once read.
func TestRunReadsNodeOnce(t *testing.T) {
	r := newRig(t)
	const name = "agent1.example.test"
	a1 := r.client(name)
	post := func() response {
		return r.do(a1, "POST", "/puppet/v3/catalog/"+name+"?environment=production", catalogForm(name, "web"), agentHeaders)
	}
	post()
	r.compile(name, "")
	if resp := post(); resp.status != 200 {
		t.Fatalf("catalog: %d %s", resp.status, resp.body)
	}
	nodes := &countingNodes{NodeStore: r.store}
	facts := &countingFacts{Content: r.store}
	r.fd.Nodes, r.fd.Content = nodes, facts
	r.fd.Intake.(*intake.Intake).Nodes = nodes

	for run := range 3 {
		before := nodes.reads.Load()
		if resp := r.do(a1, "GET", "/puppet/v3/node/"+name+"?environment=production", nil, nil); resp.status != 200 {
			t.Fatalf("run %d: node: %d %s", run, resp.status, resp.body)
		}
		if resp := post(); resp.status != 200 {
			t.Fatalf("run %d: catalog: %d %s", run, resp.status, resp.body)
		}
		if got := nodes.reads.Load() - before; got != 1 {
			t.Errorf("run %d: node and catalog requests read the node %d times, want 1", run, got)
		}
	}
	if got := facts.reads.Load(); got != 1 {
		t.Errorf("three node requests read the node's facts %d times, want 1", got)
	}
	// A catalog request without a node request reads the record itself,
	// and a node request's record is used once.
	before := nodes.reads.Load()
	post()
	if got := nodes.reads.Load() - before; got != 1 {
		t.Errorf("a catalog request alone read the node %d times, want 1", got)
	}
}

// TestFactsToPuppetDB: the PuppetDB sink is told of every fact upload
// (catalog request or PUT facts), with the node's stored facts and whether
// the upload changed them.
func TestFactsToPuppetDB(t *testing.T) {
	r := newRig(t)
	pdb := &recordingPuppetDB{}
	r.fd.PuppetDB = pdb
	const name = "agent1.example.test"
	a1 := r.client(name)
	post := func(role string) {
		r.do(a1, "POST", "/puppet/v3/catalog/"+name+"?environment=production", catalogForm(name, role), agentHeaders)
	}
	check := func(step string, changed bool) {
		t.Helper()
		got := pdb.takeFacts()
		n, err := r.store.GetNode(context.Background(), name)
		if err != nil {
			t.Fatal(err)
		}
		want := puppetDBFacts{name, "production", n.FactsDigest, n.NodeInfo, changed}
		if len(got) != 1 || got[0] != want || want.facts == "" {
			t.Errorf("%s: PuppetDB told %+v, want %+v", step, got, want)
		}
	}
	post("web")
	check("first upload", true)
	r.compile(name, "")
	post("web")
	check("the same facts", false)
	post("db")
	check("changed facts", true)
	r.do(a1, "PUT", "/puppet/v3/facts/"+name+"?environment=production",
		[]byte(`{"name":"`+name+`","values":{"role":"mail"}}`), map[string]string{"Content-Type": "application/json"})
	check("PUT facts", true)
}

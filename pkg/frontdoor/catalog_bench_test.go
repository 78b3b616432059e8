package frontdoor

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/compilefarm/compilefarm/pkg/facts"
	"github.com/compilefarm/compilefarm/pkg/farm"
	"github.com/compilefarm/compilefarm/pkg/intake"
	"github.com/compilefarm/compilefarm/pkg/memstore"
	"github.com/compilefarm/compilefarm/pkg/metrics"
)

// benchReads are the facts the benchmark environment's catalog reads
// (bench/environments): what the intake compares of fresh facts.
var benchReads = []struct {
	path []string
	kind facts.ReadKind
}{
	{[]string{"networking", "fqdn"}, facts.ReadValue},
	{[]string{"processors", "count"}, facts.ReadValue},
	{[]string{"os"}, facts.ReadValue},
	{[]string{"memory", "system", "total"}, facts.ReadValue},
}

// recordedFacts is the facts document of the recorded agent's catalog
// request, its values decoded.
func recordedFacts(tb testing.TB) map[string]any {
	tb.Helper()
	b, err := os.ReadFile("../../testdata/puppet-protocol/catalog-request-agent1.decoded.json")
	if err != nil {
		tb.Fatal(err)
	}
	var req struct {
		Facts map[string]any `json:"facts"`
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(&req); err != nil {
		tb.Fatal(err)
	}
	return req.Facts
}

// freshForms are n catalog request bodies of certname as the recorded
// agent sends them (its facts, URL-encoded twice), each with the volatile
// facts of another run (uptime, free memory, timestamp): what a
// steady-state run sends.
func freshForms(tb testing.TB, certname string, n int) [][]byte {
	doc := recordedFacts(tb)
	doc["name"] = certname
	values := doc["values"].(map[string]any)
	out := make([][]byte, n)
	for i := range out {
		values["uptime_seconds"] = json.Number(fmt.Sprint(1_000_000 + i*1800))
		values["memoryfree_mb"] = json.Number(fmt.Sprint(1000 + i))
		doc["timestamp"] = time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC).Add(time.Duration(i) * 30 * time.Minute).Format(time.RFC3339Nano)
		b, err := json.Marshal(doc)
		if err != nil {
			tb.Fatal(err)
		}
		out[i] = []byte("facts_format=application%2Fjson&facts=" + url.QueryEscape(url.QueryEscape(string(b))) +
			"&environment=production&configured_environment=production&check_environment=true" +
			"&transaction_uuid=f443bbc2-4e7e-4b26-9bdf-ed753cb6b4f5&job_uuid=&static_catalog=true" +
			"&checksum_type=sha256.sha384.sha512.sha224.md5")
	}
	return out
}

// catalogBench is a front door with in-memory stores, the real intake,
// and one node whose catalog is compiled, with its record of the facts it
// read.
type catalogBench struct {
	fd    *Server
	h     http.Handler
	store *memstore.Store
	name  string
}

func newCatalogBench(tb testing.TB) *catalogBench {
	tb.Helper()
	ctx := context.Background()
	const name = "agent1.example.test"
	store := memstore.New()
	queue := memstore.NewQueue(memstore.QueueOptions{})
	if err := store.PutEnvironment(ctx, farm.Environment{Name: "production", CodeID: "code-1"}); err != nil {
		tb.Fatal(err)
	}
	filter, _ := facts.NewFilter(facts.DefaultVolatile)
	discard := slog.New(slog.DiscardHandler)
	in := &intake.Intake{Content: store, Nodes: store, Envs: store, Queue: queue, Filter: filter, Log: discard}
	fd := &Server{Intake: in, Nodes: store, Envs: store, Content: store, Metrics: metrics.New(queue), Log: discard}
	cb := &catalogBench{fd: fd, h: fd.Handler(), store: store, name: name}

	// The node's first check-in, and its compile.
	doc := recordedFacts(tb)
	doc["name"] = name
	first, _ := json.Marshal(doc)
	if _, err := in.Submit(ctx, intake.Upload{Certname: name, Environment: "production", Facts: facts.JSONDocument(first)}); err != nil {
		tb.Fatal(err)
	}
	var rec facts.ReadRecord
	for _, r := range benchReads {
		o, err := facts.Observe(doc["values"].(map[string]any), r.path, r.kind)
		if err != nil {
			tb.Fatal(err)
		}
		rec.Reads = append(rec.Reads, o)
	}
	recJSON, _ := json.Marshal(rec)
	reads, _ := store.Put(ctx, farm.SpaceCatalogs, recJSON)
	cat, _ := store.Put(ctx, farm.SpaceCatalogs, []byte(`{"name":"`+name+`","version":1,"resources":[]}`))
	_, err := store.UpdateNode(ctx, name, func(n *farm.Node) error {
		n.Catalog = &farm.CatalogRef{Digest: cat, Seq: n.Requested.Seq, CodeID: "code-1", ReadsDigest: reads}
		n.Compile = &farm.CompileStatus{Result: farm.ResultOK, Seq: n.Requested.Seq, At: time.Now()}
		return nil
	})
	if err != nil {
		tb.Fatal(err)
	}
	return cb
}

// post sends one catalog request; it must be answered with the catalog.
func (cb *catalogBench) post(tb testing.TB, form []byte) {
	req := httptest.NewRequest("POST", "/puppet/v3/catalog/"+cb.name+"?environment=production", bytes.NewReader(form))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/vnd.puppet.rich+json, application/json, text/pson")
	req.TLS = agentTLS(cb.name)
	w := httptest.NewRecorder()
	cb.h.ServeHTTP(w, req)
	if w.Code != http.StatusOK {
		tb.Fatalf("catalog: %d %s", w.Code, w.Body)
	}
}

// BenchmarkCatalogFreshFacts: the front door's answer to a steady-state
// run's catalog request: fresh volatile facts, nothing the catalog read
// changed, the stored catalog served (memstore, no TLS).
func BenchmarkCatalogFreshFacts(b *testing.B) {
	cb := newCatalogBench(b)
	forms := freshForms(b, cb.name, 64)
	seq := func() uint64 {
		n, err := cb.store.GetNode(b.Context(), cb.name)
		if err != nil {
			b.Fatal(err)
		}
		return n.RequestSeq
	}
	before := seq()
	b.SetBytes(int64(len(forms[0])))
	for i := 0; b.Loop(); i++ {
		cb.post(b, forms[i%len(forms)])
	}
	if after := seq(); after != before {
		b.Fatalf("fresh volatile facts queued %d compiles", after-before)
	}
}

package frontdoor

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	"github.com/compilefarm/compilefarm/pkg/farm"
	"github.com/compilefarm/compilefarm/pkg/memstore"
)

// runSizedReport is the recorded agent report (report format 12) with its
// resource statuses repeated, under new names, until it is about the size
// of a steady-state run's report on the benchmark environment
// (bench/environments: ~330 KB for its 300 resources), the fields in the
// recorded order.
func runSizedReport(tb testing.TB) []byte {
	tb.Helper()
	b, err := os.ReadFile("../../testdata/puppet-protocol/report-request-agent1.json")
	if err != nil {
		tb.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	var keys []string
	fields := map[string]json.RawMessage{}
	if _, err := dec.Token(); err != nil {
		tb.Fatal(err)
	}
	for dec.More() {
		k, _ := dec.Token()
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			tb.Fatal(err)
		}
		keys = append(keys, k.(string))
		fields[k.(string)] = v
	}
	var statuses map[string]json.RawMessage
	if err := json.Unmarshal(fields["resource_statuses"], &statuses); err != nil {
		tb.Fatal(err)
	}
	var out bytes.Buffer
	out.WriteString("{")
	for i, k := range keys {
		if i > 0 {
			out.WriteString(",")
		}
		fmt.Fprintf(&out, "%q:", k)
		if k != "resource_statuses" {
			out.Write(fields[k])
			continue
		}
		out.WriteString("{")
		n := 0
		for copyNo := 0; out.Len() < 320_000; copyNo++ {
			for name, st := range statuses {
				if n > 0 {
					out.WriteString(",")
				}
				n++
				fmt.Fprintf(&out, "%q:%s", fmt.Sprintf("%s-%d", name, copyNo), st)
			}
		}
		out.WriteString("}")
	}
	out.WriteString("}")
	return out.Bytes()
}

// BenchmarkReportSummary: reading a report's summary, by scanReport and,
// as it was read before, by encoding/json.
func BenchmarkReportSummary(b *testing.B) {
	recorded, err := os.ReadFile("../../testdata/puppet-protocol/report-request-agent1.json")
	if err != nil {
		b.Fatal(err)
	}
	for _, doc := range []struct {
		name string
		b    []byte
	}{{"recorded-18KB", recorded}, {"run-330KB", runSizedReport(b)}} {
		b.Run(doc.name+"/scan", func(b *testing.B) {
			b.SetBytes(int64(len(doc.b)))
			for b.Loop() {
				h, err := scanReport(doc.b)
				if err != nil {
					b.Fatal(err)
				}
				h.summary()
			}
		})
		b.Run(doc.name+"/encoding-json", func(b *testing.B) {
			b.SetBytes(int64(len(doc.b)))
			for b.Loop() {
				var j jsonReport
				if err := json.Unmarshal(doc.b, &j); err != nil {
					b.Fatal(err)
				}
				j.header().summary()
			}
		})
	}
}

// BenchmarkPutReport: the front door's whole answer to a steady-state
// run's report (run-sized, unchanged, the same catalog as the node's last
// report): read, summarised, recorded on the node (memstore), no TLS.
func BenchmarkPutReport(b *testing.B) {
	const name = "agent1.example.test"
	store := memstore.New()
	fd := &Server{Nodes: store, Content: store, Reports: ReportPolicy{Every: -1}, Log: slog.New(slog.DiscardHandler)}
	h := fd.Handler()
	if _, err := store.UpdateNode(b.Context(), name, func(*farm.Node) error { return nil }); err != nil {
		b.Fatal(err)
	}
	body := bytes.Replace(runSizedReport(b), []byte(`"status":"changed"`), []byte(`"status":"unchanged"`), 1)
	var rep map[string]any
	json.Unmarshal(body, &rep)
	// Each run's report is newer than the last: its time is rewritten in
	// place (the same width).
	const layout = "2006-01-02T15:04:05.000000000+00:00"
	timeAt := bytes.Index(body, []byte(rep["time"].(string)))
	at := time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC)
	put := func(at time.Time) {
		copy(body[timeAt:], at.Format(layout))
		req := httptest.NewRequest("PUT", "/puppet/v3/report/"+name+"?environment=production", bytes.NewReader(body))
		req.TLS = agentTLS(name)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != http.StatusOK {
			b.Fatalf("report: %d %s", w.Code, w.Body)
		}
	}
	put(at) // the node's first report: stored whole
	b.SetBytes(int64(len(body)))
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		put(at.Add(time.Duration(i+1) * time.Minute))
	}
}

// agentTLS is the TLS state of a request from certname's agent, as the
// front door's handlers see it after the handshake verified its
// certificate.
func agentTLS(certname string) *tls.ConnectionState {
	c := &x509.Certificate{Subject: pkix.Name{CommonName: certname}, SerialNumber: big.NewInt(1)}
	return &tls.ConnectionState{PeerCertificates: []*x509.Certificate{c}, VerifiedChains: [][]*x509.Certificate{{c}}}
}

package frontdoor

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/compilefarm/compilefarm/pkg/farm"
	"github.com/compilefarm/compilefarm/pkg/farm/farmtest"
	"github.com/compilefarm/compilefarm/pkg/intake"
	"github.com/compilefarm/compilefarm/pkg/metrics"
)

// sample is the value of one counter or gauge.
func sample(t *testing.T, m prometheus.Metric) float64 {
	t.Helper()
	var d dto.Metric
	if err := m.Write(&d); err != nil {
		t.Fatal(err)
	}
	return d.GetCounter().GetValue() + d.GetGauge().GetValue()
}

// gate holds the calls that reach it until it is opened, and counts them.
type gate struct {
	entered chan struct{} // a value per call that arrived
	open    chan struct{} // closed: every call goes through

	once      sync.Once
	mu        sync.Mutex
	in, maxIn int
}

// release opens the gate (once: tests call it and register it as a
// cleanup, so a failed test does not leave requests held).
func (g *gate) release() { g.once.Do(func() { close(g.open) }) }

func newGate() *gate {
	return &gate{entered: make(chan struct{}, 4096), open: make(chan struct{})}
}

// hold waits until the gate opens (or ctx ends); the caller calls leave
// when it is done with what it holds.
func (g *gate) hold(ctx context.Context) (leave func()) {
	g.mu.Lock()
	g.in++
	g.maxIn = max(g.maxIn, g.in)
	g.mu.Unlock()
	select {
	case g.entered <- struct{}{}:
	default:
	}
	select {
	case <-g.open:
	case <-ctx.Done():
	}
	return func() {
		g.mu.Lock()
		g.in--
		g.mu.Unlock()
	}
}

func (g *gate) max() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.maxIn
}

// gatedIntake holds every upload, with its body, at the gate.
type gatedIntake struct {
	Intake
	g *gate
}

func (i gatedIntake) Submit(ctx context.Context, up intake.Upload) (intake.Outcome, error) {
	defer i.g.hold(ctx)()
	return i.Intake.Submit(ctx, up)
}

// gatedCRL holds every CRL request at the gate.
type gatedCRL struct {
	CA
	g *gate
}

func (c gatedCRL) CRL(ctx context.Context) ([]byte, error) {
	defer c.g.hold(ctx)()
	return c.CA.CRL(ctx)
}

// serving returns a copy of the rig that serves fd (on a server of its own).
func (r *rig) serving(fd *Server) *rig {
	srv := httptest.NewUnstartedServer(fd.Handler())
	srv.TLS = r.srv.TLS.Clone()
	srv.StartTLS()
	r.t.Cleanup(srv.Close)
	r2 := *r
	r2.fd, r2.srv = fd, srv
	return &r2
}

// TestAdmissionRefusesWhenBusy fills each lane with one request held at a
// gate (an in-flight limit of 1, no queue): the next request of the lane is
// answered 503 + Retry-After + Puppet's error and changes nothing, the
// other lane and the health check still answer, and once the held requests
// finish every request goes through again.
func TestAdmissionRefusesWhenBusy(t *testing.T) {
	base := newRig(t)
	ctx := context.Background()
	const agent1, agent2 = "agent1.example.test", "agent2.example.test"
	catalogPath := "/puppet/v3/catalog/" + agent1 + "?environment=production"
	// agent1 has a catalog: its check-ins with the same facts are answered at once.
	base.do(base.client(agent1), "POST", catalogPath, catalogForm(agent1, "web"), agentHeaders)
	base.compile(agent1, "")

	heavyGate, lightGate := newGate(), newGate()
	fd := *base.fd
	fd.Intake = gatedIntake{Intake: base.fd.Intake, g: heavyGate}
	fd.CA = gatedCRL{CA: base.fd.CA, g: lightGate}
	fd.Admission = Admission{MaxInFlight: 1, MaxInFlightLight: 1, RetryAfter: 7 * time.Second}
	fd.Metrics = metrics.New(nil)
	r := base.serving(&fd)
	t.Cleanup(heavyGate.release) // before the server's Close, which waits for held requests
	t.Cleanup(lightGate.release)
	a1, a2 := r.client(agent1), r.client(agent2)

	held := make(chan response, 2)
	go func() { held <- r.do(a1, "POST", catalogPath, catalogForm(agent1, "web"), agentHeaders) }()
	<-heavyGate.entered

	before, err := r.store.GetNode(ctx, agent1)
	if err != nil {
		t.Fatal(err)
	}
	csr, _ := farmtest.NewCSR(t, "agent3.example.test")
	report := []byte(`{"host":"agent2.example.test","status":"changed","time":"2026-11-21T22:28:30.337368966+00:00","configuration_version":12}`)
	type request struct {
		name         string
		client       *http.Client
		method, path string
		body         []byte
		header       map[string]string
	}
	heavy := []request{
		{"catalog with other facts", a1, "POST", catalogPath, catalogForm(agent1, "db"), agentHeaders},
		{"facts upload", a2, "PUT", "/puppet/v3/facts/" + agent2 + "?environment=production",
			[]byte(`{"name":"agent2.example.test","values":{"cf_role":"web"}}`), map[string]string{"Content-Type": "application/json"}},
		{"report", a2, "PUT", "/puppet/v3/report/" + agent2 + "?environment=production", report, map[string]string{"Content-Type": "application/json"}},
		{"node", a2, "GET", "/puppet/v3/node/" + agent2 + "?environment=production", nil, nil},
		{"certificate request", r.anon, "PUT", "/puppet-ca/v1/certificate_request/agent3.example.test", csr, map[string]string{"Content-Type": "text/plain"}},
	}
	light := []request{
		{"file metadata", a1, "GET", "/puppet/v3/file_metadata/modules/pupdemo/static.txt?links=manage&checksum_type=sha256&source_permissions=ignore&environment=production", nil, nil},
		{"CA certificate", r.anon, "GET", "/puppet-ca/v1/certificate/ca", nil, nil},
		{"status services", r.anon, "GET", "/status/v1/services", nil, nil},
	}
	health := request{"health check", r.anon, "GET", "/status/v1/simple", nil, nil}

	refused := func(t *testing.T, rq request) {
		t.Helper()
		resp := r.do(rq.client, rq.method, rq.path, rq.body, rq.header)
		if resp.status != http.StatusServiceUnavailable || resp.header.Get("Retry-After") != "7" {
			t.Fatalf("%s %s: %d Retry-After %q %s, want 503 with Retry-After 7", rq.method, rq.path, resp.status, resp.header.Get("Retry-After"), resp.body)
		}
		const what = "at capacity"
		if strings.HasPrefix(rq.path, "/puppet-ca/") {
			// Puppet's CA answers its errors in plain text.
			if !strings.HasPrefix(resp.header.Get("Content-Type"), "text/plain") || !strings.Contains(resp.body, what) {
				t.Errorf("CA refusal: %q %s, want plain text saying %q", resp.header.Get("Content-Type"), resp.body, what)
			}
			return
		}
		var pe puppetError
		if err := json.Unmarshal([]byte(resp.body), &pe); err != nil || pe.IssueKind != "RUNTIME_ERROR" ||
			!strings.HasPrefix(pe.Message, "Service Unavailable: ") || !strings.Contains(pe.Message, what) || !strings.Contains(pe.Message, "Retry-After") {
			t.Errorf("refusal body %s (%v), want Puppet's JSON error saying what happened and what to do", resp.body, err)
		}
	}
	answered := func(t *testing.T, rq request) {
		t.Helper()
		if resp := r.do(rq.client, rq.method, rq.path, rq.body, rq.header); resp.status != http.StatusOK {
			t.Errorf("%s %s: %d %s, want 200", rq.method, rq.path, resp.status, resp.body)
		}
	}

	t.Run("heavy lane full", func(t *testing.T) {
		for _, rq := range heavy {
			t.Run(rq.name, func(t *testing.T) { refused(t, rq) })
		}
		for _, rq := range append(light, health) {
			t.Run(rq.name, func(t *testing.T) { answered(t, rq) })
		}
	})

	// The light lane full too: still the health check.
	go func() { held <- r.do(r.anon, "GET", "/puppet-ca/v1/certificate_revocation_list/ca", nil, nil) }()
	<-lightGate.entered
	t.Run("both lanes full", func(t *testing.T) {
		for _, rq := range light {
			t.Run(rq.name, func(t *testing.T) { refused(t, rq) })
		}
		t.Run(health.name, func(t *testing.T) { answered(t, health) })
	})

	t.Run("nothing refused was processed", func(t *testing.T) {
		if _, err := r.store.GetNode(ctx, agent2); !errors.Is(err, farm.ErrNotFound) {
			t.Errorf("refused facts and report for agent2 left a node record (err %v)", err)
		}
		after, err := r.store.GetNode(ctx, agent1)
		if err != nil {
			t.Fatal(err)
		}
		if after.FactsDigest != before.FactsDigest || after.Requested.Seq != before.Requested.Seq {
			t.Errorf("refused catalog request changed agent1: facts %s -> %s, requested seq %d -> %d",
				before.FactsDigest, after.FactsDigest, before.Requested.Seq, after.Requested.Seq)
		}
		if got := sample(t, fd.Metrics.Refused.WithLabelValues(metrics.LaneHeavy, metrics.RefusedQueueFull)); got != float64(len(heavy)) {
			t.Errorf("heavy refusals counted: %v, want %d", got, len(heavy))
		}
	})

	heavyGate.release()
	lightGate.release()
	for range 2 {
		if resp := <-held; resp.status != http.StatusOK {
			t.Errorf("a held request: %d %s, want 200", resp.status, resp.body)
		}
	}
	t.Run("after release", func(t *testing.T) {
		for _, rq := range append(heavy, light...) {
			t.Run(rq.name, func(t *testing.T) { answered(t, rq) })
		}
	})
}

// TestAdmissionFlood sends 2,000 catalog requests at once, each with a
// 64 KiB body, to a front door that takes 4 at a time and queues 16: the
// bodies held at once (those the intake holds) never exceed 4, the 1,980
// that find the queue full are refused at once, and the queued ones are
// served once the held ones finish.
func TestAdmissionFlood(t *testing.T) {
	const (
		requests = 2000
		limit    = 4
		queued   = 16
		agent1   = "agent1.example.test"
	)
	r := newRig(t)
	doc, _ := json.Marshal(map[string]any{"name": agent1, "values": map[string]any{"cf_role": "web", "padding": strings.Repeat("x", 64<<10)}})
	body := []byte(url.Values{"facts_format": {"application/json"}, "facts": {url.QueryEscape(string(doc))},
		"environment": {"production"}}.Encode())
	path := "/puppet/v3/catalog/" + agent1 + "?environment=production"
	r.inProcess(r.fd, "POST", path, body)
	r.compile(agent1, "")

	g := newGate()
	fd := *r.fd
	fd.Intake = gatedIntake{Intake: r.fd.Intake, g: g}
	fd.Admission = Admission{MaxInFlight: limit, MaxInFlightLight: 1, MaxQueued: queued, QueueWait: time.Hour, RetryAfter: time.Second}
	fd.Metrics = metrics.New(nil)
	fd.Log = quietLog
	h := fd.Handler()
	t.Cleanup(g.release)

	leaf, err := x509.ParseCertificate(r.certs[agent1].Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	statuses := make(chan int, requests)
	for range requests {
		go func() {
			req := httptest.NewRequest("POST", path, bytes.NewReader(body))
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			req.TLS = &tls.ConnectionState{PeerCertificates: []*x509.Certificate{leaf}, VerifiedChains: [][]*x509.Certificate{{leaf}}}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, req)
			statuses <- w.Code
		}()
	}
	// A guard, not a timing: more than limit+queued admitted would leave
	// fewer refusals than awaited here.
	stuck := time.After(2 * time.Minute)
	for i := range requests - limit - queued {
		select {
		case code := <-statuses:
			if code != http.StatusServiceUnavailable {
				t.Fatalf("response %d of the flood: %d, want 503 (the rest wait at the gate or in the queue)", i, code)
			}
		case <-stuck:
			g.release()
			t.Fatalf("%d refusals, want %d: more than %d requests held or queued (%d bodies held at once)",
				i, requests-limit-queued, limit+queued, g.max())
		}
	}
	refused := sample(t, fd.Metrics.Refused.WithLabelValues(metrics.LaneHeavy, metrics.RefusedQueueFull))
	inFlight := sample(t, fd.Metrics.InFlight.WithLabelValues(metrics.LaneHeavy))
	if refused != requests-limit-queued || inFlight != limit {
		t.Errorf("metrics during the flood: %v refused, %v in flight; want %d and %d", refused, inFlight, requests-limit-queued, limit)
	}
	g.release()
	for range limit + queued {
		if code := <-statuses; code != http.StatusOK {
			t.Errorf("an admitted request: %d, want 200", code)
		}
	}
	if got := g.max(); got > limit {
		t.Errorf("%d request bodies held at once, want at most %d", got, limit)
	}
	if got := sample(t, fd.Metrics.InFlight.WithLabelValues(metrics.LaneHeavy)); got != 0 {
		t.Errorf("in flight after the flood: %v, want 0", got)
	}
}

// TestQueueWait: a request waits in the queue while every slot is busy
// and is admitted when one frees; with no slot within the wait, it is
// refused. No timing is asserted: the first wait is an hour, the second
// none.
func TestQueueWait(t *testing.T) {
	tests := []struct {
		name       string
		wait       time.Duration
		wantStatus int
		wantReason string
	}{
		{"slot frees within the wait", time.Hour, http.StatusOK, ""},
		{"no slot within the wait", 0, http.StatusServiceUnavailable, metrics.RefusedQueueWait},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &Server{Admission: Admission{MaxInFlight: 1, MaxInFlightLight: 1, MaxQueued: 1, QueueWait: tt.wait}, Metrics: metrics.New(nil), Log: quietLog}
			heavy, _ := s.newLanes()
			busy, release := make(chan struct{}), make(chan struct{})
			first := heavy.admit(func(w http.ResponseWriter, r *http.Request) { close(busy); <-release })
			second := heavy.admit(func(w http.ResponseWriter, r *http.Request) {})
			go first(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil))
			<-busy
			done := make(chan int)
			go func() {
				w := httptest.NewRecorder()
				second(w, httptest.NewRequest("GET", "/", nil))
				done <- w.Code
			}()
			if tt.wantReason == "" {
				for heavy.queued.Load() == 0 { // release once the second request waits
					time.Sleep(time.Millisecond)
				}
				close(release)
			} else {
				defer close(release)
			}
			if got := <-done; got != tt.wantStatus {
				t.Errorf("queued request: %d, want %d", got, tt.wantStatus)
			}
			if tt.wantReason != "" {
				if got := sample(t, s.Metrics.Refused.WithLabelValues(metrics.LaneHeavy, tt.wantReason)); got != 1 {
					t.Errorf("refusals for %s: %v, want 1", tt.wantReason, got)
				}
			}
		})
	}
}

// TestWithoutSlot: a request waiting for a compile gives its slot back, so
// another request is served meanwhile, and takes one again before it goes
// on.
func TestWithoutSlot(t *testing.T) {
	s := &Server{Admission: Admission{MaxInFlight: 1, MaxInFlightLight: 1}, Log: quietLog}
	heavy, _ := s.newLanes()
	waiting, compiled, aDone := make(chan struct{}), make(chan struct{}), make(chan struct{})
	a := heavy.admit(func(w http.ResponseWriter, r *http.Request) {
		withoutSlot(r, func() { close(waiting); <-compiled })
		close(aDone)
	})
	bIn, bRelease := make(chan struct{}), make(chan struct{})
	b := heavy.admit(func(w http.ResponseWriter, r *http.Request) { close(bIn); <-bRelease })

	go a(httptest.NewRecorder(), httptest.NewRequest("POST", "/", nil))
	<-waiting
	bw := httptest.NewRecorder()
	bServed := make(chan struct{})
	go func() { b(bw, httptest.NewRequest("POST", "/", nil)); close(bServed) }()
	<-bIn // admitted while a waits: a gave its slot back
	close(compiled)
	select {
	case <-aDone:
		t.Fatal("a went on while b held the only slot")
	default:
	}
	close(bRelease)
	<-bServed
	<-aDone
	if bw.Code != http.StatusOK {
		t.Errorf("b: %d, want 200", bw.Code)
	}
	if n := len(heavy.slots); n != 0 {
		t.Errorf("%d slots held after both finished, want 0", n)
	}
}

func TestRetryAfter(t *testing.T) {
	tests := []struct {
		retryAfter, jitter time.Duration
		min, max           int
	}{
		{5 * time.Second, 10 * time.Second, 5, 15},
		{time.Second, 0, 1, 1},
		{0, 0, 1, 1}, // at least a second: 0 would make agents retry at once
		{1500 * time.Millisecond, 0, 2, 2},
		{10 * time.Second, 1500 * time.Millisecond, 10, 11},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s+%s", tt.retryAfter, tt.jitter), func(t *testing.T) {
			s := &Server{Admission: Admission{RetryAfter: tt.retryAfter, RetryAfterJitter: tt.jitter}}
			heavy, _ := s.newLanes()
			seen := map[int]bool{}
			for range 1000 {
				got := heavy.retryAfter()
				if got < tt.min || got > tt.max {
					t.Fatalf("Retry-After %d, want %d..%d", got, tt.min, tt.max)
				}
				seen[got] = true
			}
			if len(seen) != tt.max-tt.min+1 {
				t.Errorf("1,000 draws gave %d distinct values, want all %d of %d..%d", len(seen), tt.max-tt.min+1, tt.min, tt.max)
			}
		})
	}
}

// TestRefusalLogSampled: a herd of refusals makes one log line per
// interval, the next one counting those not logged.
func TestRefusalLogSampled(t *testing.T) {
	clk := &fakeClock{t: time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)}
	var buf bytes.Buffer
	s := &Server{Admission: Admission{MaxInFlight: 1}, Log: slog.New(slog.NewTextHandler(&buf, nil))}
	heavy, _ := s.newLanes()
	heavy.log.now = clk.now
	var wg sync.WaitGroup
	for range 500 {
		wg.Go(func() {
			heavy.log.refused(httptest.NewRequest("POST", "/puppet/v3/catalog/x", nil), heavy, metrics.RefusedQueueFull)
		})
	}
	wg.Wait()
	if n := strings.Count(buf.String(), "\n"); n != 1 {
		t.Fatalf("500 refusals within the interval: %d log lines, want 1:\n%s", n, buf.String())
	}
	clk.set(clk.now().Add(refusalLogEvery))
	heavy.log.refused(httptest.NewRequest("PUT", "/puppet/v3/report/x", nil), heavy, metrics.RefusedQueueWait)
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[1], "unlogged_refusals=499") || !strings.Contains(lines[1], "reason=queue_wait") {
		t.Errorf("after the interval: %q, want a second line with unlogged_refusals=499", lines)
	}
}

// TestRefusalReachesRubyClient: Ruby's Net::HTTP, which Puppet's agent
// uses, sends a request's whole body before it reads the answer; a refused
// upload of a few megabytes (a large report) still gets the 503 and its
// Retry-After, not a connection reset, because the refusal reads and drops
// the body first.
func TestRefusalReachesRubyClient(t *testing.T) {
	if testing.Short() {
		t.Skip("needs ruby; skipped with -short")
	}
	s := &Server{Admission: Admission{MaxInFlight: 1, MaxInFlightLight: 1, RetryAfter: 3 * time.Second}, Log: quietLog}
	s.defaults()
	heavy, _ := s.newLanes()
	busy, release := make(chan struct{}), make(chan struct{})
	srv := httptest.NewTLSServer(heavy.admit(func(w http.ResponseWriter, r *http.Request) { close(busy); <-release }))
	defer srv.Close()
	defer close(release) // before Close, which waits for the held request
	go srv.Client().Get(srv.URL)
	<-busy
	const script = `require 'net/http'; require 'openssl'
uri = URI(ARGV[0])
http = Net::HTTP.new(uri.host, uri.port)
http.use_ssl = true
http.verify_mode = OpenSSL::SSL::VERIFY_NONE
http.start
req = Net::HTTP::Put.new('/puppet/v3/report/agent1.example.test')
req.body = 'a' * (ARGV[1].to_i << 20)
req['Content-Type'] = 'application/json'
http.request(req) { |res| puts "#{res.code} #{res['Retry-After']}" }`
	for _, mib := range []string{"4", "16"} {
		out, err := exec.Command("ruby", "-e", script, srv.URL, mib).CombinedOutput()
		if got := strings.TrimSpace(string(out)); err != nil || got != "503 3" {
			t.Errorf("refused %s MiB upload from Ruby: %v %.300s, want 503 with Retry-After 3", mib, err, got)
		}
	}
}

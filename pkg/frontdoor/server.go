// Package frontdoor is the farm's port 8140: the parts of Puppet Server's
// HTTP API v3 and CA API v1 that a Puppet 7 agent uses, answered from stored
// catalogs, code snapshots and the CA, with Puppet Server's default
// authorization (a node reads and writes only its own node, catalog, facts
// and report; CA bootstrap and status are open; the rest needs a valid cert),
// and the farm's operator API for operator certificates (pp_cli_auth).
package frontdoor

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/compilefarm/compilefarm/pkg/classifier"
	"github.com/compilefarm/compilefarm/pkg/farm"
	"github.com/compilefarm/compilefarm/pkg/intake"
	"github.com/compilefarm/compilefarm/pkg/metrics"
)

// CA is the agent-facing half of farm.CA (whose doc states the errors the
// CA endpoints map to answers): the built-in CA or a proxy to an upstream
// one. The front door neither signs, revokes nor lists.
type CA interface {
	CACertificate(ctx context.Context) ([]byte, error)
	CRL(ctx context.Context) ([]byte, error)
	SubmitCSR(ctx context.Context, certname string, csrPEM []byte) error
	Certificate(ctx context.Context, certname string) ([]byte, error)
	CertificateRequest(ctx context.Context, certname string) ([]byte, error)
}

// Revocations tells whether a client certificate was revoked.
type Revocations interface {
	IsRevoked(serial *big.Int) bool
}

// Peers verifies the certificates a TLS client presented (leaf first).
// A server whose TLS configuration verifies client certificates in
// VerifyConnection rather than in crypto/tls (clientcert.Check.TLSConfig
// with a cache) leaves VerifiedChains empty and must set it.
type Peers interface {
	VerifyPeer(certs []*x509.Certificate) error
}

// Intake takes fact uploads and queues compiles.
type Intake interface {
	Submit(ctx context.Context, up intake.Upload) (intake.Outcome, error)
}

// Nodes reads node records.
type Nodes interface {
	GetNode(ctx context.Context, certname string) (farm.Node, error)
	UpdateNode(ctx context.Context, certname string, fn func(*farm.Node) error) (farm.Node, error)
	RecordReport(ctx context.Context, certname string, sum farm.ReportSummary) (*farm.ReportSummary, error)
}

// PuppetDB feeds a site's PuppetDB (pkg/puppetdb's Sink): it is told of
// every accepted fact upload and report, and never fails the run.
type PuppetDB interface {
	Facts(ctx context.Context, node, environment string, facts, nodeInfo farm.Digest, changed bool)
	Report(ctx context.Context, node string, body []byte, sum farm.ReportSummary, newCatalog bool)
}

// Environments reads environment records.
type Environments interface {
	GetEnvironment(ctx context.Context, name string) (farm.Environment, error)
	ListEnvironments(ctx context.Context) ([]farm.Environment, error)
}

// Content reads and writes the content store.
type Content interface {
	Get(ctx context.Context, space farm.Space, d farm.Digest) ([]byte, error)
	Put(ctx context.Context, space farm.Space, data []byte) (farm.Digest, error)
}

// DefaultCacheBytes is Server.CacheBytes when unset: 512 MiB of catalogs,
// and 64 MiB each of facts and file metadata.
const DefaultCacheBytes = 640 << 20

// Server answers agents. Set the fields, then serve Handler().
type Server struct {
	CA          CA
	Revocations Revocations
	Peers       Peers // nil: only certificates crypto/tls verified (VerifiedChains) are accepted
	Intake      Intake
	Nodes       Nodes
	Envs        Environments
	Content     Content
	Files       Files
	Bucket      Bucket // the server filebucket; nil leaves file_bucket_file out (404)
	Metrics     *metrics.Farm
	Log         *slog.Logger
	// PuppetDB, when set, is told of fact uploads and reports for the
	// site's PuppetDB.
	PuppetDB PuppetDB
	// Classifier, when set, is the external node classifier the node
	// endpoint answers from (the intake classifies catalog requests).
	Classifier Classifier
	// Operator, when set, is the operator API (pkg/admin's routes,
	// /admin/v1/...), served under OperatorPrefix to operator certificates
	// only (operator.go); nil leaves those paths out (404).
	Operator http.Handler
	// Services are reported by /status/v1/services beside Puppet's own
	// (the PCP broker's "broker-service"), each under its name.
	Services []ServiceStatus

	// PuppetVersion is sent as X-Puppet-Version (the engine's Puppet).
	PuppetVersion string
	// FirstCompileWait bounds how long a node with no catalog yet waits for
	// its first compile before getting 503 + Retry-After. Default 60s.
	FirstCompileWait time.Duration
	// ChangedCompileWait bounds how long a node whose facts or code changed
	// waits for the new compile before getting its last good catalog.
	// Default 10s.
	ChangedCompileWait time.Duration
	// MaxBody bounds catalog, facts and CSR bodies; MaxReport report bodies;
	// MaxBucketFile the files agents back up to the filebucket.
	MaxBody       int64
	MaxReport     int64
	MaxBucketFile int64
	// Admission bounds the requests in progress at once; the zero value is
	// DefaultAdmission(). Each Handler has its own slots.
	Admission Admission

	// Reports says which reports are kept whole (report.go).
	Reports ReportPolicy
	// CacheBytes bounds the memory of what the front door keeps between
	// requests: served catalogs (eight tenths), the facts documents of runs
	// under way and file_metadata(s) answers (a tenth each). Once they are
	// full, memory stays flat. 0 is DefaultCacheBytes.
	CacheBytes int64

	catalogs *blobCache
	metadata *blobCache // file_metadata(s) answers (files.go)
	runs     *runState  // what agent runs' requests share (runs.go)
}

func (s *Server) log() *slog.Logger {
	if s.Log != nil {
		return s.Log
	}
	return slog.Default()
}

func (s *Server) defaults() {
	if s.PuppetVersion == "" {
		s.PuppetVersion = "7.23.0"
	}
	if s.FirstCompileWait == 0 {
		s.FirstCompileWait = 60 * time.Second
	}
	if s.ChangedCompileWait == 0 {
		s.ChangedCompileWait = 10 * time.Second
	}
	if s.MaxBody == 0 {
		s.MaxBody = 16 << 20
	}
	if s.MaxReport == 0 {
		s.MaxReport = 256 << 20
	}
	if s.MaxBucketFile == 0 {
		s.MaxBucketFile = DefaultMaxBucketFile
	}
	if s.Admission == (Admission{}) {
		s.Admission = DefaultAdmission()
	}
	if s.CacheBytes <= 0 {
		s.CacheBytes = DefaultCacheBytes
	}
	if s.catalogs == nil {
		s.catalogs = newBlobCache(int(s.CacheBytes * 8 / 10))
	}
	if s.metadata == nil {
		s.metadata = newBlobCache(int(s.CacheBytes / 10))
	}
	if s.runs == nil {
		s.runs = &runState{facts: newBlobCache(int(s.CacheBytes / 10))}
	}
}

// Handler returns the HTTP handler for port 8140. Every path is either
// routed or answered as Puppet answers it: a path with a '.' or '..'
// segment is 400, a known path asked with a method it does not take is 403
// (Puppet Server's auth.conf ends in "deny all"), and any other path is 404
// with Puppet's JSON error. Paths are taken as sent, never cleaned or
// redirected: a "//" reaches the filebucket's <sum>//<path> intact.
// Every endpoint but the health check goes through an admission lane
// (Admission): the heavy one for requests with a body, catalogs and node
// classification, the light one for the rest.
func (s *Server) Handler() http.Handler {
	s.defaults()
	heavy, light := s.newLanes()
	var rt router
	// CA bootstrap: open.
	rt.handle("GET /puppet-ca/v1/certificate/{name}", light.admit(s.getCertificate))
	rt.handle("GET /puppet-ca/v1/certificate_revocation_list/ca", light.admit(s.getCRL))
	rt.handle("PUT /puppet-ca/v1/certificate_request/{name}", heavy.admit(s.putCSR))
	rt.handle("GET /puppet-ca/v1/certificate_request/{name}", light.admit(s.getCSR))
	// Status: open; the health check is never refused.
	rt.handle("GET /status/v1/simple", s.statusSimple)
	rt.handle("GET /status/v1/simple/{service}", s.statusSimple)
	rt.handle("GET /status/v1/services", light.admit(s.statusServices))
	// A node's own resources.
	rt.handle("GET /puppet/v3/node/{name}", heavy.admit(s.ownNode(s.getNode)))
	rt.handle("POST /puppet/v3/catalog/{name}", heavy.admit(s.ownNode(s.postCatalog)))
	rt.handle("GET /puppet/v3/catalog/{name}", heavy.admit(s.ownNode(s.getCatalog)))
	rt.handle("PUT /puppet/v3/facts/{name}", heavy.admit(s.ownNode(s.putFacts)))
	rt.handle("PUT /puppet/v3/report/{name}", heavy.admit(s.ownNode(s.putReport)))
	// Any valid certificate.
	rt.handle("GET /puppet/v3/environments", light.admit(s.anyCert(s.getEnvironments)))
	rt.handle("GET /puppet/v3/file_metadatas/{path...}", light.admit(s.anyCert(s.fileMetadatas)))
	rt.handle("GET /puppet/v3/file_metadata/{path...}", light.admit(s.anyCert(s.fileMetadata)))
	rt.handle("GET /puppet/v3/file_content/{path...}", light.admit(s.anyCert(s.fileContent)))
	rt.handle("GET /puppet/v3/static_file_content/{path...}", light.admit(s.anyCert(s.staticFileContent)))
	if s.Bucket != nil {
		rt.handle("GET /puppet/v3/file_bucket_file/{key...}", light.admit(s.anyCert(s.getBucketFile)))
		rt.handle("HEAD /puppet/v3/file_bucket_file/{key...}", light.admit(s.anyCert(s.headBucketFile)))
		rt.handle("PUT /puppet/v3/file_bucket_file/{key...}", heavy.admit(s.anyCert(s.putBucketFile)))
	}
	if s.Operator != nil {
		// Not admitted: a handful of operators, and a code deploy may
		// take minutes that agents' slots should not wait for.
		op := s.operator(s.Operator)
		rt.handle("GET "+OperatorPrefix+"/admin/v1/{path...}", op)
		rt.handle("POST "+OperatorPrefix+"/admin/v1/{path...}", op)
	}
	if s.Metrics == nil {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { s.route(w, r, rt) })
	}
	for i := range rt {
		rt[i].metrics = s.Metrics.Endpoint(endpointOf(rt[i].path))
	}
	other := s.Metrics.Endpoint(metrics.EndpointOther)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := newStatusWriter(w)
		e := s.route(sw, r, rt)
		if e == nil {
			e = other
		}
		e.Observe(sw.status(), time.Since(start))
		sw.release()
	})
}

// route answers r by its route, or as Puppet answers a path it has no
// route for, and returns the route's metrics (nil: no route).
func (s *Server) route(w http.ResponseWriter, r *http.Request, rt router) *metrics.EndpointMetrics {
	w.Header().Set("X-Puppet-Version", s.PuppetVersion)
	if hasDotSegment(r.URL.Path) {
		// No path the agent sends has one.
		jsonError(w, http.StatusBadRequest, "RUNTIME_ERROR",
			fmt.Sprintf("Bad Request: path %q has a '.' or '..' segment", r.URL.Path))
		return nil
	}
	rte, known := rt.find(r)
	switch {
	case rte != nil:
		rte.handler(w, r)
		return rte.metrics
	case known:
		s.forbidden(w, r, fmt.Sprintf("method %s is not allowed on this path", r.Method))
	default:
		jsonError(w, http.StatusNotFound, "HANDLER_NOT_FOUND",
			fmt.Sprintf("Not Found: No route for %s %s", r.Method, r.URL.Path))
	}
	return nil
}

// router finds the handler of a request by method and path, taking the path
// as sent. (http.ServeMux cleans paths, answering "//" and "/./" with a
// redirect, and answers unknown paths in Go's plain text.)
type router []route

// route is one endpoint: a method and the segments of a path pattern, each
// a literal, a {name} (one non-empty segment) or, last, a {name...} (the
// rest of the path as sent, with its empty segments).
type route struct {
	method  string
	path    string // the pattern's
	segs    []string
	handler http.HandlerFunc
	metrics *metrics.EndpointMetrics // nil without metrics
}

// handle adds the endpoint "METHOD /pattern".
func (rt *router) handle(pattern string, h http.HandlerFunc) {
	method, path, ok := strings.Cut(pattern, " ")
	if !ok || !strings.HasPrefix(path, "/") {
		panic(fmt.Sprintf("frontdoor: bad route pattern %q", pattern))
	}
	*rt = append(*rt, route{method: method, path: path, segs: strings.Split(path[1:], "/"), handler: h})
}

// find returns the route of r (with r's path values set), or nil and
// whether some route has r's path with another method. As with
// http.ServeMux, a GET route also answers HEAD unless a HEAD route does.
func (rt router) find(r *http.Request) (*route, bool) {
	path := r.URL.EscapedPath()
	if !strings.HasPrefix(path, "/") {
		return nil, false
	}
	segs := strings.Split(path[1:], "/")
	var get *route
	var values map[string]string
	known := false
	for i := range rt {
		v, ok := rt[i].match(segs)
		if !ok {
			continue
		}
		known = true
		switch {
		case rt[i].method == r.Method:
			setPathValues(r, v)
			return &rt[i], true
		case rt[i].method == http.MethodGet && r.Method == http.MethodHead && get == nil:
			get, values = &rt[i], v
		}
	}
	if get != nil {
		setPathValues(r, values)
		return get, true
	}
	return nil, known
}

func setPathValues(r *http.Request, values map[string]string) {
	for k, v := range values {
		r.SetPathValue(k, v)
	}
}

// match matches the escaped segments of a path against the route's pattern
// and returns the unescaped values of its wildcards.
func (rt *route) match(segs []string) (map[string]string, bool) {
	var values map[string]string
	set := func(name, escaped string) bool {
		v, err := url.PathUnescape(escaped)
		if err != nil {
			return false
		}
		if values == nil {
			values = map[string]string{}
		}
		values[name] = v
		return true
	}
	for i, p := range rt.segs {
		if rest, ok := strings.CutSuffix(p, "...}"); ok && i == len(rt.segs)-1 {
			if i >= len(segs) {
				return nil, false
			}
			return values, set(strings.TrimPrefix(rest, "{"), strings.Join(segs[i:], "/"))
		}
		if i >= len(segs) {
			return nil, false
		}
		if strings.HasPrefix(p, "{") {
			if segs[i] == "" || !set(strings.Trim(p, "{}"), segs[i]) {
				return nil, false
			}
			continue
		}
		if v, err := url.PathUnescape(segs[i]); err != nil || v != p {
			return nil, false
		}
	}
	if len(segs) != len(rt.segs) {
		return nil, false
	}
	return values, true
}

func hasDotSegment(p string) bool {
	for _, seg := range strings.Split(p, "/") {
		if seg == ".." || seg == "." {
			return true
		}
	}
	return false
}

// peerCert is the request's client certificate, or nil. Handlers behind
// anyCert and ownNode get a verified, unrevoked one.
func peerCert(r *http.Request) *x509.Certificate {
	if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
		return nil
	}
	return r.TLS.PeerCertificates[0]
}

// clientCert returns the request's verified, unrevoked client certificate.
func (s *Server) clientCert(r *http.Request) (*x509.Certificate, string) {
	c := peerCert(r)
	if c == nil {
		return nil, "no verified client certificate"
	}
	if len(r.TLS.VerifiedChains) == 0 {
		// Verified in VerifyConnection (or not at all): ask Peers, which
		// answers a certificate it verified before from memory.
		if s.Peers == nil {
			return nil, "no verified client certificate"
		}
		if err := s.Peers.VerifyPeer(r.TLS.PeerCertificates); err != nil {
			return nil, err.Error()
		}
		return c, ""
	}
	if s.Revocations != nil && s.Revocations.IsRevoked(c.SerialNumber) {
		return nil, fmt.Sprintf("certificate %q (serial %x) is revoked", c.Subject.CommonName, c.SerialNumber)
	}
	return c, ""
}

// anyCert lets through requests with a valid client certificate.
func (s *Server) anyCert(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if _, why := s.clientCert(r); why != "" {
			s.forbidden(w, r, why)
			return
		}
		h(w, r)
	}
}

// ownNode lets through requests whose certificate's CN is the {name} in the
// path, as Puppet Server's default auth.conf does.
func (s *Server) ownNode(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		c, why := s.clientCert(r)
		if why == "" && c.Subject.CommonName != r.PathValue("name") {
			why = fmt.Sprintf("certificate %q may not access node %q", c.Subject.CommonName, r.PathValue("name"))
		}
		if why != "" {
			s.forbidden(w, r, why)
			return
		}
		h(w, r)
	}
}

// forbidden answers 403 as Puppet Server does: plain text, no content type.
func (s *Server) forbidden(w http.ResponseWriter, r *http.Request, why string) {
	s.log().Warn("forbidden", "path", r.URL.Path, "method", r.Method, "remote", r.RemoteAddr, "why", why)
	w.Header()["Content-Type"] = nil
	w.WriteHeader(http.StatusForbidden)
	fmt.Fprintf(w, "Forbidden request: %s (method :%s). Please see the server logs for details.",
		r.URL.Path, strings.ToLower(r.Method))
}

// puppetError is Puppet Server's JSON error body.
type puppetError struct {
	Message   string `json:"message"`
	IssueKind string `json:"issue_kind"`
}

// writeJSON answers 200 with v as JSON.
func writeJSON(w http.ResponseWriter, v any) {
	writeJSONStatus(w, http.StatusOK, v)
}

func writeJSONStatus(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json;charset=utf-8")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

// jsonError answers an error in Puppet Server's JSON shape.
func jsonError(w http.ResponseWriter, status int, kind, msg string) {
	writeJSONStatus(w, status, puppetError{Message: msg, IssueKind: kind})
}

// apiError maps a farm error kind to Puppet Server's answer for /puppet/v3.
func (s *Server) apiError(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case errors.Is(err, classifier.ErrFailed):
		// Puppet Server's answer when its node terminus fails.
		jsonError(w, http.StatusInternalServerError, "RUNTIME_ERROR", "Server Error: "+err.Error())
	case errors.Is(err, farm.ErrInvalid):
		jsonError(w, http.StatusBadRequest, "RUNTIME_ERROR", "Bad Request: "+err.Error())
	case errors.Is(err, farm.ErrNotFound):
		jsonError(w, http.StatusNotFound, "RESOURCE_NOT_FOUND", "Not Found: "+trimKind(err))
	case errors.Is(err, errTooLarge):
		jsonError(w, http.StatusRequestEntityTooLarge, "RUNTIME_ERROR", err.Error())
	default:
		s.log().Error("request failed", "path", r.URL.Path, "err", err)
		w.Header().Set("Retry-After", "5")
		jsonError(w, http.StatusServiceUnavailable, "RUNTIME_ERROR", "Service Unavailable: "+err.Error()+"; try again shortly")
	}
}

// trimKind drops the ": not found" suffix a wrapped farm.ErrNotFound adds,
// so messages read as Puppet's ("Could not find environment 'x'").
func trimKind(err error) string {
	return strings.TrimSuffix(err.Error(), ": "+farm.ErrNotFound.Error())
}

var errTooLarge = errors.New("request body too large")

// bodyBuffers are the buffers the bodies of an agent run's big requests
// are read into, reused: a steady-state run's catalog request (~27 KB of
// facts) and report (hundreds of KB) are read, looked at and dropped, and
// a new buffer each time would be that much memory to clear and collect.
var bodyBuffers = sync.Pool{New: func() any { return new([]byte) }}

// maxRecycledBody bounds the buffers kept for reuse.
const maxRecycledBody = 4 << 20

// recycleBody returns the buffer body was read into (from buf, a
// bodyBuffers' item) to the pool; body must not be used after.
func recycleBody(buf *[]byte, body []byte) {
	if cap(body) <= maxRecycledBody {
		*buf = body[:0]
		bodyBuffers.Put(buf)
	}
}

// readBody reads at most limit bytes of the request body, in one
// allocation when the client sent Content-Length (agents do).
func readBody(r *http.Request, limit int64) ([]byte, error) {
	return readBodyInto(r, limit, nil)
}

// readBodyInto is readBody reading into buf's memory when it is large
// enough (and growing it when not); buf's contents are overwritten.
func readBodyInto(r *http.Request, limit int64, buf []byte) ([]byte, error) {
	if r.ContentLength > limit {
		return nil, fmt.Errorf("%w: %d bytes, the limit is %d", errTooLarge, r.ContentLength, limit)
	}
	if r.ContentLength >= 0 {
		n := int(r.ContentLength)
		b := buf[:0]
		if cap(b) < n {
			b = make([]byte, n)
		}
		b = b[:n]
		if _, err := io.ReadFull(r.Body, b); err != nil {
			return nil, fmt.Errorf("read request body: %v: %w", err, farm.ErrInvalid)
		}
		return b, nil
	}
	b := buf[:0]
	lr := io.LimitReader(r.Body, limit+1)
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		n, err := lr.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("read request body: %v: %w", err, farm.ErrInvalid)
		}
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%w: more than %d bytes", errTooLarge, limit)
	}
	return b, nil
}

func (s *Server) statusSimple(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain;charset=utf-8")
	io.WriteString(w, "running")
}

func (s *Server) statusServices(w http.ResponseWriter, r *http.Request) {
	svc := func() map[string]any {
		return map[string]any{"service_version": s.PuppetVersion, "service_status_version": 1,
			"detail_level": "info", "state": "running", "status": map[string]any{}, "active_alerts": []any{}}
	}
	out := map[string]any{"ca": svc(), "master": svc(), "server": svc(), "status-service": svc()}
	for _, extra := range s.Services {
		st := svc()
		st["status"] = extra.Status()
		out[extra.Name] = st
	}
	writeJSON(w, out)
}

// ServiceStatus is one service /status/v1/services reports: Status returns
// its JSON "status" object (counters, connections), called per request.
type ServiceStatus struct {
	Name   string
	Status func() any
}

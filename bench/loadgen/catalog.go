package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/compilefarm/compilefarm/bench/internal/agentcert"
	"github.com/compilefarm/compilefarm/bench/internal/agentwire"
)

// catalogClient is one agent: its own keep-alive connection to the front
// door, presenting its node's certificate.
type catalogClient struct {
	n      *node
	env    string
	url    string
	http   *http.Client
	buf    []byte // request body, refilled per request
	resp   bytes.Buffer
	seq    uint64
	fresh  bool
	id     uint64 // makes transaction UUIDs differ across clients
	reused bool   // whether the last request reused a connection
}

func newCatalogClient(f *agentcert.Farm, n *node, env string, id int, timeout time.Duration) *catalogClient {
	tr := &http.Transport{
		TLSClientConfig:     f.TLSConfig(n.cert),
		MaxIdleConnsPerHost: 1,
		MaxConnsPerHost:     1,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true, // we ask for gzip ourselves and decode it ourselves
		TLSHandshakeTimeout: 10 * time.Second,
	}
	return &catalogClient{
		n: n, env: env, id: uint64(id) << 40,
		url:  "https://" + f.Target + "/puppet/v3/catalog/" + n.name + "?environment=" + url.QueryEscape(env),
		http: &http.Client{Timeout: timeout, Transport: tr},
	}
}

func (c *catalogClient) close() { c.http.CloseIdleConnections() }

// httpError is a non-200 answer.
type httpError struct {
	status     int
	msg        string
	retryAfter time.Duration
}

func (e *httpError) Error() string {
	return fmt.Sprintf("HTTP %d: %.120s", e.status, strings.TrimSpace(e.msg))
}

// do sends one catalog request and reads the whole answer into c.resp.
// It returns the answer's wire length and whether it was gzip.
func (c *catalogClient) do(ctx context.Context) (int, bool, error) {
	c.seq++
	c.buf = c.n.body.fill(c.buf, c.id|c.seq, c.fresh)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, bytes.NewReader(c.buf))
	if err != nil {
		return 0, false, err
	}
	h := req.Header
	h["Accept"] = []string{agentwire.AcceptCatalog}
	h["Accept-Encoding"] = []string{agentwire.AcceptEncoding}
	h["Content-Type"] = []string{"application/x-www-form-urlencoded"}
	h["User-Agent"] = []string{agentwire.UserAgent}
	h["X-Puppet-Version"] = []string{agentwire.Version}
	c.reused = true
	req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
		GotConn: func(info httptrace.GotConnInfo) { c.reused = info.Reused },
	}))
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, false, err
	}
	defer resp.Body.Close()
	c.resp.Reset()
	n, err := c.resp.ReadFrom(resp.Body)
	if err != nil {
		return int(n), false, fmt.Errorf("read catalog: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		e := &httpError{status: resp.StatusCode, msg: c.resp.String()}
		if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil {
			e.retryAfter = time.Duration(s) * time.Second
		}
		return int(n), false, e
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/vnd.puppet.rich+json") && !strings.HasPrefix(ct, "application/json") {
		return int(n), false, fmt.Errorf("catalog answered with Content-Type %q", ct)
	}
	return int(n), resp.Header.Get("Content-Encoding") == "gzip", nil
}

// catalogInfo is what verification learns from one catalog.
type catalogInfo struct {
	decoded   int64
	resources int
}

// verify decodes the answer in c.resp and checks it is this node's catalog.
func (c *catalogClient) verify(gz bool) (catalogInfo, error) {
	var r io.Reader = bytes.NewReader(c.resp.Bytes())
	if gz {
		zr, err := gzip.NewReader(r)
		if err != nil {
			return catalogInfo{}, fmt.Errorf("catalog is not gzip: %w", err)
		}
		r = zr
	}
	raw, err := io.ReadAll(r)
	if err != nil {
		return catalogInfo{}, fmt.Errorf("decompress catalog: %w", err)
	}
	var cat struct {
		Name      string            `json:"name"`
		Resources []json.RawMessage `json:"resources"`
	}
	if err := json.Unmarshal(raw, &cat); err != nil {
		return catalogInfo{}, fmt.Errorf("catalog is not JSON: %w", err)
	}
	if cat.Name != c.n.name {
		return catalogInfo{}, fmt.Errorf("catalog for %s names %q", c.n.name, cat.Name)
	}
	if len(cat.Resources) == 0 {
		return catalogInfo{}, fmt.Errorf("catalog for %s has no resources", c.n.name)
	}
	return catalogInfo{decoded: int64(len(raw)), resources: len(cat.Resources)}, nil
}

// warmUp gets every node its first catalog: the first request waits for
// the compile (or 503 + Retry-After, then retries), bounded by limit.
func warmUp(ctx context.Context, f *agentcert.Farm, nodes []*node, env string, limit time.Duration, progress func(string)) (catalogInfo, int64, error) {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	var (
		mu    sync.Mutex
		info  catalogInfo
		wire  int64
		done  int
		errs  []error
		wg    sync.WaitGroup
		sem   = make(chan struct{}, 64)
		start = time.Now()
	)
	for i, n := range nodes {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			c := newCatalogClient(f, n, env, i, 3*time.Minute)
			defer c.close()
			for attempt := 1; ; attempt++ {
				w, gz, err := c.do(ctx)
				if err == nil {
					ci, verr := c.verify(gz)
					mu.Lock()
					if verr != nil {
						errs = append(errs, fmt.Errorf("%s: %w", n.name, verr))
					} else {
						info, wire = ci, int64(w)
						done++
						if done%max(len(nodes)/10, 1) == 0 || done == len(nodes) {
							progress(fmt.Sprintf("warm-up: %d/%d nodes have their catalog (%.0fs)", done, len(nodes), time.Since(start).Seconds()))
						}
					}
					mu.Unlock()
					return
				}
				var he *httpError
				retryable := errors.As(err, &he) && he.status == http.StatusServiceUnavailable
				if !retryable || attempt >= 20 || ctx.Err() != nil {
					mu.Lock()
					errs = append(errs, fmt.Errorf("%s: first catalog (attempt %d): %w", n.name, attempt, err))
					mu.Unlock()
					return
				}
				wait := min(max(he.retryAfter, time.Second), 15*time.Second)
				select {
				case <-ctx.Done():
				case <-time.After(wait):
				}
			}
		}()
	}
	wg.Wait()
	return info, wire, errors.Join(errs...)
}

// runCatalogs measures C keep-alive clients for at most d or maxReq requests.
func runCatalogs(ctx context.Context, f *agentcert.Farm, nodes []*node, cfg runConfig, clients int, fresh bool) Result {
	res := Result{Phase: "catalog", Clients: clients, Nodes: min(len(nodes), clients), Facts: map[bool]string{false: "same", true: "fresh"}[fresh]}
	cs := make([]*catalogClient, clients)
	for i := range cs {
		cs[i] = newCatalogClient(f, nodes[i%len(nodes)], cfg.environment, i, 30*time.Second)
		cs[i].fresh = fresh
	}
	defer func() {
		for _, c := range cs {
			c.close()
		}
	}()
	// Open every client's connection (and check it works) before the clock starts.
	var wg sync.WaitGroup
	primeErr := make([]error, clients)
	for i, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, _, err := c.do(ctx); err != nil {
				primeErr[i] = err
			}
		}()
	}
	wg.Wait()
	var elog errorLog
	for _, err := range primeErr {
		if err != nil {
			elog.add("connect: " + err.Error())
			res.Errors++
		}
	}

	var (
		budget   atomic.Int64
		stopped  atomic.Value
		verified atomic.Int64
		decoded  atomic.Int64
		mu       sync.Mutex
		lat      []time.Duration
		wire     int64
	)
	budget.Store(cfg.maxRequests)
	stopped.Store("duration")
	runCtx, cancel := context.WithTimeout(ctx, cfg.duration+30*time.Second)
	defer cancel()
	start := time.Now()
	deadline := start.Add(cfg.duration)
	for _, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var (
				my      = make([]time.Duration, 0, 1024)
				myWire  int64
				myErr   int64
				myNew   int64
				myElog  errorLog
				lastErr time.Time
			)
			for n := 0; ; n++ {
				if time.Now().After(deadline) || runCtx.Err() != nil {
					break
				}
				if budget.Add(-1) < 0 {
					stopped.Store("max-requests")
					break
				}
				t0 := time.Now()
				w, gz, err := c.do(runCtx)
				d := time.Since(t0)
				if !c.reused {
					myNew++
				}
				if err == nil && (n == 0 || n%cfg.verifyEvery == 0) {
					var ci catalogInfo
					if ci, err = c.verify(gz); err == nil {
						verified.Add(1)
						decoded.Store(ci.decoded)
					}
				}
				if err != nil {
					myErr++
					myElog.add(err.Error())
					// Do not spin on a broken target; stay bounded by the deadline.
					if time.Since(lastErr) < time.Second {
						time.Sleep(10 * time.Millisecond)
					}
					lastErr = time.Now()
					continue
				}
				my = append(my, d)
				myWire += int64(w)
			}
			mu.Lock()
			lat = append(lat, my...)
			wire += myWire
			res.Errors += myErr
			res.NewConns += myNew
			elog.merge(&myElog)
			mu.Unlock()
		}()
	}
	wg.Wait()
	res.finish(time.Since(start), lat, stopped.Load().(string), &elog)
	if len(lat) > 0 {
		res.WireBytes = round(float64(wire)/float64(len(lat)), 0)
	}
	res.Verified = verified.Load()
	res.DecodedBytes = decoded.Load()
	return res
}

// tlsVersionName names a negotiated TLS version.
func tlsVersionName(v uint16) string {
	switch v {
	case tls.VersionTLS13:
		return "TLS 1.3"
	case tls.VersionTLS12:
		return "TLS 1.2"
	}
	return fmt.Sprintf("0x%04x", v)
}

package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"strings"
	"time"

	"github.com/compilefarm/compilefarm/bench/internal/agentwire"
)

// maxAnswer bounds an answer the simulator reads (a catalog of tens of
// thousands of resources stays well below it).
const maxAnswer = 256 << 20

// runConn is one agent run's HTTP client: a transport of its own, so the
// run opens a new TLS connection (full handshake, the agent's certificate)
// and keeps it alive for its requests, as the agent does within a run.
type runConn struct {
	base    string // https://target/puppet/v3
	tr      *http.Transport
	client  *http.Client
	rec     *runRecord
	live    *roundStats   // counts retries as they happen, for progress lines
	maxWait time.Duration // the agent's runinterval: the longest Retry-After sleep
}

func (s *sim) newRunConn(a *agent, rec *runRecord, live *roundStats) *runConn {
	tr := &http.Transport{
		TLSClientConfig:     s.farm.TLSConfig(a.cert),
		MaxConnsPerHost:     1,
		MaxIdleConnsPerHost: 1,
		IdleConnTimeout:     time.Minute,
		TLSHandshakeTimeout: 30 * time.Second,
		DisableCompression:  true, // the agent asks for gzip itself; the simulator decodes what it reads
	}
	return &runConn{base: "https://" + s.farm.Target + "/puppet/v3", tr: tr, rec: rec, live: live, maxWait: s.cfg.runinterval,
		client: &http.Client{Transport: tr, Timeout: s.cfg.requestTimeout}}
}

// close ends the run's connection.
func (c *runConn) close() { c.tr.CloseIdleConnections() }

// answer is a final 200 answer.
type answer struct {
	body []byte
	gzip bool
}

// do sends one of the agent's requests (path below /puppet/v3), retrying
// 429/503 answers as Puppet 7 does (retryAfter), and records its latency
// (first send to final answer) or its failure.
func (c *runConn) do(ctx context.Context, k kind, method, path, accept, contentType string, body []byte) (answer, error) {
	t0 := time.Now()
	for retries := 0; ; {
		status, h, b, err := c.once(ctx, method, path, accept, contentType, body)
		if k == kindCatalog {
			c.rec.catalogAttempts++
		}
		if err != nil {
			err = fmt.Errorf("%s %s: %w", k, method, err)
			c.rec.fail(k, err)
			return answer{}, err
		}
		wait, retry, err := retryAfter(status, h.Get("Retry-After"), retries, c.maxWait, time.Now())
		if err != nil {
			err = fmt.Errorf("%s: %s %s: %w", k, method, trimQuery(path), err)
			c.rec.fail(k, err)
			return answer{}, err
		}
		if retry {
			retries++
			if status == http.StatusServiceUnavailable {
				c.rec.retries503++
			} else {
				c.rec.retries429++
			}
			c.rec.retrySleep += wait
			if c.live != nil {
				c.live.retries.Add(1)
			}
			select {
			case <-ctx.Done():
				c.rec.fail(k, ctx.Err())
				return answer{}, ctx.Err()
			case <-time.After(wait):
			}
			continue
		}
		if status != http.StatusOK {
			err := fmt.Errorf("%s: %s %s: HTTP %d: %.200s", k, method, trimQuery(path), status, strings.TrimSpace(string(b)))
			c.rec.fail(k, err)
			return answer{}, err
		}
		c.rec.lat[k] = append(c.rec.lat[k], time.Since(t0))
		return answer{body: b, gzip: h.Get("Content-Encoding") == "gzip"}, nil
	}
}

// once sends the request once and reads the whole answer.
func (c *runConn) once(ctx context.Context, method, path, accept, contentType string, body []byte) (int, http.Header, []byte, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	trace := &httptrace.ClientTrace{GotConn: func(info httptrace.GotConnInfo) {
		if !info.Reused {
			c.rec.conns.Add(1)
		}
	}}
	req, err := http.NewRequestWithContext(httptrace.WithClientTrace(ctx, trace), method, c.base+path, rd)
	if err != nil {
		return 0, nil, nil, err
	}
	h := req.Header
	h["X-Puppet-Version"] = []string{agentwire.Version}
	h["User-Agent"] = []string{agentwire.UserAgent}
	h["Accept"] = []string{accept}
	h["Accept-Encoding"] = []string{agentwire.AcceptEncoding}
	if contentType != "" {
		h["Content-Type"] = []string{contentType}
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return 0, nil, nil, fmt.Errorf("%s: %w", trimQuery(path), err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if err != nil {
		return 0, nil, nil, fmt.Errorf("%s: read the answer: %w", trimQuery(path), err)
	}
	return resp.StatusCode, resp.Header, b, nil
}

// trimQuery is a request path without its query, for errors.
func trimQuery(path string) string {
	p, _, _ := strings.Cut(path, "?")
	return p
}

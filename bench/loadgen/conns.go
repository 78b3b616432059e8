package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/compilefarm/compilefarm/bench/internal/agentcert"
	"github.com/compilefarm/compilefarm/bench/internal/agentwire"
	"github.com/compilefarm/compilefarm/bench/internal/latency"
)

// statusRequest is what an agent-like client sends on a fresh connection
// for the health check, closing the connection after the answer.
func statusRequest(target string) []byte {
	return []byte("GET /status/v1/simple HTTP/1.1\r\n" +
		"Host: " + target + "\r\n" +
		"User-Agent: " + agentwire.UserAgent + "\r\n" +
		"X-Puppet-Version: " + agentwire.Version + "\r\n" +
		"Accept: */*\r\n" +
		"Accept-Encoding: " + agentwire.AcceptEncoding + "\r\n" +
		"Connection: close\r\n\r\n")
}

// oneConnection opens a new TCP+TLS connection with the node's certificate
// (no session resumption: the config has no session cache), asks for
// /status/v1/simple and closes. It returns the handshake time and the TLS version.
func oneConnection(ctx context.Context, cfg *tls.Config, target string, req []byte) (time.Duration, string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	t0 := time.Now()
	d := tls.Dialer{NetDialer: &net.Dialer{}, Config: cfg}
	c, err := d.DialContext(ctx, "tcp", target)
	if err != nil {
		return 0, "", fmt.Errorf("connect: %w", err)
	}
	defer c.Close()
	hs := time.Since(t0)
	tc := c.(*tls.Conn)
	state := tc.ConnectionState()
	if !state.HandshakeComplete || len(state.PeerCertificates) == 0 {
		return hs, "", fmt.Errorf("TLS handshake incomplete")
	}
	if state.DidResume {
		return hs, "", fmt.Errorf("TLS session was resumed; every connection must be new")
	}
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	}
	if _, err := c.Write(req); err != nil {
		return hs, "", fmt.Errorf("write request: %w", err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return hs, "", fmt.Errorf("read response: %w", err)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	resp.Body.Close()
	if err != nil {
		return hs, "", fmt.Errorf("read body: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return hs, "", fmt.Errorf("HTTP %d: %.80s", resp.StatusCode, body)
	}
	if resp.Header.Get("Content-Encoding") == "" && strings.TrimSpace(string(body)) != "running" {
		return hs, "", fmt.Errorf("status is %q, want running", body)
	}
	return hs, tlsVersionName(state.Version) + " " + state.CurveID.String(), nil
}

// runConnections measures C clients that each open a new mTLS connection
// per request, for at most d or maxReq connections.
func runConnections(ctx context.Context, f *agentcert.Farm, nodes []*node, cfg runConfig, clients int) Result {
	res := Result{Phase: "connections", Clients: clients, Nodes: min(len(nodes), clients)}
	req := statusRequest(f.Target)
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		lat, hs  []time.Duration
		budget   atomic.Int64
		stopped  atomic.Value
		version  atomic.Value
		elog     errorLog
		runCtx   context.Context
		cancel   context.CancelFunc
		start    = time.Now()
		deadline = start.Add(cfg.duration)
	)
	runCtx, cancel = context.WithTimeout(ctx, cfg.duration+30*time.Second)
	defer cancel()
	budget.Store(cfg.maxRequests)
	stopped.Store("duration")
	for i := range clients {
		conf := f.TLSConfig(nodes[i%len(nodes)].cert)
		wg.Add(1)
		go func() {
			defer wg.Done()
			var (
				myLat, myHS []time.Duration
				myErr       int64
				myElog      errorLog
			)
			for {
				if time.Now().After(deadline) || runCtx.Err() != nil {
					break
				}
				if budget.Add(-1) < 0 {
					stopped.Store("max-requests")
					break
				}
				t0 := time.Now()
				h, v, err := oneConnection(runCtx, conf, f.Target, req)
				d := time.Since(t0)
				if err != nil {
					myErr++
					myElog.add(err.Error())
					time.Sleep(10 * time.Millisecond)
					continue
				}
				version.Store(v)
				myLat = append(myLat, d)
				myHS = append(myHS, h)
			}
			mu.Lock()
			lat = append(lat, myLat...)
			hs = append(hs, myHS...)
			res.Errors += myErr
			elog.merge(&myElog)
			mu.Unlock()
		}()
	}
	wg.Wait()
	res.finish(time.Since(start), lat, stopped.Load().(string), &elog)
	res.NewConns = res.Requests
	p := latency.Summarize(hs)
	res.Handshake = &p
	if v, ok := version.Load().(string); ok {
		res.TLSVersion = v
	}
	return res
}

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/compilefarm/compilefarm/bench/internal/agentcert"
	"github.com/compilefarm/compilefarm/bench/internal/brokermetrics"
)

// uploader uploads nodes' facts as their agents do (PUT
// /puppet/v3/facts/NAME over each node's own keep-alive mTLS connection)
// and counts the compiles a stream of uploads causes, from the broker's
// /metrics once its compile queue has drained. The fact-upload phases
// (churn, corpus) share it.
type uploader struct {
	target, env, metricsURL string
	nodes                   []*node
	clients                 []*http.Client
	label                   string // phase name, for progress lines
	progress                func(string)
}

func newUploader(f *agentcert.Farm, nodes []*node, env, metricsURL, label string, progress func(string)) *uploader {
	up := &uploader{target: f.Target, env: env, metricsURL: metricsURL, nodes: nodes, label: label, progress: progress,
		clients: make([]*http.Client, len(nodes))}
	for i, n := range nodes {
		up.clients[i] = &http.Client{Timeout: time.Minute, Transport: &http.Transport{TLSClientConfig: f.TLSConfig(n.cert)}}
	}
	return up
}

// put uploads values as node i's facts.
func (up *uploader) put(ctx context.Context, i int, values map[string]any) error {
	name := up.nodes[i].name
	body, err := json.Marshal(map[string]any{"name": name, "values": values,
		"timestamp": time.Now().UTC().Format(time.RFC3339Nano)})
	if err != nil {
		return fmt.Errorf("encode facts of %s: %w", name, err)
	}
	u := "https://" + up.target + "/puppet/v3/facts/" + url.PathEscape(name) + "?environment=" + url.QueryEscape(up.env)
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, u, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := up.clients[i].Do(req)
	if err != nil {
		return fmt.Errorf("upload facts of %s: %w", name, err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("upload facts of %s: %s: %s", name, resp.Status, b)
	}
	return nil
}

// uploadStats is what one stream of uploads caused.
type uploadStats struct {
	compiles brokermetrics.CompileCounts
	seconds  float64 // from the first upload to the drained queue
}

// measure sends n uploads, upload u being next(u) (node index, facts), one
// at a time, then waits for the compile queue to drain and returns the
// compiles counted in between. It reports progress every 250 uploads.
func (up *uploader) measure(ctx context.Context, n int, next func(u int) (int, map[string]any, error)) (uploadStats, error) {
	var st uploadStats
	if err := brokermetrics.WaitDrained(ctx, up.metricsURL); err != nil {
		return st, err
	}
	before, err := brokermetrics.Scrape(ctx, up.metricsURL)
	if err != nil {
		return st, err
	}
	start := time.Now()
	for u := 0; u < n; u++ {
		if ctx.Err() != nil {
			return st, ctx.Err()
		}
		i, values, err := next(u)
		if err != nil {
			return st, err
		}
		if err := up.put(ctx, i, values); err != nil {
			return st, err
		}
		if (u+1)%250 == 0 {
			up.progress(fmt.Sprintf("%s: %d/%d uploads", up.label, u+1, n))
		}
	}
	if err := brokermetrics.WaitDrained(ctx, up.metricsURL); err != nil {
		return st, err
	}
	st.seconds = round(time.Since(start).Seconds(), 2)
	after, err := brokermetrics.Scrape(ctx, up.metricsURL)
	if err != nil {
		return st, err
	}
	st.compiles = brokermetrics.CompilesBetween(before, after)
	return st, nil
}

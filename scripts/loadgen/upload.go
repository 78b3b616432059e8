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

func newUploader(f *farmTLS, nodes []*node, env, metricsURL, label string, progress func(string)) *uploader {
	up := &uploader{target: f.target, env: env, metricsURL: metricsURL, nodes: nodes, label: label, progress: progress,
		clients: make([]*http.Client, len(nodes))}
	for i, n := range nodes {
		up.clients[i] = &http.Client{Timeout: time.Minute, Transport: &http.Transport{TLSClientConfig: f.tlsConfig(n)}}
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
	compiles compileCounts
	seconds  float64 // from the first upload to the drained queue
}

// measure sends n uploads, upload u being next(u) (node index, facts), one
// at a time, then waits for the compile queue to drain and returns the
// compiles counted in between. It reports progress every 250 uploads.
func (up *uploader) measure(ctx context.Context, n int, next func(u int) (int, map[string]any, error)) (uploadStats, error) {
	var st uploadStats
	if err := waitDrained(ctx, up.metricsURL); err != nil {
		return st, err
	}
	before, err := scrape(ctx, up.metricsURL)
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
	if err := waitDrained(ctx, up.metricsURL); err != nil {
		return st, err
	}
	st.seconds = round(time.Since(start).Seconds(), 2)
	after, err := scrape(ctx, up.metricsURL)
	if err != nil {
		return st, err
	}
	st.compiles = compilesBetween(before, after)
	return st, nil
}

// compileCounts are the broker's compile outcomes
// (compilefarm_compiles_total by result) between two scrapes.
type compileCounts struct {
	OK        float64 `json:"ok"`
	Unchanged float64 `json:"unchanged"` // compiled again to the same catalog
	Failed    float64 `json:"failed"`
	Transient float64 `json:"transient,omitempty"` // failed, retried
	Stale     float64 `json:"stale,omitempty"`     // discarded: a newer compile won
}

// total is the compiles that answered a request: ok, unchanged and failed.
func (c compileCounts) total() float64 { return c.OK + c.Unchanged + c.Failed }

func compilesBetween(before, after map[string]float64) compileCounts {
	d := func(r string) float64 {
		k := `compilefarm_compiles_total{result="` + r + `"}`
		return after[k] - before[k]
	}
	return compileCounts{OK: d("ok"), Unchanged: d("unchanged"), Failed: d("failed"), Transient: d("transient"), Stale: d("stale")}
}

// waitDrained waits until the broker's compile queue is empty, at most 10
// minutes.
func waitDrained(ctx context.Context, metricsURL string) error {
	deadline := time.Now().Add(10 * time.Minute)
	for {
		m, err := scrape(ctx, metricsURL)
		if err != nil {
			return err
		}
		busy := 0.0
		for _, lane := range []string{"urgent", "bulk"} {
			busy += m[`compilefarm_queue_depth{lane="`+lane+`"}`] + m[`compilefarm_queue_in_flight{lane="`+lane+`"}`]
		}
		if busy == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the compile queue did not drain in 10 minutes (%v jobs left)", busy)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"time"
)

// ChurnResult is what the churn phase measured: how many compiles a stream
// of fact uploads caused, when volatile (and other unread) facts change on
// every upload and a fact the manifests read changes on a few.
type ChurnResult struct {
	Uploads      int     `json:"uploads"`
	UsedChanges  int     `json:"used_fact_changes"` // uploads that changed networking.fqdn
	Compiles     float64 `json:"compiles"`          // compiles the uploads caused (ok + unchanged + failed)
	PerThousand  float64 `json:"compiles_per_1000_uploads"`
	UsedFraction float64 `json:"used_change_fraction"`
	Seconds      float64 `json:"seconds"`
}

// churnFacts is one node's facts, decoded once, changed per upload.
type churnFacts struct {
	node   *node
	values map[string]any
	fqdnN  int
}

// runChurn uploads the nodes' facts (PUT /puppet/v3/facts) round robin,
// uploads times: every upload changes volatile facts (uptime, free memory,
// load) and a fact no manifest reads; with probability usedFraction it also
// changes networking.fqdn, which the benchmark manifests read. Then it waits
// for the queue to drain and counts compiles from the broker's metrics.
func runChurn(ctx context.Context, f *farmTLS, nodes []*node, recorded []byte, env, metricsURL string,
	uploads int, usedFraction float64, progress func(string)) (ChurnResult, error) {
	res := ChurnResult{Uploads: uploads, UsedFraction: usedFraction}
	doc, err := decodeFacts(recorded)
	if err != nil {
		return res, err
	}
	fleet := make([]*churnFacts, len(nodes))
	for i, n := range nodes {
		renamed, err := renameFacts(doc, n.name)
		if err != nil {
			return res, err
		}
		var d struct {
			Values map[string]any `json:"values"`
		}
		dec := json.NewDecoder(bytes.NewReader([]byte(renamed)))
		dec.UseNumber()
		if err := dec.Decode(&d); err != nil {
			return res, fmt.Errorf("facts for %s: %w", n.name, err)
		}
		fleet[i] = &churnFacts{node: n, values: d.Values}
	}
	clients := make([]*http.Client, len(nodes))
	for i, n := range nodes {
		clients[i] = &http.Client{Timeout: time.Minute, Transport: &http.Transport{TLSClientConfig: f.tlsConfig(n)}}
	}
	put := func(i int) error {
		c := fleet[i]
		body, _ := json.Marshal(map[string]any{"name": c.node.name, "values": c.values,
			"timestamp": time.Now().UTC().Format(time.RFC3339Nano)})
		u := "https://" + f.target + "/puppet/v3/facts/" + url.PathEscape(c.node.name) + "?environment=" + url.QueryEscape(env)
		req, _ := http.NewRequestWithContext(ctx, http.MethodPut, u, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := clients[i].Do(req)
		if err != nil {
			return fmt.Errorf("upload facts of %s: %w", c.node.name, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("upload facts of %s: %s: %s", c.node.name, resp.Status, b)
		}
		return nil
	}
	// Baseline: every node's facts once, and their compiles out of the way.
	progress(fmt.Sprintf("churn: baseline upload for %d nodes", len(nodes)))
	for i := range fleet {
		if err := put(i); err != nil {
			return res, err
		}
	}
	if err := waitDrained(ctx, metricsURL); err != nil {
		return res, err
	}
	before, err := scrape(ctx, metricsURL)
	if err != nil {
		return res, err
	}
	rng := rand.New(rand.NewPCG(1, 2)) // deterministic: the same churn every run
	start := time.Now()
	for u := 0; u < uploads; u++ {
		if ctx.Err() != nil {
			return res, ctx.Err()
		}
		i := u % len(fleet)
		c := fleet[i]
		c.values["uptime_seconds"] = json.Number(fmt.Sprint(100000 + u))
		c.values["memoryfree_mb"] = json.Number(fmt.Sprintf("%d.%02d", 1000+rng.IntN(1000), rng.IntN(100)))
		c.values["load_averages"] = map[string]any{"1m": json.Number(fmt.Sprintf("0.%02d", rng.IntN(100)))}
		c.values["compilefarm_unread"] = fmt.Sprint("churn-", u) // a non-volatile fact no manifest reads
		if rng.Float64() < usedFraction {
			c.fqdnN++
			if nw, ok := c.values["networking"].(map[string]any); ok {
				nw["fqdn"] = fmt.Sprintf("%s-v%d", c.node.name, c.fqdnN)
			}
			res.UsedChanges++
		}
		if err := put(i); err != nil {
			return res, err
		}
		if (u+1)%250 == 0 {
			progress(fmt.Sprintf("churn: %d/%d uploads", u+1, uploads))
		}
	}
	if err := waitDrained(ctx, metricsURL); err != nil {
		return res, err
	}
	res.Seconds = round(time.Since(start).Seconds(), 2)
	after, err := scrape(ctx, metricsURL)
	if err != nil {
		return res, err
	}
	for _, r := range []string{"ok", "unchanged", "failed"} {
		k := `compilefarm_compiles_total{result="` + r + `"}`
		res.Compiles += after[k] - before[k]
	}
	res.PerThousand = round(res.Compiles*1000/float64(uploads), 2)
	return res, nil
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

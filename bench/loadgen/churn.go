package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"

	"github.com/compilefarm/compilefarm/bench/internal/agentcert"
	"github.com/compilefarm/compilefarm/bench/internal/agentwire"
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
func runChurn(ctx context.Context, f *agentcert.Farm, nodes []*node, recorded []byte, env, metricsURL string,
	uploads int, usedFraction float64, progress func(string)) (ChurnResult, error) {
	res := ChurnResult{Uploads: uploads, UsedFraction: usedFraction}
	doc, err := agentwire.DecodeFacts(recorded)
	if err != nil {
		return res, err
	}
	fleet := make([]*churnFacts, len(nodes))
	for i, n := range nodes {
		renamed, err := agentwire.RenameFacts(doc, n.name)
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
	up := newUploader(f, nodes, env, metricsURL, "churn", progress)
	// Baseline: every node's facts once, and their compiles out of the way.
	progress(fmt.Sprintf("churn: baseline upload for %d nodes", len(nodes)))
	if _, err := up.measure(ctx, len(fleet), func(u int) (int, map[string]any, error) { return u, fleet[u].values, nil }); err != nil {
		return res, err
	}
	rng := rand.New(rand.NewPCG(1, 2)) // deterministic: the same churn every run
	m, err := up.measure(ctx, uploads, func(u int) (int, map[string]any, error) {
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
		return i, c.values, nil
	})
	if err != nil {
		return res, err
	}
	res.Seconds = m.seconds
	res.Compiles = m.compiles.Total()
	res.PerThousand = round(res.Compiles*1000/float64(uploads), 2)
	return res, nil
}

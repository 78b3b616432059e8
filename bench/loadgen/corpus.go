package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"sort"
	"strings"

	"github.com/compilefarm/compilefarm/bench/internal/agentcert"
	"github.com/compilefarm/compilefarm/bench/internal/brokermetrics"
	"github.com/compilefarm/compilefarm/internal/corpus"
	"github.com/compilefarm/compilefarm/pkg/facts"
)

// CorpusResult is what the corpus phase measured: how many compiles a
// fleet on the corpus of real modules costs per 1,000 check-ins when, as
// on real agents, volatile facts change on every check-in and a fact a
// catalog reads changes on a few. The target is one compile per used-fact
// change: Extra is what the farm compiled beyond it.
type CorpusResult struct {
	CorpusNodes int `json:"corpus_nodes"` // nodes of the corpus the fleet's facts and roles come from
	Roles       int `json:"roles"`
	// VolatilePerCheckIn is the mean number of fact values (leaves) a
	// check-in changes besides the used fact: corpus.Churn's.
	VolatilePerCheckIn float64 `json:"volatile_facts_per_check_in"`

	// The baseline: every node's first facts, and the compiles they caused
	// (the first compiles, and collectors compiled again for new exports).
	BaselineCompiles brokermetrics.CompileCounts `json:"baseline_compiles"`
	BaselineSeconds  float64                     `json:"baseline_seconds"`
	// BaselineFailed lists the nodes whose first compile failed, with the
	// first line of its error.
	BaselineFailed []string `json:"baseline_failed,omitempty"`

	Uploads      int                         `json:"uploads"`
	UsedFraction float64                     `json:"used_change_fraction"`
	UsedChanges  int                         `json:"used_fact_changes"`
	Counts       brokermetrics.CompileCounts `json:"compile_results"`
	Compiles     float64                     `json:"compiles"` // ok + unchanged + failed
	Failed       float64                     `json:"failed_compiles"`
	Extra        float64                     `json:"extra_compiles"` // compiles - used-fact changes
	PerThousand  float64                     `json:"compiles_per_1000_uploads"`
	Target       float64                     `json:"target_per_1000_uploads"` // used-fact changes per 1,000 uploads
	Seconds      float64                     `json:"seconds"`

	// Unexpected lists the nodes whose compiles queued during the
	// check-ins differ from their used-fact changes, or whose compile
	// failed (baseline included), with the farm's reason for the last one.
	Unexpected []NodeCompiles `json:"unexpected,omitempty"`
}

// NodeCompiles is one node the corpus phase did not expect to compile as
// it did.
type NodeCompiles struct {
	Node        string `json:"node"`
	Role        string `json:"role"`
	UsedChanges int    `json:"used_fact_changes"`
	Queued      uint64 `json:"compiles_queued"`       // during the check-ins (request_seq)
	LastRequest string `json:"last_request"`          // its reason and the changed facts
	LastResult  string `json:"last_result,omitempty"` // ok, unchanged, failed
	Error       string `json:"error,omitempty"`
}

func (n NodeCompiles) String() string {
	s := fmt.Sprintf("%s (role %s): %d compiles queued for %d used-fact changes; last: %s", n.Node, n.Role, n.Queued, n.UsedChanges, n.LastRequest)
	if n.LastResult != "" {
		s += ", " + n.LastResult
	}
	if n.Error != "" {
		s += ": " + n.Error
	}
	return s
}

// corpusName is synthetic node i's certname: it names the corpus node
// whose facts and role it takes.
func corpusName(prefix string, i int, c corpus.Node, domain string) string {
	short, _, _ := strings.Cut(c.Certname, ".")
	return fmt.Sprintf("%s-%04d-%s.%s", prefix, i, short, domain)
}

// corpusNode is one synthetic node of the corpus phase: a corpus node's
// facts under the synthetic node's certname, and its used fact.
type corpusNode struct {
	name, role string
	base       map[string]any // the corpus node's facts, renamed
	changed    map[string]any // base with the used fact at its new value
	usedPath   []string
}

// newCorpusNode gives certname the facts and role of c.
func newCorpusNode(certname string, c corpus.Node) (*corpusNode, error) {
	path, value := corpus.UsedChange(c)
	if path == nil {
		return nil, fmt.Errorf("corpus node %s: corpus.UsedChange knows no used fact for role %q", c.Certname, c.Role)
	}
	old, ok := facts.Lookup(c.Facts, path)
	if !ok {
		return nil, fmt.Errorf("corpus node %s lacks its used fact %s", c.Certname, strings.Join(path, "."))
	}
	if reflect.DeepEqual(old, value) {
		return nil, fmt.Errorf("corpus node %s: the used change of %s keeps its value %v", c.Certname, strings.Join(path, "."), old)
	}
	base := renameCorpusFacts(c.Facts, certname)
	return &corpusNode{name: certname, role: c.Role, base: base, changed: corpus.With(base, path, value), usedPath: path}, nil
}

// renameCorpusFacts returns values as certname's agent would report them:
// clientcert, fqdn, hostname, domain and their networking.* twins follow
// certname; nothing else changes.
func renameCorpusFacts(values map[string]any, certname string) map[string]any {
	host, domain, _ := strings.Cut(certname, ".")
	out := values
	for path, v := range map[string]string{
		"clientcert": certname, "fqdn": certname, "hostname": host, "domain": domain,
		"networking.fqdn": certname, "networking.hostname": host, "networking.domain": domain,
	} {
		out = corpus.With(out, strings.Split(path, "."), v)
	}
	return out
}

// facts are the node's facts at check-in ci.
func (n *corpusNode) facts(ci checkIn) map[string]any {
	v := n.base
	if ci.Changed {
		v = n.changed
	}
	return corpus.Churn(v, ci.Run)
}

// checkIn is one fact upload of the corpus phase.
type checkIn struct {
	Node int  // index of the node that checks in
	Run  int  // its corpus.Churn run: how many check-ins it made before
	Used bool // this check-in changes the node's used fact
	// Changed: the used fact has its new value (else the original) in this
	// check-in. Each used change flips it, so every one changes the fact.
	Changed bool
}

// planCheckIns plans uploads check-ins of nodes nodes, round robin; each
// changes the node's used fact with probability usedFraction (a
// deterministic sequence: the same plan every run).
func planCheckIns(nodes, uploads int, usedFraction float64) []checkIn {
	rng := rand.New(rand.NewPCG(1, 2))
	runs := make([]int, nodes)
	changed := make([]bool, nodes)
	plan := make([]checkIn, uploads)
	for u := range plan {
		i := u % nodes
		ci := checkIn{Node: i, Run: runs[i]}
		runs[i]++
		if rng.Float64() < usedFraction {
			changed[i] = !changed[i]
			ci.Used = true
		}
		ci.Changed = changed[i]
		plan[u] = ci
	}
	return plan
}

// runCorpus is the corpus phase: node i takes corpus node i%len(cnodes)'s
// facts and role; every node uploads its facts once (the baseline, whose
// compiles it counts and times), then the fleet checks in uploads times
// round robin as planCheckIns says, each check-in with the node's next
// corpus.Churn run; a node whose last check-in changed its used fact
// checks in again only once the compile queue has drained, as a real
// agent half an hour later would. It counts the compiles from the broker's metrics once
// the queue has drained, and lists the nodes that compiled other than for
// their used-fact changes, from the operator API (next to /metrics).
func runCorpus(ctx context.Context, f *agentcert.Farm, nodes []*node, cnodes []corpus.Node, env, metricsURL, adminURL string,
	uploads int, usedFraction float64, progress func(string)) (CorpusResult, error) {
	res := CorpusResult{CorpusNodes: len(cnodes), Uploads: uploads, UsedFraction: usedFraction}
	fleet := make([]*corpusNode, len(nodes))
	roles := map[string]bool{}
	for i, n := range nodes {
		c := cnodes[i%len(cnodes)]
		cn, err := newCorpusNode(n.name, c)
		if err != nil {
			return res, err
		}
		fleet[i] = cn
		roles[c.Role] = true
	}
	res.Roles = len(roles)
	plan := planCheckIns(len(nodes), uploads, usedFraction)
	res.VolatilePerCheckIn = volatilePerCheckIn(fleet)

	up := newUploader(f, nodes, env, metricsURL, "corpus", progress)
	progress(fmt.Sprintf("corpus: baseline: %d nodes (%d roles) upload their facts and get their first compiles", len(nodes), res.Roles))
	base, err := up.measure(ctx, len(fleet), func(u int) (int, map[string]any, error) { return u, fleet[u].base, nil })
	if err != nil {
		return res, err
	}
	res.BaselineCompiles, res.BaselineSeconds = base.compiles, base.seconds
	progress(fmt.Sprintf("corpus: baseline: %.0f compiles (%.0f failed) in %.1fs", base.compiles.Total(), base.compiles.Failed, base.seconds))
	before, err := adminNodes(ctx, adminURL)
	if err != nil {
		return res, fmt.Errorf("read the nodes from the operator API: %w", err)
	}
	for _, n := range fleet {
		if c := before[n.name].Compile; c != nil && c.Result == "failed" {
			msg, _, _ := strings.Cut(c.Error, "\n")
			res.BaselineFailed = append(res.BaselineFailed, fmt.Sprintf("%s (role %s): %s", n.name, n.role, msg))
		}
	}
	used := make([]int, len(fleet))
	for _, ci := range plan {
		if ci.Used {
			used[ci.Node]++
			res.UsedChanges++
		}
	}
	progress(fmt.Sprintf("corpus: %d check-ins, %d of them changing a used fact", uploads, res.UsedChanges))
	pending := make([]bool, len(fleet)) // the node's last check-in changed its used fact
	m, err := up.measure(ctx, uploads, func(u int) (int, map[string]any, error) {
		ci := plan[u]
		if pending[ci.Node] {
			// A real agent checks in again half an hour later, long after
			// the compile its last check-in queued. Without this wait two
			// used-fact changes of one node, a second apart here, would be
			// answered by one compile (the farm compiles a node's latest
			// facts), and the count would fall short of the target.
			if err := brokermetrics.WaitDrained(ctx, metricsURL); err != nil {
				return 0, nil, err
			}
		}
		pending[ci.Node] = ci.Used
		return ci.Node, fleet[ci.Node].facts(ci), nil
	})
	if err != nil {
		return res, err
	}
	res.Seconds, res.Counts = m.seconds, m.compiles
	res.Compiles, res.Failed = m.compiles.Total(), m.compiles.Failed
	res.Extra = res.Compiles - float64(res.UsedChanges)
	res.PerThousand = round(res.Compiles*1000/float64(uploads), 2)
	res.Target = round(float64(res.UsedChanges)*1000/float64(uploads), 2)
	after, err := adminNodes(ctx, adminURL)
	if err != nil {
		return res, fmt.Errorf("read the nodes from the operator API: %w", err)
	}
	res.Unexpected = unexpectedCompiles(fleet, used, before, after)
	return res, nil
}

// failure is the error that failed compiles are: they mean the corpus or
// the farm is broken, and the numbers measure nothing.
func (r *CorpusResult) failure() error {
	n := r.BaselineCompiles.Failed + r.Failed
	if n == 0 {
		return nil
	}
	var nodes []string
	nodes = append(nodes, r.BaselineFailed...)
	for _, u := range r.Unexpected {
		if u.LastResult == "failed" {
			nodes = append(nodes, u.String())
		}
	}
	return fmt.Errorf("corpus: %.0f compiles FAILED (%.0f in the baseline, %.0f during the check-ins): the corpus or the farm is broken "+
		"(broker explain NODE --admin URL says why); failed nodes: %s", n, r.BaselineCompiles.Failed, r.Failed, strings.Join(nodes, "; "))
}

// unexpectedCompiles compares, per node, the compiles the farm queued
// between the two operator API snapshots with the node's used-fact
// changes, and lists the nodes that differ or whose last compile failed.
func unexpectedCompiles(fleet []*corpusNode, used []int, before, after map[string]adminNode) []NodeCompiles {
	var out []NodeCompiles
	for i, n := range fleet {
		a := after[n.name]
		queued := a.RequestSeq - before[n.name].RequestSeq
		failed := a.Compile != nil && a.Compile.Result == "failed"
		if queued == uint64(used[i]) && !failed {
			continue
		}
		nc := NodeCompiles{Node: n.name, Role: n.role, UsedChanges: used[i], Queued: queued, LastRequest: a.Requested.describe()}
		if a.Compile != nil {
			nc.LastResult = a.Compile.Result
			nc.Error, _, _ = strings.Cut(a.Compile.Error, "\n")
		}
		out = append(out, nc)
	}
	return out
}

// volatilePerCheckIn is the mean number of fact values a node's check-in
// changes from its previous one, the used fact apart: what corpus.Churn
// changes between two runs, over the fleet's first two runs.
func volatilePerCheckIn(fleet []*corpusNode) float64 {
	if len(fleet) == 0 {
		return 0
	}
	total := 0
	for _, n := range fleet {
		total += len(changedLeaves(n.facts(checkIn{Run: 0}), n.facts(checkIn{Run: 1})))
	}
	return round(float64(total)/float64(len(fleet)), 1)
}

// changedLeaves lists the paths of the values (leaves; an array is one)
// that differ between two fact sets, present in only one included.
func changedLeaves(a, b map[string]any) [][]string {
	la, lb := map[string]string{}, map[string]string{}
	leaves(a, nil, la)
	leaves(b, nil, lb)
	var out [][]string
	for k, v := range la {
		if w, ok := lb[k]; !ok || w != v {
			out = append(out, strings.Split(k, "\x00"))
		}
	}
	for k := range lb {
		if _, ok := la[k]; !ok {
			out = append(out, strings.Split(k, "\x00"))
		}
	}
	sort.Slice(out, func(i, j int) bool { return strings.Join(out[i], ".") < strings.Join(out[j], ".") })
	return out
}

func leaves(v any, path []string, out map[string]string) {
	if m, ok := v.(map[string]any); ok && len(m) > 0 {
		for k, x := range m {
			leaves(x, append(path[:len(path):len(path)], k), out)
		}
		return
	}
	b, _ := json.Marshal(v)
	out[strings.Join(path, "\x00")] = string(b)
}

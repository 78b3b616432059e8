package intake

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/compilefarm/compilefarm/pkg/facts"
	"github.com/compilefarm/compilefarm/pkg/farm"
)

// Explanation says why the farm last queued a compile for a node and what
// the node's catalog depends on (broker explain).
type Explanation struct {
	Node        string `json:"node"`
	Environment string `json:"environment"`
	// CodeID is the code of the catalog the node is served ("" before its
	// first catalog).
	CodeID string `json:"code_id,omitempty"`
	// Request is the latest compile queued for the node's served slot,
	// with its reason and what changed (Changes, Cause); nil when none was.
	Request *farm.CompileRequest `json:"request,omitempty"`
	// State is what became of Request: one of the Request* states.
	State string `json:"state,omitempty"`
	// Error is the compile's error when State is RequestFailed.
	Error string `json:"error,omitempty"`
	// Reads summarises the fact-read record of the served catalog; nil
	// when the catalog has none (any change outside the volatile facts
	// recompiles it).
	Reads *ReadSummary `json:"reads,omitempty"`
}

// States of a compile request (Explanation.State).
const (
	RequestPending   = "pending"   // neither compiled nor failed yet
	RequestCompiled  = "compiled"  // a new catalog answers it
	RequestUnchanged = "unchanged" // compiled to the catalog the node had
	RequestFailed    = "failed"    // the compile failed
)

// ReadSummary is what a catalog's fact-read record depends on.
type ReadSummary struct {
	Digest farm.Digest `json:"digest"` // the record in SpaceCatalogs
	Reads  int         `json:"reads"`  // fact reads recorded
	// Facts counts the reads per top-level fact, most read first ("" is
	// a read of the whole facts hash).
	Facts []FactReadCount `json:"facts,omitempty"`
	// AlwaysRecompile: the catalog depends on more than facts and code,
	// and every fact upload recompiles it, for the reason Why.
	AlwaysRecompile bool   `json:"always_recompile,omitempty"`
	Why             string `json:"why,omitempty"`
	// Clock: the catalog read the current time (ClockWhy) and is compiled
	// again once it is older than the farm's clock max age.
	Clock    bool   `json:"clock,omitempty"`
	ClockWhy string `json:"clock_why,omitempty"`
	// Queries are the PuppetDB queries the compile made (farm.QueryText:
	// PQL, or an AST's JSON); a change of their results recompiles the
	// catalog.
	Queries []string `json:"queries,omitempty"`
}

// FactReadCount is how many of a record's reads are under one top-level fact.
type FactReadCount struct {
	Fact  string `json:"fact"`
	Reads int    `json:"reads"`
}

// Explain says why the node's latest compile was queued, what became of
// it, and what the node's catalog reads of its facts. An unknown node is
// an error wrapping farm.ErrNotFound.
func (in *Intake) Explain(ctx context.Context, certname string) (Explanation, error) {
	if err := farm.ValidateCertname(certname); err != nil {
		return Explanation{}, err
	}
	n, err := in.Nodes.GetNode(ctx, certname)
	if errors.Is(err, farm.ErrNotFound) {
		return Explanation{}, fmt.Errorf("node %s is not known to the farm (it has not checked in; see broker nodes): %w", certname, farm.ErrNotFound)
	}
	if err != nil {
		return Explanation{}, fmt.Errorf("read node %s: %w", certname, err)
	}
	ex := Explanation{Node: n.Certname, Environment: n.Environment, Request: n.Requested}
	ex.State, ex.Error = requestState(&n)
	if n.Catalog == nil {
		return ex, nil
	}
	ex.CodeID = n.Catalog.CodeID
	if n.Catalog.ReadsDigest == "" {
		return ex, nil
	}
	b, err := in.Content.Get(ctx, farm.SpaceCatalogs, n.Catalog.ReadsDigest)
	if err != nil {
		return Explanation{}, fmt.Errorf("read fact record %s of %s: %w", n.Catalog.ReadsDigest, certname, err)
	}
	var rec facts.ReadRecord
	if err := json.Unmarshal(b, &rec); err != nil {
		return Explanation{}, fmt.Errorf("decode fact record %s of %s: %v: %w", n.Catalog.ReadsDigest, certname, err, farm.ErrInvalid)
	}
	ex.Reads = summarise(n.Catalog.ReadsDigest, &rec)
	return ex, nil
}

// requestState is what became of the node's latest served-slot request,
// and the compile error when it failed.
func requestState(n *farm.Node) (string, string) {
	r := n.Requested
	switch {
	case r == nil:
		return "", ""
	case n.Pending():
		return RequestPending, ""
	case n.Compile != nil && n.Compile.Seq >= r.Seq:
		switch n.Compile.Result {
		case farm.ResultFailed:
			return RequestFailed, n.Compile.Error
		case farm.ResultUnchanged:
			return RequestUnchanged, ""
		}
	}
	return RequestCompiled, ""
}

// summarise counts a record's reads per top-level fact.
func summarise(d farm.Digest, rec *facts.ReadRecord) *ReadSummary {
	s := &ReadSummary{Digest: d, Reads: len(rec.Reads), AlwaysRecompile: rec.AlwaysRecompile, Why: rec.Why,
		Clock: rec.Clock, ClockWhy: rec.ClockWhy}
	for _, q := range rec.Queries {
		s.Queries = append(s.Queries, farm.QueryText(q.Query))
	}
	counts := map[string]int{}
	for _, r := range rec.Reads {
		top := ""
		if len(r.Path) > 0 {
			top = r.Path[0]
		}
		counts[top]++
	}
	for f, c := range counts {
		s.Facts = append(s.Facts, FactReadCount{Fact: f, Reads: c})
	}
	slices.SortFunc(s.Facts, func(a, b FactReadCount) int {
		return cmp.Or(cmp.Compare(b.Reads, a.Reads), cmp.Compare(a.Fact, b.Fact))
	})
	return s
}

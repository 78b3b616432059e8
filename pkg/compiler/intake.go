package compiler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/compilefarm/compilefarm/pkg/facts"
	"github.com/compilefarm/compilefarm/pkg/farm"
)

// Intake receives nodes' facts, stores them by digest, and queues a compile
// when a node has no catalog yet, its environment's code changed, or a fact
// that matters changed (volatile facts ignored). Unchanged facts cost no write
// and no compile. Safe for concurrent use.
type Intake struct {
	Content farm.ContentStore
	Nodes   farm.NodeStore
	Envs    farm.EnvironmentStore
	Queue   farm.Queue
	Filter  *facts.Filter
	Log     *slog.Logger
	Now     func() time.Time

	// recent remembers, per node, the digests of the last fact upload seen
	// by this process, keyed by the digest of its raw (still encoded) form,
	// so that an agent sending the same facts again costs no JSON decode.
	recent sync.Map // certname -> recentFacts
	// readRecords caches catalogs' fact-read records by digest.
	readRecords sync.Map // farm.Digest -> *FactReads
}

type recentFacts struct {
	rawKey   farm.Digest
	facts    farm.Digest
	relevant farm.Digest
	// values are the decoded facts; nil when the upload repeats the node's
	// last one byte for byte (nothing about the facts can have changed).
	values map[string]any
}

// Upload is one fact upload.
type Upload struct {
	Certname    string
	Environment string
	// RawKey, when set, identifies the upload's raw bytes (the digest of the
	// encoded form parameter); an upload whose RawKey matches the node's last
	// one is known unchanged without calling Document.
	RawKey farm.Digest
	// Document returns the facts document (JSON). Called at most once.
	Document func() ([]byte, error)
}

// Outcome says what an upload did.
type Outcome struct {
	Node   farm.Node
	Queued bool   // a compile was queued
	Reason string // why, when queued
}

func (in *Intake) now() time.Time {
	if in.Now != nil {
		return in.Now()
	}
	return time.Now()
}

func (in *Intake) log() *slog.Logger {
	if in.Log != nil {
		return in.Log
	}
	return slog.Default()
}

// Submit records a fact upload and queues a compile when one is needed.
// Invalid facts return an error wrapping farm.ErrInvalid and change nothing;
// an unknown environment returns an error wrapping farm.ErrNotFound.
func (in *Intake) Submit(ctx context.Context, up Upload) (Outcome, error) {
	if err := farm.ValidateCertname(up.Certname); err != nil {
		return Outcome{}, err
	}
	if err := farm.ValidateEnvironment(up.Environment); err != nil {
		return Outcome{}, err
	}
	env, err := in.Envs.GetEnvironment(ctx, up.Environment)
	if errors.Is(err, farm.ErrNotFound) {
		return Outcome{}, fmt.Errorf("Could not find environment '%s': %w", up.Environment, farm.ErrNotFound)
	}
	if err != nil {
		return Outcome{}, fmt.Errorf("read environment %s: %w", up.Environment, err)
	}
	node, err := in.Nodes.GetNode(ctx, up.Certname)
	known := err == nil
	if err != nil && !errors.Is(err, farm.ErrNotFound) {
		return Outcome{}, fmt.Errorf("read node %s: %w", up.Certname, err)
	}
	digests, err := in.digests(ctx, up, node.FactsDigest)
	if err != nil {
		return Outcome{}, err
	}
	x := inputs{environment: up.Environment, codeID: env.CodeID, facts: digests}
	if known {
		// Load the read record the decision needs before the update, so the
		// update function does no I/O.
		if err := in.loadReads(ctx, &node); err != nil {
			return Outcome{}, err
		}
		if node.FactsDigest == digests.facts && node.Environment == up.Environment && in.decide(&node, x) == "" {
			return Outcome{Node: node}, nil
		}
	}
	var reason string
	node, err = in.Nodes.UpdateNode(ctx, up.Certname, func(n *farm.Node) error {
		n.Environment = up.Environment
		n.FactsDigest = digests.facts
		n.RelevantDigest = digests.relevant
		n.FactsAt = in.now()
		reason = in.decide(n, x)
		if reason != "" {
			n.RequestSeq++
			n.Requested = &farm.CompileRequest{
				Seq: n.RequestSeq, Environment: up.Environment, CodeID: env.CodeID,
				FactsDigest: digests.facts, RelevantDigest: digests.relevant,
				Reason: reason, Lane: farm.LaneUrgent, At: in.now(),
			}
		}
		return nil
	})
	if err != nil {
		return Outcome{}, fmt.Errorf("record facts of %s: %w", up.Certname, err)
	}
	if reason == "" {
		return Outcome{Node: node}, nil
	}
	if err := in.enqueue(ctx, node); err != nil {
		return Outcome{}, err
	}
	in.log().Info("compile queued", "node", up.Certname, "reason", reason, "seq", node.RequestSeq, "code_id", env.CodeID)
	return Outcome{Node: node, Queued: true, Reason: reason}, nil
}

// inputs are what a node's catalog would be compiled from now.
type inputs struct {
	environment, codeID string
	facts               recentFacts
}

// decide returns why node needs a compile for these inputs, or "" if the
// compile it already has (or has queued) is for the same inputs. With a
// record of the facts its catalog read, only a change to one of those
// counts; without one, any change outside the volatile facts does.
func (in *Intake) decide(n *farm.Node, x inputs) string {
	r := n.Requested
	switch {
	case r == nil:
		return farm.ReasonNewNode
	case r.Environment != x.environment || r.CodeID != x.codeID:
		return farm.ReasonCodeChanged
	case x.facts.values == nil:
		// The same bytes as the node's last upload, which was decided on.
		return ""
	}
	if rec, ok := in.readsFor(n); ok {
		if rec.AlwaysRecompile {
			return farm.ReasonFactsChanged
		}
		changed, err := facts.Changed(rec.Reads, x.facts.values)
		if err != nil || changed {
			return farm.ReasonFactsChanged
		}
		return ""
	}
	if r.RelevantDigest != x.facts.relevant {
		return farm.ReasonFactsChanged
	}
	return ""
}

// readsFor returns the fact-read record of the catalog that answers the
// node's latest request, from memory (loadReads puts it there).
func (in *Intake) readsFor(n *farm.Node) (*FactReads, bool) {
	c := n.Catalog
	if c == nil || n.Requested == nil || c.Seq != n.Requested.Seq || c.ReadsDigest == "" {
		return nil, false
	}
	v, ok := in.readRecords.Load(c.ReadsDigest)
	if !ok {
		return nil, false
	}
	return v.(*FactReads), true
}

// loadReads caches the read record of the node's catalog (records are
// immutable, keyed by digest).
func (in *Intake) loadReads(ctx context.Context, n *farm.Node) error {
	c := n.Catalog
	if c == nil || c.ReadsDigest == "" {
		return nil
	}
	if _, ok := in.readRecords.Load(c.ReadsDigest); ok {
		return nil
	}
	b, err := in.Content.Get(ctx, farm.SpaceCatalogs, c.ReadsDigest)
	if err != nil {
		return fmt.Errorf("read fact record %s of %s: %w", c.ReadsDigest, n.Certname, err)
	}
	var rec FactReads
	if err := json.Unmarshal(b, &rec); err != nil {
		return fmt.Errorf("decode fact record %s of %s: %w", c.ReadsDigest, n.Certname, err)
	}
	in.readRecords.Store(c.ReadsDigest, &rec)
	return nil
}

func (in *Intake) enqueue(ctx context.Context, n farm.Node) error {
	r := n.Requested
	job := farm.Job{
		Certname: n.Certname, Environment: r.Environment, Reason: r.Reason,
		FactsDigest: r.FactsDigest, CodeID: r.CodeID, Seq: r.Seq, Lane: r.Lane, EnqueuedAt: r.At,
	}
	if err := in.Queue.Enqueue(ctx, job); err != nil {
		return fmt.Errorf("queue compile of %s: %w", n.Certname, err)
	}
	return nil
}

// digests returns the upload's fact digests, storing the document the first
// time this process sees it. An upload whose raw bytes repeat the last one
// this process saw for the node, which the node record holds (stored), is
// not decoded again.
func (in *Intake) digests(ctx context.Context, up Upload, stored farm.Digest) (recentFacts, error) {
	if up.RawKey != "" {
		if v, ok := in.recent.Load(up.Certname); ok && v.(recentFacts).rawKey == up.RawKey && v.(recentFacts).facts == stored {
			r := v.(recentFacts)
			r.values = nil
			return r, nil
		}
	}
	doc, err := up.Document()
	if err != nil {
		return recentFacts{}, err
	}
	d, err := facts.Decode(up.Certname, doc)
	if err != nil {
		return recentFacts{}, err
	}
	relevant, err := in.Filter.RelevantDigest(d.Values)
	if err != nil {
		return recentFacts{}, fmt.Errorf("digest facts of %s: %w", up.Certname, err)
	}
	fd, err := in.Content.Put(ctx, farm.SpaceFacts, doc)
	if err != nil {
		return recentFacts{}, fmt.Errorf("store facts of %s: %w", up.Certname, err)
	}
	r := recentFacts{rawKey: up.RawKey, facts: fd, relevant: relevant}
	if up.RawKey != "" {
		in.recent.Store(up.Certname, r)
	}
	r.values = d.Values
	return r, nil
}

// Requeue queues a compile of every node in environment whose latest
// request is for other code, on the given lane: what a code deploy does.
// progress, if not nil, is called after each node is queued. It returns how
// many nodes were queued.
func (in *Intake) Requeue(ctx context.Context, environment string, lane farm.Lane, progress func(queued int)) (int, error) {
	env, err := in.Envs.GetEnvironment(ctx, environment)
	if err != nil {
		return 0, fmt.Errorf("read environment %s: %w", environment, err)
	}
	nodes, err := in.Nodes.ListNodes(ctx)
	if err != nil {
		return 0, fmt.Errorf("list nodes: %w", err)
	}
	queued := 0
	for _, n := range nodes {
		if n.Environment != environment || n.FactsDigest == "" {
			continue
		}
		changed := false
		node, err := in.Nodes.UpdateNode(ctx, n.Certname, func(n *farm.Node) error {
			changed = false
			if n.Environment != environment || (n.Requested != nil && n.Requested.CodeID == env.CodeID) {
				return nil
			}
			changed = true
			n.RequestSeq++
			n.Requested = &farm.CompileRequest{
				Seq: n.RequestSeq, Environment: environment, CodeID: env.CodeID,
				FactsDigest: n.FactsDigest, RelevantDigest: n.RelevantDigest,
				Reason: farm.ReasonCodeChanged, Lane: lane, At: in.now(),
			}
			return nil
		})
		if err != nil {
			return queued, fmt.Errorf("requeue %s: %w", n.Certname, err)
		}
		if !changed {
			continue
		}
		if err := in.enqueue(ctx, node); err != nil {
			return queued, err
		}
		queued++
		if progress != nil {
			progress(queued)
		}
	}
	return queued, nil
}

// RequeuePending queues again the latest requested compile of every node
// that has neither a catalog nor a result for it. Run at start, it closes
// the window in which a process died after recording a request but before
// its job was queued; a queue that collapses jobs merges the duplicates,
// and the pool skips any job a newer catalog already answers.
func (in *Intake) RequeuePending(ctx context.Context) (int, error) {
	nodes, err := in.Nodes.ListNodes(ctx)
	if err != nil {
		return 0, fmt.Errorf("list nodes: %w", err)
	}
	n := 0
	for _, node := range nodes {
		if !node.Pending() {
			continue
		}
		if err := in.enqueue(ctx, node); err != nil {
			return n, err
		}
		n++
	}
	if n > 0 {
		in.log().Info("requeued pending compiles", "nodes", n)
	}
	return n, nil
}

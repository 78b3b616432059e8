// Package intake is the farm's fact intake: it receives a node's facts at
// each check-in, stores them by digest, and decides from what the node's
// catalog really read whether the node needs a compile, which it queues
// (per node, per environment on deploys and releases, and for the
// collectors of changed exported resources). Explain says why it last did.
package intake

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/compilefarm/compilefarm/pkg/classifier"
	"github.com/compilefarm/compilefarm/pkg/digestcache"
	"github.com/compilefarm/compilefarm/pkg/facts"
	"github.com/compilefarm/compilefarm/pkg/farm"
	"github.com/compilefarm/compilefarm/pkg/nodeinfo"
)

// Classifier classifies nodes (the external node classifier). Errors wrap
// classifier.ErrFailed when the classifier itself failed.
type Classifier interface {
	Classify(ctx context.Context, certname string) (classifier.Classification, error)
}

// Intake receives nodes' facts, stores them by digest, and queues a compile
// when a node has no catalog yet, its environment's code changed, a fact
// that matters changed (volatile facts ignored), or its node information
// (trusted extensions, classification) changed. Unchanged inputs cost no
// write and no compile. Safe for concurrent use.
type Intake struct {
	Content farm.ContentStore
	Nodes   farm.NodeStore
	Envs    farm.EnvironmentStore
	Queue   farm.Queue
	Filter  *facts.Filter
	// Classifier, when set, classifies the node at every check-in (Puppet's
	// external node classifier): its classes and parameters are compile
	// inputs, and its environment wins over the agent's.
	Classifier Classifier
	Log        *slog.Logger
	Now        func() time.Time
	// WholeFacts has every upload decoded whole, and its facts stored
	// whenever a fact outside the volatile ones changed, not only one the
	// node's catalog read (which is what decides a compile): a site's
	// PuppetDB must see every change (other nodes query it), as Puppet
	// Server sends every run's facts. It costs the decode of each upload's
	// whole document (an identical upload still costs none).
	WholeFacts bool
	// FactsRefresh is how often a node's stored facts are brought up to
	// date when they changed only in ways no catalog depends on (uptime,
	// free memory...); such uploads otherwise cost no write. Default 30m.
	FactsRefresh time.Duration
	// FailedRetry is how long after a node's compile failed its next
	// check-in with the same inputs compiles it again. Something outside
	// the inputs may have been mended (a classifier back up, an eyaml key
	// put in place, an engine that crashed); Puppet Server compiles every
	// request, and this bounds a failing node to one compile per
	// FailedRetry. Default 10m.
	FailedRetry time.Duration
	// ClockMaxAge is how long a catalog that read the current time (and
	// nothing else beyond facts and code: facts.ReadRecord.Clock) is served
	// before a check-in compiles the node again. Puppet Server compiles
	// with the time of every run; a catalog this old is what it would have
	// compiled that long before the run. Default 1h.
	ClockMaxAge time.Duration
	// Progress, when set, is called every 1,000 nodes while an
	// environment is replanned (a deploy or release going through its
	// nodes), so a long deploy shows how far it got.
	Progress func(environment string, sofar ReplanResult)

	// recent remembers, per node, the digests of the last fact upload seen
	// by this process, with the RawKey of its facts as sent, so that an
	// agent sending the same facts again costs no decoding.
	recent sync.Map // certname -> recentFacts
	// readRecords caches catalogs' fact-read records by digest.
	readRecords digestcache.Cache[*facts.ReadRecord]
}

type recentFacts struct {
	rawKey   farm.Digest
	facts    farm.Digest
	relevant farm.Digest
	// nodeInfo is the digest of the node information that goes with the
	// facts (set by Submit for the upload, from the record otherwise).
	nodeInfo farm.Digest
	// values are the decoded facts; nil when the upload repeats the node's
	// last one byte for byte (nothing about the facts can have changed).
	values map[string]any
	// partial marks values that hold only the facts the node's catalogs
	// read (factsRead), and no relevant digest nor facts digest (see
	// factsDigest): enough to decide that the upload changes nothing, not
	// to record it (whole completes them).
	partial bool
	// doc is the facts document, to store when the node record is written;
	// nil when it is stored already, or not read yet (upload).
	doc []byte
	// upload, until document reads it into doc, is the upload's facts as
	// sent: an upload judged from its selected values needs its document
	// only when something is written. Zero once read, and for facts the
	// node's last upload gave.
	upload facts.Upload
}

// Upload is one fact upload.
type Upload struct {
	Certname    string
	Environment string
	// Facts are the node's facts as it sent them (a catalog request's
	// form or a facts document), read as little as the decision needs:
	// an upload whose RawKey repeats the node's last one is not decoded;
	// one judged unchanged from the facts the node's catalog read
	// (Selected) is not decoded whole; the document is read (Document)
	// at most once, when something is written. Submit keeps nothing of
	// them once it returns (the front door reuses the request body they
	// are read from).
	Facts facts.Upload
	// TrustedExtensions are the extensions of the certificate the node
	// presented ($trusted['extensions'], pkg/trusted).
	TrustedExtensions map[string]string
	// Node, when set, is the node's record as read moments ago for the
	// same agent run (the front door's node request): Submit decides from
	// it instead of reading the record again. It may be seconds old:
	// Submit only compares it, and writes through UpdateNode, which reads
	// the record afresh.
	Node *farm.Node
}

// Outcome says what an upload did.
type Outcome struct {
	Node   farm.Node
	Queued bool   // a compile was queued
	Reason string // why, when queued
	// FactsChanged says the upload changed the node's stored facts other
	// than the volatile ones (Node.RelevantDigest): what feeds the site's
	// PuppetDB sends them then (volatile ones brought up to date alone, by
	// FactsRefresh, are not a change here). With WholeFacts, any such
	// change is stored at once.
	FactsChanged bool
}

// storedInputs are the inputs the node record holds: its latest facts and
// node information, as decisions made away from a check-in (deploys,
// collectors) use them.
func storedInputs(n *farm.Node) recentFacts {
	return recentFacts{facts: n.FactsDigest, relevant: n.RelevantDigest, nodeInfo: n.NodeInfo}
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
// an unknown environment returns an error wrapping farm.ErrNotFound. With a
// Classifier, the node is classified first: its environment, when it names
// one, replaces up.Environment; a failed classification returns an error
// wrapping classifier.ErrFailed (with Puppet's message) and changes nothing
// but the node's ClassifierFailure.
func (in *Intake) Submit(ctx context.Context, up Upload) (Outcome, error) {
	if err := farm.ValidateCertname(up.Certname); err != nil {
		return Outcome{}, err
	}
	info, infoDoc, err := in.nodeInfo(ctx, &up)
	if err != nil {
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
	var node farm.Node
	if up.Node != nil && up.Node.Certname == up.Certname {
		node = *up.Node
	} else {
		node, err = in.Nodes.GetNode(ctx, up.Certname)
	}
	known := err == nil
	if err != nil && !errors.Is(err, farm.ErrNotFound) {
		return Outcome{}, fmt.Errorf("read node %s: %w", up.Certname, err)
	}
	var only *facts.Selection
	if known {
		// Load the read records the decision needs before the update, so
		// the update function does no I/O.
		if err := in.loadReads(ctx, &node); err != nil {
			return Outcome{}, err
		}
		only = in.factsRead(&node)
		if in.WholeFacts {
			only = nil
		}
	}
	digests, err := in.digests(ctx, up, node.FactsDigest, only)
	if err != nil {
		return Outcome{}, err
	}
	digests.nodeInfo = info
	lane := farm.LaneUrgent
	if known {
		if jobs, _ := in.plan(&node, env, digests, lane, true); len(jobs) == 0 && node.Environment == up.Environment &&
			node.NodeInfo == info && node.ClassifierFailure == nil {
			same := in.now().Sub(node.FactsAt) < in.factsRefresh()
			if in.WholeFacts && digests.relevant != node.RelevantDigest {
				same = false // a non-volatile fact changed: PuppetDB must see it
			}
			if !same {
				d, err := digests.factsDigest()
				if err != nil {
					return Outcome{}, err
				}
				same = node.FactsDigest == d
			}
			if same {
				// Nothing to compile, and nothing worth a write.
				return Outcome{Node: node}, nil
			}
		}
	}
	if digests.partial {
		// What is written (and what plans compiles) are the whole facts.
		if digests, err = in.whole(up.Certname, digests); err != nil {
			return Outcome{}, err
		}
	}
	if digests.doc != nil {
		if _, err := in.Content.Put(ctx, farm.SpaceFacts, digests.doc); err != nil {
			return Outcome{}, fmt.Errorf("store facts of %s: %w", up.Certname, err)
		}
	}
	if node.NodeInfo != info && infoDoc != nil {
		if _, err := in.Content.Put(ctx, farm.SpaceNodeInfo, infoDoc); err != nil {
			return Outcome{}, fmt.Errorf("store node information of %s: %w", up.Certname, err)
		}
	}
	if f, ok := in.Envs.(interface {
		FreshEnvironment(context.Context, string) (farm.Environment, error)
	}); ok {
		// The decision to write may have been made with a cached record
		// (pkg/envcache); what is written is planned with the current one.
		if env, err = f.FreshEnvironment(ctx, up.Environment); err != nil {
			return Outcome{}, fmt.Errorf("read environment %s: %w", up.Environment, err)
		}
	}
	var jobs []plannedJob
	var before []farm.Digest // catalog blobs of the record written over
	previous := node.RelevantDigest
	node, err = in.Nodes.UpdateNode(ctx, up.Certname, func(n *farm.Node) error {
		before = n.CatalogBlobs()
		n.Environment = up.Environment
		n.FactsDigest = digests.facts
		n.RelevantDigest = digests.relevant
		n.FactsAt = in.now()
		n.NodeInfo = info
		n.ClassifierFailure = nil
		jobs, _ = in.plan(n, env, digests, lane, false)
		return nil
	})
	if err != nil {
		return Outcome{}, fmt.Errorf("record facts of %s: %w", up.Certname, err)
	}
	in.retire(ctx, up.Certname, before, &node)
	if digests.rawKey != "" {
		in.recent.Store(up.Certname, recentFacts{rawKey: digests.rawKey, facts: digests.facts, relevant: digests.relevant, nodeInfo: info})
	}
	out := Outcome{Node: node, FactsChanged: node.RelevantDigest != previous}
	for _, j := range jobs {
		if err := in.enqueue(ctx, node, j.slot); err != nil {
			return Outcome{}, err
		}
		if j.slot == farm.SlotServed {
			out.Queued, out.Reason = true, j.reason
		}
		in.log().Info("compile queued", "node", up.Certname, "reason", j.reason, "slot", j.slot, "code_id", j.codeID)
	}
	return out, nil
}

// nodeInfo classifies the node (with a Classifier), moves the upload to the
// classifier's environment when it names one, and returns the digest and
// canonical JSON of the node's information. A failed classification is
// recorded on the node and returned.
func (in *Intake) nodeInfo(ctx context.Context, up *Upload) (farm.Digest, []byte, error) {
	info := nodeinfo.Info{TrustedExtensions: up.TrustedExtensions}
	if in.Classifier != nil {
		c, err := in.Classifier.Classify(ctx, up.Certname)
		if err != nil {
			err = fmt.Errorf("Failed when searching for node %s: %w", up.Certname, err)
			if errors.Is(err, classifier.ErrFailed) {
				in.recordClassifierFailure(ctx, up.Certname, err)
			}
			return "", nil, err
		}
		if c.Environment != "" && c.Environment != up.Environment {
			if up.Environment != "" {
				in.log().Debug("classifier sets the environment", "node", up.Certname, "environment", c.Environment, "agent_environment", up.Environment)
			}
			up.Environment = c.Environment
		}
		info = info.Classified(c)
	}
	doc, d, err := info.Encode()
	if err != nil {
		return "", nil, fmt.Errorf("node %s: %w", up.Certname, err)
	}
	return d, doc, nil
}

// classifierFailureRefresh is how often a classifier failure that repeats
// word for word is written to the node again (its time brought up to date).
const classifierFailureRefresh = 10 * time.Minute

// recordClassifierFailure notes on the node that its classification
// failed, so that operators see it (broker nodes); nothing else of the
// node changes. A failure to record it is logged: the agent gets the
// classifier's error either way.
func (in *Intake) recordClassifierFailure(ctx context.Context, certname string, cause error) {
	in.log().Warn("external node classifier failed", "node", certname, "err", cause)
	now := in.now()
	msg := cause.Error()
	_, err := in.Nodes.UpdateNode(ctx, certname, func(n *farm.Node) error {
		if f := n.ClassifierFailure; f != nil && f.Error == msg && now.Sub(f.At) < classifierFailureRefresh {
			return errRecorded // the same failure, recorded lately: no write
		}
		n.ClassifierFailure = &farm.ClassifierFailure{Error: msg, At: now}
		return nil
	})
	if err != nil && !errors.Is(err, errRecorded) {
		in.log().Error("record classifier failure", "node", certname, "err", err)
	}
}

// errRecorded ends an update that has nothing to write.
var errRecorded = errors.New("already recorded")

// plannedJob is a compile plan decided to queue for a node's slot.
type plannedJob struct {
	slot           farm.Slot
	reason, codeID string
}

// plan brings the node's compile requests in line with its inputs: the
// served slot must be for the code the environment's release targets for
// the node; while a release holds the environment's code back from it, the
// candidate slot precompiles that code. It records new requests on n
// (unless dryRun) and returns the jobs to queue. A candidate ready for the
// code the node is now released to is promoted instead of compiled.
func (in *Intake) plan(n *farm.Node, env farm.Environment, f recentFacts, lane farm.Lane, dryRun bool) (jobs []plannedJob, promoted bool) {
	target := env.TargetCode(n.Certname)
	if w := in.decide(n, farm.SlotServed, env.Name, target, f); w.reason != "" {
		if !dryRun && in.promote(n, target) {
			w.reason, promoted = "", true
		}
		if w.reason != "" {
			jobs = append(jobs, plannedJob{farm.SlotServed, w.reason, target})
			if !dryRun {
				n.RequestSeq++
				n.Requested = in.request(n, n.Catalog, env.Name, target, f, w, lane)
			}
		}
	}
	if target != env.CodeID {
		if w := in.decide(n, farm.SlotCandidate, env.Name, env.CodeID, f); w.reason != "" {
			jobs = append(jobs, plannedJob{farm.SlotCandidate, w.reason, env.CodeID})
			if !dryRun {
				n.RequestSeq++
				n.CandidateRequested = in.request(n, n.Candidate, env.Name, env.CodeID, f, w, farm.LaneBulk)
			}
		}
	} else if !dryRun && n.CandidateRequested != nil {
		// Released (or no release): the candidate slot has no purpose.
		n.DropCandidate()
	}
	return jobs, promoted
}

// request is a new compile request of the node for code with facts f,
// queued for w. It carries the projection of f onto the read record of
// the slot's current catalog (when there is one), by which uploads are
// judged until it is answered.
func (in *Intake) request(n *farm.Node, cat *farm.CatalogRef, env, code string, f recentFacts, w why, lane farm.Lane) *farm.CompileRequest {
	r := &farm.CompileRequest{
		Seq: n.RequestSeq, Environment: env, CodeID: code,
		FactsDigest: f.facts, RelevantDigest: f.relevant, NodeInfo: f.nodeInfo,
		Reason: w.reason, Lane: lane, At: in.now(),
		Changes: w.changes, Cause: w.cause,
	}
	if cat == nil || cat.ReadsDigest == "" || f.values == nil {
		return r
	}
	if v, ok := in.readRecords.Load(cat.ReadsDigest); ok && !v.AlwaysRecompile {
		if p, err := facts.Projection(v.Reads, f.values); err == nil {
			r.ReadsDigest, r.Projection = cat.ReadsDigest, p
		}
	}
	return r
}

// retireTimeout bounds retiring the catalogs one write dropped.
const retireTimeout = 30 * time.Second

// retire tells a content store that removes catalogs no node refers to
// (a farm.ContentRetirer) which ones the write of the node's record that
// turned the catalog blobs before into after's dropped: a promoted
// candidate pushes the served catalog into History, whose oldest may fall
// out, and a dropped candidate goes. farm.RetireCatalogs says why this is
// safe; a failure is logged (the catalogs stay stored). No write here
// refers to a catalog again: a promoted candidate was referred to. The
// calls cost: none when nothing was dropped (most check-ins); else one
// CopyObject per blob and one GetItem of the record.
func (in *Intake) retire(ctx context.Context, certname string, before []farm.Digest, after *farm.Node) {
	r, ok := in.Content.(farm.ContentRetirer)
	if !ok {
		return
	}
	dropped := farm.Dropped(before, after)
	if len(dropped) == 0 {
		return
	}
	// Its own time: an agent that hangs up must not cut the retire off
	// between its steps.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), retireTimeout)
	defer cancel()
	if err := farm.RetireCatalogs(ctx, in.Nodes, r, certname, dropped); err != nil {
		in.log().Warn("retire catalogs the node no longer refers to: they stay stored", "node", certname, "err", err)
	}
}

// promote makes the node's precompiled candidate its served catalog when
// the candidate is for code and was compiled from the facts and node
// information the node has.
func (in *Intake) promote(n *farm.Node, code string) bool {
	c, r := n.Candidate, n.CandidateRequested
	if c == nil || r == nil || r.CodeID != code || c.Seq != r.Seq || r.FactsDigest != n.FactsDigest ||
		nodeinfo.Used(c, r) != n.NodeInfo {
		return false
	}
	n.RequestSeq++
	req := *r
	req.Seq, req.Reason, req.Lane, req.At = n.RequestSeq, farm.ReasonReleased, farm.LaneUrgent, in.now()
	req.Changes, req.Cause = nil, nil
	if n.Requested != nil {
		req.Cause = &farm.RequestCause{Input: farm.CauseCodeID, Old: n.Requested.CodeID, New: code,
			Note: "released; the precompiled catalog is served"}
	}
	n.Requested = &req
	cat := *c
	cat.Seq = req.Seq
	st := farm.CompileStatus{Result: farm.ResultOK, Seq: req.Seq, CodeID: code, At: req.At}
	if n.CandidateCompile != nil {
		st.Duration = n.CandidateCompile.Duration
	}
	n.SetCompiled(farm.SlotServed, cat, st)
	n.DropCandidate()
	return true
}

// why is what decide found: the reason a slot needs a compile ("" for
// none) and, where known cheaply, what changed (see farm.CompileRequest's
// Changes and Cause).
type why struct {
	reason  string
	changes []farm.FactChange
	cause   *farm.RequestCause
}

// decide returns why the node's slot needs a compile of code for these
// facts and node information, or a zero why if the compile it has (or has
// queued) is for the same inputs. With a record of the facts the slot's
// catalog read, only a change to one of those counts; without one, any
// change outside the volatile facts does. Facts with nil values repeat the
// node's last upload.
func (in *Intake) decide(n *farm.Node, slot farm.Slot, environment, code string, f recentFacts) why {
	s := n.Slot(slot)
	r := s.Requested
	switch {
	case r == nil && slot == farm.SlotCandidate:
		return why{reason: farm.ReasonPrecompile}
	case r == nil:
		return why{reason: farm.ReasonNewNode}
	case r.Environment != environment:
		return why{reason: farm.ReasonCodeChanged, cause: &farm.RequestCause{Input: farm.CauseEnvironment, Old: r.Environment, New: environment}}
	case r.CodeID != code:
		return why{reason: farm.ReasonCodeChanged, cause: &farm.RequestCause{Input: farm.CauseCodeID, Old: r.CodeID, New: code}}
	case nodeinfo.Used(s.Catalog, r) != f.nodeInfo:
		return why{reason: farm.ReasonNodeChanged, cause: &farm.RequestCause{Input: farm.CauseNodeInfo,
			Old: string(nodeinfo.Used(s.Catalog, r)), New: string(f.nodeInfo), Note: "trusted extensions or classification changed"}}
	case in.retryDue(s.Catalog, s.Compile, r):
		return why{reason: farm.ReasonRetry, cause: &farm.RequestCause{
			Note: fmt.Sprintf("the compile of request %d failed at %s", r.Seq, s.Compile.At.UTC().Format(time.RFC3339))}}
	case f.values == nil:
		if r.FactsDigest == f.facts || n.FactsDigest == f.facts || r.RelevantDigest == f.relevant {
			if rec, ok := in.readsFor(s.Catalog, r); ok && rec.Clock {
				return in.clockWhy(rec, s.Catalog, s.Compile)
			}
			return why{}
		}
		return relevantChanged(r, f, "relevant facts digest changed")
	}
	if rec, ok := in.readsFor(s.Catalog, r); ok {
		if rec.AlwaysRecompile {
			return why{reason: farm.ReasonFactsChanged, cause: &farm.RequestCause{Note: "the catalog always recompiles: " + rec.Why}}
		}
		if w := factsChanged(rec.Reads, f.values); w.reason != "" || !rec.Clock {
			return w
		}
		return in.clockWhy(rec, s.Catalog, s.Compile)
	}
	if v, ok := in.readRecords.Load(r.ReadsDigest); ok && r.Projection != "" {
		// Still compiling: judge by what the last catalog read.
		if p, err := facts.Projection(v.Reads, f.values); err == nil && p == r.Projection {
			return why{}
		}
		// The reads differ from the pending compile's; the changes listed
		// are from what the current catalog read (none when they came back).
		w := factsChanged(v.Reads, f.values)
		note := "a compile was pending with other values of the facts the catalog reads; changes are from the current catalog's"
		if w.cause != nil {
			note += "; " + w.cause.Note
		}
		w.reason, w.cause = farm.ReasonFactsChanged, &farm.RequestCause{Note: note}
		return w
	}
	if r.RelevantDigest != f.relevant {
		return relevantChanged(r, f, "no read record; relevant facts digest changed")
	}
	return why{}
}

// factsChanged is why for reads that may observe something else in
// values: ReasonFactsChanged with the first changed reads, or a zero why.
func factsChanged(reads []facts.Read, values map[string]any) why {
	changes, err := facts.Changes(reads, values, farm.MaxRequestChanges+1)
	switch {
	case err != nil:
		return why{reason: farm.ReasonFactsChanged, changes: changes,
			cause: &farm.RequestCause{Note: "the read record could not be checked: " + err.Error()}}
	case len(changes) > farm.MaxRequestChanges:
		return why{reason: farm.ReasonFactsChanged, changes: changes[:farm.MaxRequestChanges],
			cause: &farm.RequestCause{Note: fmt.Sprintf("more than %d reads changed; the first %[1]d are listed", farm.MaxRequestChanges)}}
	case len(changes) > 0:
		return why{reason: farm.ReasonFactsChanged, changes: changes}
	}
	return why{}
}

// relevantChanged is why for facts judged without a read record: by the
// digest of the facts without the volatile ones.
func relevantChanged(r *farm.CompileRequest, f recentFacts, note string) why {
	return why{reason: farm.ReasonFactsChanged, cause: &farm.RequestCause{
		Input: farm.CauseRelevant, Old: string(r.RelevantDigest), New: string(f.relevant), Note: note}}
}

// readsFor returns the fact-read record of a catalog that answers req,
// from memory (loadReads puts it there).
func (in *Intake) readsFor(c *farm.CatalogRef, req *farm.CompileRequest) (*facts.ReadRecord, bool) {
	if c == nil || req == nil || c.Seq != req.Seq || c.ReadsDigest == "" {
		return nil, false
	}
	return in.readRecords.Load(c.ReadsDigest)
}

// loadReads caches the read record of the node's catalog (records are
// immutable, keyed by digest).
func (in *Intake) loadReads(ctx context.Context, n *farm.Node) error {
	var digests []farm.Digest
	for _, c := range []*farm.CatalogRef{n.Catalog, n.Candidate} {
		if c != nil {
			digests = append(digests, c.ReadsDigest)
		}
	}
	for _, r := range []*farm.CompileRequest{n.Requested, n.CandidateRequested} {
		if r != nil {
			digests = append(digests, r.ReadsDigest)
		}
	}
	for _, d := range digests {
		if err := in.loadRecord(ctx, n, d); err != nil {
			return err
		}
	}
	return nil
}

func (in *Intake) loadRecord(ctx context.Context, n *farm.Node, d farm.Digest) error {
	if d == "" {
		return nil
	}
	if _, ok := in.readRecords.Load(d); ok {
		return nil
	}
	b, err := in.Content.Get(ctx, farm.SpaceCatalogs, d)
	if err != nil {
		return fmt.Errorf("read fact record %s of %s: %w", d, n.Certname, err)
	}
	var rec facts.ReadRecord
	if err := json.Unmarshal(b, &rec); err != nil {
		return fmt.Errorf("decode fact record %s of %s: %w", d, n.Certname, err)
	}
	facts.CanonicalReads(rec.Reads) // compared with every upload: once, not each time
	in.readRecords.Store(d, &rec)
	return nil
}

func (in *Intake) enqueue(ctx context.Context, n farm.Node, slot farm.Slot) error {
	r := n.Slot(slot).Requested
	job := farm.Job{
		Certname: n.Certname, Environment: r.Environment, Reason: r.Reason,
		FactsDigest: r.FactsDigest, NodeInfo: r.NodeInfo, CodeID: r.CodeID, Seq: r.Seq, Lane: r.Lane, EnqueuedAt: r.At,
		Slot: slot,
	}
	if err := in.Queue.Enqueue(ctx, job); err != nil {
		return fmt.Errorf("queue compile of %s: %w", n.Certname, err)
	}
	return nil
}

// digests decodes an upload and returns its digests. An upload whose raw
// bytes repeat the last one this process recorded for the node, which the
// node record still holds (stored), is not decoded again. With only (the
// facts the node's catalogs read: factsRead), the upload's facts are
// decoded partially when they can be (recentFacts.partial).
func (in *Intake) digests(ctx context.Context, up Upload, stored farm.Digest, only *facts.Selection) (recentFacts, error) {
	key := up.Facts.RawKey()
	if key != "" {
		if v, ok := in.recent.Load(up.Certname); ok && v.(recentFacts).rawKey == key && v.(recentFacts).facts == stored {
			r := v.(recentFacts)
			r.values = nil
			return r, nil
		}
	}
	f := recentFacts{rawKey: key, upload: up.Facts}
	if only != nil {
		// The document is read when something is written (whole); an
		// error here is said by Decode then.
		if values, ok, err := up.Facts.Selected(up.Certname, only); ok && err == nil {
			f.values, f.partial = values, true
			return f, nil
		}
	}
	if err := f.document(); err != nil {
		return recentFacts{}, err
	}
	if only != nil {
		// An error here is said by Decode, which also reads what
		// DecodeOnly may not.
		if d, err := facts.DecodeOnly(up.Certname, f.doc, only); err == nil {
			f.values, f.partial = d.Values, true
			return f, nil
		}
	}
	return in.whole(up.Certname, f)
}

// document reads the upload's document into f.doc, once (see upload).
func (f *recentFacts) document() error {
	if f.upload.IsZero() {
		return nil
	}
	up := f.upload
	f.upload = facts.Upload{}
	if testHookDocument != nil {
		testHookDocument()
	}
	doc, err := up.Document()
	if err != nil {
		return err
	}
	f.doc = doc
	return nil
}

// testHookDocument, when set (by tests), is called each time an upload's
// document is read.
var testHookDocument func()

// whole decodes the document of f whole, and digests it and its relevant
// facts.
func (in *Intake) whole(certname string, f recentFacts) (recentFacts, error) {
	if _, err := f.factsDigest(); err != nil {
		return recentFacts{}, err
	}
	d, err := facts.Decode(certname, f.doc)
	if err != nil {
		return recentFacts{}, err
	}
	relevant, err := in.Filter.RelevantDigest(d.Values)
	if err != nil {
		return recentFacts{}, fmt.Errorf("digest facts of %s: %w", certname, err)
	}
	f.values, f.relevant, f.partial = d.Values, relevant, false
	return f, nil
}

// factsDigest is the digest of the facts document, computed (and the
// document read) when first needed: a partial upload judged unchanged
// whose node's facts are recent needs neither.
func (f *recentFacts) factsDigest() (farm.Digest, error) {
	if err := f.document(); err != nil {
		return "", err
	}
	if f.facts == "" && f.doc != nil {
		f.facts = farm.DigestOf(f.doc)
	}
	return f.facts, nil
}

// factsRead returns the facts that a decision on fresh facts (decide)
// compares for node n: the paths read by the read records it judges each
// slot by, the slot's catalog's or, while a compile is pending, the one
// its request was judged by. It returns nil when the decision needs all
// the facts: a slot without a request (a new node) or without such a
// record (judged by the relevant digest), a record not loaded (loadReads),
// or one that always recompiles.
func (in *Intake) factsRead(n *farm.Node) *facts.Selection {
	only := &facts.Selection{}
	for _, slot := range farm.Slots {
		s := n.Slot(slot)
		r := s.Requested
		if r == nil {
			if slot == farm.SlotServed {
				return nil
			}
			continue
		}
		rec, ok := in.readsFor(s.Catalog, r)
		if !ok && r.Projection != "" {
			rec, ok = in.readRecords.Load(r.ReadsDigest)
		}
		if !ok || rec.AlwaysRecompile {
			return nil
		}
		for _, read := range rec.Reads {
			only.Add(read.Path)
		}
	}
	return only
}

// retryDue reports whether request r's compile failed, leaving no catalog
// that answers it, at least FailedRetry ago.
func (in *Intake) retryDue(c *farm.CatalogRef, st *farm.CompileStatus, r *farm.CompileRequest) bool {
	if st == nil || st.Result != farm.ResultFailed || st.Seq != r.Seq || (c != nil && c.Seq >= r.Seq) {
		return false
	}
	retry := in.FailedRetry
	if retry <= 0 {
		retry = 10 * time.Minute
	}
	return in.now().Sub(st.At) >= retry
}

// clockWhy says whether catalog c, whose read record rec says it read the
// clock, is due for a compile: when its latest compile (an unchanged
// recompile counts) is at least ClockMaxAge old.
func (in *Intake) clockWhy(rec *facts.ReadRecord, c *farm.CatalogRef, st *farm.CompileStatus) why {
	if c == nil {
		return why{}
	}
	at := c.CompiledAt
	if st != nil && st.Seq == c.Seq && st.At.After(at) {
		at = st.At
	}
	age := in.now().Sub(at)
	if age < in.clockMaxAge() {
		return why{}
	}
	return why{reason: farm.ReasonClock, cause: &farm.RequestCause{Note: fmt.Sprintf(
		"the catalog reads the clock (%s) and was compiled %s ago; clock-reading catalogs are reused for %s",
		rec.ClockWhy, age.Round(time.Second), in.clockMaxAge())}}
}

func (in *Intake) clockMaxAge() time.Duration {
	if in.ClockMaxAge > 0 {
		return in.ClockMaxAge
	}
	return time.Hour
}

func (in *Intake) factsRefresh() time.Duration {
	if in.FactsRefresh > 0 {
		return in.FactsRefresh
	}
	return 30 * time.Minute
}

// Requeue brings every node of environment in line with its code and
// release policy (see plan), queueing what is needed on lane: what a code
// deploy does. It returns how many nodes got a job.
func (in *Intake) Requeue(ctx context.Context, environment string, lane farm.Lane) (int, error) {
	st, err := in.Replan(ctx, environment, lane)
	return st.Queued, err
}

// ReplanResult counts what replanning an environment did.
type ReplanResult struct {
	Nodes    int `json:"nodes"`    // nodes in the environment
	Queued   int `json:"queued"`   // nodes that got a compile job
	Promoted int `json:"promoted"` // nodes whose precompiled candidate became their catalog
}

// Replan runs plan over the environment's nodes with the facts they have,
// page by page through the node index (reporting Progress every 1,000
// nodes): what deploys and releases do.
func (in *Intake) Replan(ctx context.Context, environment string, lane farm.Lane) (ReplanResult, error) {
	var res ReplanResult
	env, err := in.Envs.GetEnvironment(ctx, environment)
	if err != nil {
		return res, fmt.Errorf("read environment %s: %w", environment, err)
	}
	err = farm.EachNode(ctx, in.Nodes, farm.NodeQuery{Environment: environment, Limit: farm.MaxNodePage}, func(n farm.Node) error {
		if n.FactsDigest == "" {
			return nil
		}
		res.Nodes++
		var jobs []plannedJob
		var before []farm.Digest
		promoted := false
		node, err := in.Nodes.UpdateNode(ctx, n.Certname, func(n *farm.Node) error {
			jobs, promoted = nil, false
			before = n.CatalogBlobs()
			if n.Environment != environment {
				return nil
			}
			jobs, promoted = in.plan(n, env, storedInputs(n), lane, false)
			return nil
		})
		if err != nil {
			return fmt.Errorf("replan %s: %w", n.Certname, err)
		}
		in.retire(ctx, n.Certname, before, &node)
		if promoted {
			res.Promoted++
		}
		for _, j := range jobs {
			if err := in.enqueue(ctx, node, j.slot); err != nil {
				return err
			}
		}
		if len(jobs) > 0 {
			res.Queued++
		}
		if in.Progress != nil && res.Nodes%1000 == 0 {
			in.Progress(environment, res)
		}
		return nil
	})
	if err != nil {
		return res, fmt.Errorf("replan %s: %w", environment, err)
	}
	return res, nil
}

// RequeuePending queues again the latest requested compile of every node
// that has neither a catalog nor a result for it. Run at start, it closes
// the window in which a process died after recording a request but before
// its job was queued; a queue that collapses jobs merges the duplicates,
// and the pool skips any job a newer catalog already answers.
func (in *Intake) RequeuePending(ctx context.Context) (int, error) {
	envs, err := in.Envs.ListEnvironments(ctx)
	if err != nil {
		return 0, fmt.Errorf("list environments: %w", err)
	}
	n := 0
	for _, env := range envs {
		err := farm.EachNode(ctx, in.Nodes, farm.NodeQuery{Environment: env.Name, Limit: farm.MaxNodePage}, func(node farm.Node) error {
			for _, slot := range farm.Slots {
				if !node.Slot(slot).Pending() {
					continue
				}
				if err := in.enqueue(ctx, node, slot); err != nil {
					return err
				}
				n++
			}
			return nil
		})
		if err != nil {
			return n, fmt.Errorf("requeue pending compiles of %s: %w", env.Name, err)
		}
	}
	if n > 0 {
		in.log().Info("requeued pending compiles", "nodes", n)
	}
	return n, nil
}

// Package farm is the compile farm's domain: the types every part shares (nodes,
// environments, compile jobs, catalog references, code snapshots) and the small
// contracts that have several drivers (content store, node state, queue, CA).
// Drivers live in their own packages and translate their errors into the kinds
// declared here; pkg/farm/farmtest holds one contract suite per contract.
package farm

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"time"
)

// Error kinds. Drivers wrap these (fmt.Errorf("...: %w", farm.ErrNotFound)) so
// callers test with errors.Is and no SDK or driver error type leaks upward.
var (
	// ErrNotFound: the thing asked for does not exist.
	ErrNotFound = errors.New("not found")
	// ErrConflict: a conditional write lost (stale sequence, existing key).
	ErrConflict = errors.New("conflict")
	// ErrInvalid: the input is malformed; retrying it cannot succeed.
	ErrInvalid = errors.New("invalid")
	// ErrTransient: a passing failure (timeout, throttling); retrying may succeed.
	ErrTransient = errors.New("transient")
)

// Digest is the lowercase hex SHA-256 of some bytes: the key of everything in
// the content store.
type Digest string

// DigestOf returns the SHA-256 digest of b.
func DigestOf(b []byte) Digest {
	s := sha256.Sum256(b)
	return Digest(hex.EncodeToString(s[:]))
}

var digestRE = regexp.MustCompile(`^[0-9a-f]{64}$`)

// Valid reports whether d looks like a SHA-256 hex digest.
func (d Digest) Valid() bool { return digestRE.MatchString(string(d)) }

// certnameRE is Puppet's rule for certificate names: lowercase letters,
// digits, '-', '_' and '.', not starting with '.'.
var certnameRE = regexp.MustCompile(`^[a-z0-9_-][a-z0-9._-]*$`)

// ValidateCertname returns an ErrInvalid error when name cannot be a Puppet
// certname (uppercase, path separators, empty, too long).
func ValidateCertname(name string) error {
	if len(name) == 0 || len(name) > 255 || !certnameRE.MatchString(name) || name == "." || name == ".." {
		return fmt.Errorf("certname %q must be lowercase letters, digits, '.', '-' or '_' (at most 255): %w", name, ErrInvalid)
	}
	return nil
}

var envRE = regexp.MustCompile(`^[a-z0-9_]+$`)

// ValidateEnvironment returns an ErrInvalid error when name is not a legal
// Puppet environment name.
func ValidateEnvironment(name string) error {
	if !envRE.MatchString(name) || len(name) > 128 {
		return fmt.Errorf("environment %q must be lowercase letters, digits and '_': %w", name, ErrInvalid)
	}
	return nil
}

// Lane is a compile queue lane. Urgent (new nodes, fact changes) is never
// delayed by Bulk (code deploys).
type Lane string

const (
	LaneUrgent Lane = "urgent"
	LaneBulk   Lane = "bulk"
)

// Reasons a compile is queued.
const (
	ReasonNewNode      = "new-node"
	ReasonFactsChanged = "facts-changed"
	ReasonCodeChanged  = "code-changed"
	ReasonManual       = "manual"
	ReasonPrecompile   = "precompile"      // a held-back release's code, compiled ahead
	ReasonReleased     = "released"        // a release reached the node
	ReasonExports      = "exports-changed" // a resource it collects changed
	// ReasonNodeChanged: what the farm knows of the node besides facts and
	// code changed: its classification (the external node classifier's
	// answer) or its certificate's trusted extensions.
	ReasonNodeChanged = "node-changed"
	// ReasonRetry: the node's latest compile failed a while ago and it
	// checked in again with the same inputs.
	ReasonRetry = "retry-failed"
	// ReasonClock: the node's catalog read the current time, and was
	// compiled longer ago than the farm reuses such catalogs.
	ReasonClock = "clock"
	// ReasonQuery: a PuppetDB query the node's catalog made answers
	// otherwise now (the cause names the query).
	ReasonQuery = "query-changed"
)

// Job asks for one node's catalog to be compiled. Its fields mirror Puppet
// Server's /puppet/v4/catalog request: who, where, with which facts and code.
type Job struct {
	Certname    string `json:"certname"`
	Environment string `json:"environment"`
	Reason      string `json:"reason"`
	FactsDigest Digest `json:"facts_digest"`
	// NodeInfo is the digest of the node's trusted data and classification
	// (nodeinfo.Info JSON in SpaceNodeInfo); empty for a job queued
	// before the farm kept them.
	NodeInfo   Digest    `json:"node_info,omitempty"`
	CodeID     string    `json:"code_id"`
	Seq        uint64    `json:"seq"` // the node's request sequence; newer compiles win
	Lane       Lane      `json:"lane"`
	EnqueuedAt time.Time `json:"enqueued_at"`
	// Slot is SlotServed for the catalog the node is served, SlotCandidate
	// for a precompile of code a staged release still holds back from it.
	Slot Slot `json:"slot,omitempty"`
}

// Slot names which of a node's two catalogs a job compiles.
type Slot string

const (
	// SlotServed is the catalog the node is served. Its name is empty, so
	// it is omitted from encoded jobs and an encoded job without a slot
	// (one written before slots existed) reads as served: name it by this
	// constant, not by an empty string.
	SlotServed Slot = ""
	// SlotCandidate is a precompile of a release's held-back code, which
	// becomes the served catalog when the release reaches the node.
	SlotCandidate Slot = "candidate"
)

// Slots are both slots, served first.
var Slots = []Slot{SlotServed, SlotCandidate}

// Validate checks what every queue needs of a job: a valid certname and
// one of the two lanes. The error wraps ErrInvalid.
func (j Job) Validate() error {
	if err := ValidateCertname(j.Certname); err != nil {
		return err
	}
	if j.Lane != LaneUrgent && j.Lane != LaneBulk {
		return fmt.Errorf("lane %q is not %q or %q: %w", j.Lane, LaneUrgent, LaneBulk, ErrInvalid)
	}
	return nil
}

// Key identifies the catalog a job is for: queues that collapse jobs and
// run one job at a time do so per key (node and slot). A served job's key
// is its certname, as it was before slots existed.
func (j Job) Key() string {
	if j.Slot == SlotServed {
		return j.Certname
	}
	return j.Certname + "#" + string(j.Slot)
}

// CatalogRef points at one stored catalog of a node.
type CatalogRef struct {
	Digest      Digest `json:"digest"`      // catalog JSON in the content store
	GzipDigest  Digest `json:"gzip_digest"` // the same JSON gzipped, served as is
	CodeID      string `json:"code_id"`
	FactsDigest Digest `json:"facts_digest"` // facts the catalog was compiled from
	// NodeInfo is the node information the catalog was compiled with (see
	// Job.NodeInfo); a classifier run at compile time may have given a
	// newer answer than the request carried.
	NodeInfo Digest `json:"node_info,omitempty"`
	Seq      uint64 `json:"seq"` // request sequence of the latest compile it answers
	// ContentDigest identifies what the catalog makes an agent do: equal
	// for two compiles that differ only in code_id, version or catalog_uuid.
	ContentDigest Digest `json:"content_digest,omitempty"`
	// UUID is the catalog's catalog_uuid; an agent's report names it.
	UUID string `json:"uuid,omitempty"`
	// ReadsDigest points at the record of the facts the compile read
	// (facts.ReadRecord JSON in SpaceCatalogs); empty when not recorded.
	ReadsDigest Digest        `json:"reads_digest,omitempty"`
	CompiledAt  time.Time     `json:"compiled_at"`
	Duration    time.Duration `json:"duration"`
}

// Compile results recorded on a node.
const (
	ResultOK        = "ok"
	ResultFailed    = "failed"
	ResultUnchanged = "unchanged" // recompiled to the same catalog: kept
)

// CompileStatus is the outcome of a node's latest finished compile.
type CompileStatus struct {
	Result   string        `json:"result"` // ResultOK, ResultFailed or ResultUnchanged
	Error    string        `json:"error,omitempty"`
	Seq      uint64        `json:"seq"`
	CodeID   string        `json:"code_id,omitempty"`
	At       time.Time     `json:"at"`
	Duration time.Duration `json:"duration"`
}

// ReportSummary is what the farm keeps of a node's latest report
// (NodeStore.RecordReport). The full report is kept only when it is worth
// keeping (see pkg/frontdoor's ReportPolicy): Digest names it in
// SpaceReports then, and is empty for a run of which the farm kept only
// this summary.
type ReportSummary struct {
	Digest          Digest    `json:"digest"`
	Status          string    `json:"status"` // changed, unchanged, failed
	At              time.Time `json:"at"`
	ConfigVersion   string    `json:"configuration_version,omitempty"`
	CatalogUUID     string    `json:"catalog_uuid,omitempty"`
	TransactionUUID string    `json:"transaction_uuid,omitempty"`
	// Metrics digests the report's metrics; nil when the report had none.
	Metrics *ReportMetrics `json:"metrics,omitempty"`
}

// Node is everything the farm knows about one certname.
type Node struct {
	Certname    string `json:"certname"`
	Environment string `json:"environment"`
	// FactsDigest is the digest of the latest uploaded facts document;
	// RelevantDigest the digest of those facts without volatile facts.
	FactsDigest    Digest    `json:"facts_digest"`
	RelevantDigest Digest    `json:"relevant_digest"`
	FactsAt        time.Time `json:"facts_at"`
	// NodeInfo is the digest of the node's trusted data and classification
	// at its latest check-in (see Job.NodeInfo).
	NodeInfo Digest `json:"node_info,omitempty"`
	// ClassifierFailure is the node's latest failed classification, until
	// one succeeds again: the check-in it failed changed nothing else.
	ClassifierFailure *ClassifierFailure `json:"classifier_failure,omitempty"`
	// RequestSeq grows by one for every compile the farm queues for the node.
	RequestSeq uint64 `json:"request_seq"`
	// Requested is the latest compile queued for the node: the inputs the
	// farm wants a catalog for. A catalog or compile status with the same Seq
	// answers it.
	Requested *CompileRequest `json:"requested,omitempty"`
	Catalog   *CatalogRef     `json:"catalog,omitempty"`
	Compile   *CompileStatus  `json:"compile,omitempty"`
	Report    *ReportSummary  `json:"report,omitempty"`
	// ExportsDigest points at the resources the node's catalog exports
	// (@@, a JSON list in SpaceCatalogs; empty when none) and ExportTypes
	// names their types; Collects names the types its catalog collects
	// from other nodes' exports (<<| |>>). The farm keeps these in place of
	// PuppetDB, to recompile collectors when an export changes.
	ExportsDigest Digest   `json:"exports_digest,omitempty"`
	ExportTypes   []string `json:"export_types,omitempty"`
	Collects      []string `json:"collects,omitempty"`
	// Queries are the QueryDigests of the PuppetDB queries the served
	// catalog's compile made (its read record holds the queries and their
	// result digests; the query texts are in SpaceCatalogs by digest),
	// sorted: NodeQuery.Query finds the nodes that made a query.
	Queries []Digest `json:"queries,omitempty"`
	// History holds the node's previous catalogs, newest first (at most
	// HistoryLen), for diffs and rollbacks.
	History []CatalogRef `json:"history,omitempty"`

	// The candidate slot: while a staged release holds the environment's
	// current code back from this node, a catalog of that code is
	// precompiled here and becomes Catalog when the node is released.
	CandidateRequested *CompileRequest `json:"candidate_requested,omitempty"`
	Candidate          *CatalogRef     `json:"candidate,omitempty"`
	CandidateCompile   *CompileStatus  `json:"candidate_compile,omitempty"`
}

// ClassifierFailure records that the external node classifier failed for a
// node at check-in.
type ClassifierFailure struct {
	Error string    `json:"error"`
	At    time.Time `json:"at"`
}

// HistoryLen bounds Node.History.
const HistoryLen = 5

// SlotState is what a node has in one slot: the latest compile queued for
// it (Requested), its latest catalog (Catalog) and the outcome of its
// latest finished compile (Compile). Node.Slot returns it. The pointers
// are the node's own, to read, not to write through: Node.SetCompiled,
// SetCompileStatus and DropCandidate change a slot.
type SlotState struct {
	Requested *CompileRequest
	Catalog   *CatalogRef
	Compile   *CompileStatus
}

// Slot returns what the node has in slot s.
func (n *Node) Slot(s Slot) SlotState {
	if s == SlotCandidate {
		return SlotState{Requested: n.CandidateRequested, Catalog: n.Candidate, Compile: n.CandidateCompile}
	}
	return SlotState{Requested: n.Requested, Catalog: n.Catalog, Compile: n.Compile}
}

// Pending reports whether the slot's latest requested compile has neither
// a catalog nor a finished compile yet.
func (s SlotState) Pending() bool {
	if s.Requested == nil {
		return false
	}
	if s.Catalog != nil && s.Catalog.Seq >= s.Requested.Seq {
		return false
	}
	if s.Compile != nil && s.Compile.Seq >= s.Requested.Seq {
		return false
	}
	return true
}

// Holds reports whether the slot has a catalog with this content (see
// CatalogRef.ContentDigest).
func (s SlotState) Holds(content Digest) bool {
	return s.Catalog != nil && s.Catalog.ContentDigest == content
}

// SetCompiled records a finished compile of slot s: ref becomes the slot's
// catalog and st its compile status. The served slot keeps the catalog it
// replaces in History (see SetCatalog); the candidate slot keeps none.
func (n *Node) SetCompiled(s Slot, ref CatalogRef, st CompileStatus) {
	if s == SlotCandidate {
		n.Candidate = &ref
	} else {
		n.SetCatalog(ref)
	}
	n.SetCompileStatus(s, st)
}

// SetCompileStatus records the outcome of a compile of slot s that leaves
// the slot's catalog as it is, such as a failed one.
func (n *Node) SetCompileStatus(s Slot, st CompileStatus) {
	if s == SlotCandidate {
		n.CandidateCompile = &st
	} else {
		n.Compile = &st
	}
}

// DropCandidate empties the candidate slot: the node was released to the
// code it precompiled, or no release holds code back from it.
func (n *Node) DropCandidate() {
	n.CandidateRequested, n.Candidate, n.CandidateCompile = nil, nil, nil
}

// SetCatalog makes ref the node's catalog, keeping the one it replaces in
// History when their content differs.
func (n *Node) SetCatalog(ref CatalogRef) {
	if old := n.Catalog; old != nil && old.ContentDigest != ref.ContentDigest {
		n.History = append([]CatalogRef{*old}, n.History...)
		if len(n.History) > HistoryLen {
			n.History = n.History[:HistoryLen]
		}
	}
	n.Catalog = &ref
}

// CompileRequest records the inputs of a compile the farm queued for a node.
type CompileRequest struct {
	Seq            uint64    `json:"seq"`
	Environment    string    `json:"environment"`
	CodeID         string    `json:"code_id"`
	FactsDigest    Digest    `json:"facts_digest"`
	RelevantDigest Digest    `json:"relevant_digest"`
	NodeInfo       Digest    `json:"node_info,omitempty"`
	Reason         string    `json:"reason"`
	Lane           Lane      `json:"lane"`
	At             time.Time `json:"at"`
	// Projection digests what the read record ReadsDigest (the slot's
	// catalog's when the request was made) observes in this request's
	// facts, so uploads while the compile is pending are judged by the
	// facts that matter too.
	ReadsDigest Digest `json:"reads_digest,omitempty"`
	Projection  Digest `json:"projection,omitempty"`
	// Changes lists, for ReasonFactsChanged, the reads of the slot's
	// catalog's fact record that observe something else in this
	// request's facts: the first MaxRequestChanges in record order, so
	// operators see which fact cost the compile (broker explain).
	Changes []FactChange `json:"changes,omitempty"`
	// Cause details Reason where the farm knows cheaply what else changed
	// (old and new code_id, node information digest, ...); nil when
	// nothing more is known (a new node, a precompile).
	Cause *RequestCause `json:"cause,omitempty"`
}

// MaxRequestChanges bounds CompileRequest.Changes.
const MaxRequestChanges = 5

// FactChange is one fact read of a catalog's record that observes
// something else in newer facts (see facts.Changes). Old and New are the
// two observations as JSON: the value for kind "value", true/false for
// "hash" and "present", the sorted key list for "keys"; OldMissing or
// NewMissing (with no Old or New) when the path was absent. A value
// longer than facts.MaxChangeValue bytes of JSON is replaced by a JSON
// string giving its length and digest, so a huge fact cannot bloat the
// node record.
type FactChange struct {
	Path       []string        `json:"path"`
	Kind       string          `json:"kind"` // a facts.ReadKind: value, hash, present or keys
	Old        json.RawMessage `json:"old,omitempty"`
	New        json.RawMessage `json:"new,omitempty"`
	OldMissing bool            `json:"old_missing,omitempty"`
	NewMissing bool            `json:"new_missing,omitempty"`
}

// Inputs a RequestCause names.
const (
	CauseEnvironment = "environment"     // the node moved to another environment
	CauseCodeID      = "code_id"         // the code the node is to be served changed
	CauseNodeInfo    = "node_info"       // the digest of trusted data and classification
	CauseRelevant    = "relevant_digest" // the digest of the facts without volatile ones
	CauseQueryResult = "query_result"    // the digest of a PuppetDB query's result
)

// RequestCause says what changed to queue a compile request, beyond fact
// reads: Input (one of the Cause* names, or empty) went from Old to New;
// Note is a few words for operators, such as "no read record; relevant
// facts digest changed".
type RequestCause struct {
	Input string `json:"input,omitempty"`
	Old   string `json:"old,omitempty"`
	New   string `json:"new,omitempty"`
	Note  string `json:"note,omitempty"`
}

// Pending reports whether the node's latest requested compile of its
// served catalog has neither a catalog nor a finished compile yet.
func (n *Node) Pending() bool { return n.Slot(SlotServed).Pending() }

// Environment is the farm's record of one Puppet environment's code.
type Environment struct {
	Name       string    `json:"name"`
	CodeID     string    `json:"code_id"` // digest of the code manifest
	DeployedAt time.Time `json:"deployed_at"`
	Release    *Release  `json:"release,omitempty"`
}

// Release is an environment's staged-release policy (ARM-11). While Hold
// is on, a code deploy does not reach nodes at once: they keep being
// served catalogs of the Stable code, catalogs of the new code are
// precompiled, and nodes get them as they are released (by percentage of
// the fleet, or by name). Releasing all makes the new code the stable one.
type Release struct {
	Hold    bool     `json:"hold"`
	Stable  string   `json:"stable_code_id,omitempty"`
	Percent int      `json:"percent,omitempty"` // 0..100
	Nodes   []string `json:"nodes,omitempty"`
}

// ReleaseBucket places a node in one of 100 buckets, stably: a release to
// P percent releases the nodes in buckets below P.
func ReleaseBucket(certname string) int {
	s := sha256.Sum256([]byte(certname))
	return int(binary.BigEndian.Uint32(s[:4]) % 100)
}

// Released reports whether the release has reached the node.
func (r *Release) Released(certname string) bool {
	if r == nil || !r.Hold || ReleaseBucket(certname) < r.Percent {
		return true
	}
	return slices.Contains(r.Nodes, certname)
}

// TargetCode is the code_id whose catalog the node should be served.
func (e Environment) TargetCode(certname string) string {
	r := e.Release
	if r == nil || !r.Hold || r.Stable == "" || r.Stable == e.CodeID || r.Released(certname) {
		return e.CodeID
	}
	return r.Stable
}

// Clone returns a deep copy of the node: no pointer, slice or raw JSON of
// the copy is shared with n, so either can be changed without the other
// seeing it (record caches hand out clones). TestNodeCloneSharesNothing
// fails when a field is added that Clone does not copy.
func (n Node) Clone() Node {
	c := n
	c.ClassifierFailure = clonePtr(n.ClassifierFailure)
	c.Requested = n.Requested.clone()
	c.Catalog = clonePtr(n.Catalog)
	c.Compile = clonePtr(n.Compile)
	if n.Report != nil {
		r := *n.Report
		r.Metrics = clonePtr(r.Metrics)
		c.Report = &r
	}
	c.ExportTypes = slices.Clone(n.ExportTypes)
	c.Collects = slices.Clone(n.Collects)
	c.Queries = slices.Clone(n.Queries)
	c.History = slices.Clone(n.History)
	c.CandidateRequested = n.CandidateRequested.clone()
	c.Candidate = clonePtr(n.Candidate)
	c.CandidateCompile = clonePtr(n.CandidateCompile)
	return c
}

// clone is a deep copy of the request (nil for nil).
func (r *CompileRequest) clone() *CompileRequest {
	if r == nil {
		return nil
	}
	c := *r
	if r.Changes != nil {
		c.Changes = make([]FactChange, len(r.Changes))
		for i, ch := range r.Changes {
			ch.Path = slices.Clone(ch.Path)
			ch.Old = bytes.Clone(ch.Old)
			ch.New = bytes.Clone(ch.New)
			c.Changes[i] = ch
		}
	}
	c.Cause = clonePtr(r.Cause)
	return &c
}

// clonePtr copies what p points to, for structs of plain values.
func clonePtr[T any](p *T) *T {
	if p == nil {
		return nil
	}
	c := *p
	return &c
}

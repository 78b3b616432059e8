package farm

import (
	"context"
	"fmt"
	"regexp"
	"time"
)

// Presence records which fleet task holds a PCP client's connection, so a
// message that reaches any task finds the one that can deliver it.
type Presence struct {
	URI     string    // pcp://<common name>/<client type>
	Task    string    // the task's name (its inbox)
	Expires time.Time // the record is ignored after this time
}

// PresenceQuery selects the unexpired presence records of one client type
// ("agent"), optionally of one common name, in URI order, a page at a time:
// what an inventory request over the whole fleet reads.
type PresenceQuery struct {
	ClientType string // required
	CommonName string // "" for every common name
	After      string // PresencePage.Next of the previous page; "" first
	Limit      int    // DefaultNodePage when 0, at most MaxNodePage
}

// PresencePage is one page of a PresenceQuery.
type PresencePage struct {
	Records []Presence
	Next    string // "" when there are no more
}

// PresenceStore keeps which task holds each PCP client.
//
// SetPresence records p, replacing any record for p.URI (the newest
// connection wins, wherever it is). ClearPresence removes the record of uri
// only while it names task: a client that reconnected to another task in
// the meantime keeps its new record (no error either way). LookupPresence
// returns the record of uri, or ErrNotFound when there is none or it has
// expired. QueryPresence answers from an index by client type (no driver
// reads every record) and returns only unexpired records; a page may hold
// fewer records than the limit while Next is set. ErrInvalid for a URI that is
// not pcp://<common name>/<client type> (ValidatePCPURI), a record without a task or expiry, or a query
// without a client type. Safe for concurrent use; a SetPresence that
// returned is seen by every later LookupPresence (drivers with eventually
// consistent indexes may show it to QueryPresence within a second).
type PresenceStore interface {
	SetPresence(ctx context.Context, p Presence) error
	ClearPresence(ctx context.Context, uri, task string) error
	LookupPresence(ctx context.Context, uri string) (Presence, error)
	QueryPresence(ctx context.Context, q PresenceQuery) (PresencePage, error)
}

// Inbox carries PCP messages between the fleet's tasks: each task receives
// from its own inbox what other tasks post to it for the clients it holds.
//
// Post stores msg (an encoded message, at most MaxInboxMessage bytes, else
// ErrInvalid) for task and returns once it is durable; posting to a task
// whose inbox does not exist (never opened, or closed) returns ErrNotFound.
// Open creates task's inbox (idempotent) before Receive may be called.
// Receive blocks until at least one message is waiting for task, or ctx
// ends (ctx.Err()), and returns up to 10 of them, each exactly once in the
// absence of failures (a driver may deliver a message twice after a crash;
// PCP messages carry ids). Close removes the inbox and what is in it.
// Messages older than a minute may be dropped: PCP messages expire in
// seconds. Safe for concurrent use, one Receive per task at a time.
type Inbox interface {
	Open(ctx context.Context, task string) error
	Post(ctx context.Context, task string, msg []byte) error
	Receive(ctx context.Context, task string) ([][]byte, error)
	Close(ctx context.Context, task string) error
}

// MaxInboxMessage caps a message posted to an inbox (an SQS message's
// limit, 256 KiB, less room for its encoding). Larger messages are
// delivered only to clients on the task that received them.
const MaxInboxMessage = 192 << 10

// Job states, and the states of a node in a job.
const (
	JobRunning  = "running"  // nodes are still queued or running
	JobFinished = "finished" // every node finished
	JobFailed   = "failed"   // finished, and at least one node failed or was unreachable
	JobStopped  = "stopped"  // the runner stopped before the end (restart): see the nodes

	JobNodeQueued      = "queued"      // not sent yet (concurrency limit)
	JobNodeRunning     = "running"     // the run request was sent; no final answer yet
	JobNodeFinished    = "finished"    // the run ended with exit code 0 or 2
	JobNodeFailed      = "failed"      // the run failed (exit code, error answer, timeout)
	JobNodeUnreachable = "unreachable" // no PXP agent of the node was connected
)

// RunJob is an on-demand Puppet run of a set of nodes through PCP (PXP's
// pxp-module-puppet run), as `broker job run` or `broker release --run`
// start it.
type RunJob struct {
	ID          string        `json:"id"`
	Created     time.Time     `json:"created"`
	Updated     time.Time     `json:"updated"`
	State       string        `json:"state"`
	Environment string        `json:"environment,omitempty"` // --environment, or the release's
	Release     string        `json:"release,omitempty"`     // the release that started it, if any
	Noop        bool          `json:"noop,omitempty"`
	Concurrency int           `json:"concurrency"`
	Timeout     time.Duration `json:"timeout_ns"`
	Owner       string        `json:"owner,omitempty"`  // who started it (operator certname, "loopback")
	Runner      string        `json:"runner,omitempty"` // the task that runs it
	// Counts of nodes per RunJobNode state; Total is their sum.
	Total  int            `json:"total"`
	Counts map[string]int `json:"counts,omitempty"`
}

// RunJobNode is one node's part in a job.
type RunJobNode struct {
	Job             string    `json:"job"`
	Node            string    `json:"node"`
	State           string    `json:"state"`
	Updated         time.Time `json:"updated"`
	TransactionID   string    `json:"transaction_id,omitempty"`
	ExitCode        *int      `json:"exit_code,omitempty"`
	Status          string    `json:"status,omitempty"`           // the run's status (unchanged, changed, failed)
	ReportURL       string    `json:"report,omitempty"`           // link to the run's report, when known
	TransactionUUID string    `json:"transaction_uuid,omitempty"` // the agent's run id (report lookup)
	Error           string    `json:"error,omitempty"`
}

// RunJobQuery pages through jobs, newest first.
type RunJobQuery struct {
	After string // RunJobPage.Next of the previous page; "" first
	Limit int    // DefaultNodePage when 0, at most MaxNodePage
}

// RunJobPage is one page of jobs.
type RunJobPage struct {
	Jobs []RunJob
	Next string
}

// RunJobNodeQuery pages through one job's nodes in certname order.
type RunJobNodeQuery struct {
	Job   string // required
	After string
	Limit int // DefaultNodePage when 0, at most MaxNodePage
}

// RunJobNodePage is one page of a job's nodes.
type RunJobNodePage struct {
	Nodes []RunJobNode
	Next  string
}

var jobIDRE = regexp.MustCompile(`^[0-9A-Za-z][0-9A-Za-z_-]{0,63}$`)

// ValidateJobID returns an ErrInvalid error for an id that is not 1–64
// letters, digits, '-' or '_'.
func ValidateJobID(id string) error {
	if !jobIDRE.MatchString(id) {
		return fmt.Errorf("job id %q must be 1-64 letters, digits, '-' or '_': %w", id, ErrInvalid)
	}
	return nil
}

// RunJobStore keeps jobs and their nodes' results, so that a job outlives
// the task that ran it.
//
// CreateJob stores job and one RunJobNode per node (state queued) and returns
// ErrConflict when the id exists, ErrInvalid for a bad id or certname;
// drivers write the nodes in batches and need not be atomic, but a job is
// listed only once its nodes are stored. UpdateJob is an atomic
// read-modify-write of the job record as NodeStore.UpdateNode (fn may run
// more than once; an error from fn writes nothing). UpdateJobNode is the
// same for one node of a job (ErrNotFound when the node is not part of it).
// GetJob returns ErrNotFound for an unknown id. ListJobs returns jobs
// newest first (by Created, then id), ListJobNodes a job's nodes in
// certname order, in pages, without reading every job or node. Safe for
// concurrent use.
type RunJobStore interface {
	CreateJob(ctx context.Context, job RunJob, nodes []string) error
	GetJob(ctx context.Context, id string) (RunJob, error)
	UpdateJob(ctx context.Context, id string, fn func(*RunJob) error) (RunJob, error)
	UpdateJobNode(ctx context.Context, id, node string, fn func(*RunJobNode) error) (RunJobNode, error)
	ListJobs(ctx context.Context, q RunJobQuery) (RunJobPage, error)
	ListJobNodes(ctx context.Context, q RunJobNodeQuery) (RunJobNodePage, error)
}

var pcpURIRE = regexp.MustCompile(`^pcp://[^/*\s]*/[^/*\s]+$`)

// ValidatePCPURI returns an ErrInvalid error unless uri is
// pcp://<common name>/<client type> without wildcards (the broker's own
// URI, pcp:///server, has an empty common name).
func ValidatePCPURI(uri string) error {
	if len(uri) > 512 || !pcpURIRE.MatchString(uri) {
		return fmt.Errorf("PCP URI %q is not pcp://<common name>/<client type>: %w", uri, ErrInvalid)
	}
	return nil
}

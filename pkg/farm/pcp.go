package farm

import (
	"context"
	"fmt"
	"regexp"
	"strings"
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
// connection wins, wherever it is); a record whose Expires has passed is
// accepted and then ignored by every read. ClearPresence removes the record
// of uri only while it names task: a client that reconnected to another task
// in the meantime keeps its new record (no error either way, none when there
// is no record). LookupPresence returns the record of uri, or ErrNotFound
// when there is none or it has expired. QueryPresence answers from an index
// by client type (no driver reads every record) and returns only unexpired
// records, in URI order, at most PageSize of them; a page may hold fewer
// records than the limit (none, even) while Next is set, and Next is "" on
// the last page. Expiry is judged against the driver's clock (time.Now).
// Times keep their instant to the nanosecond.
//
// ErrInvalid (CheckSetPresence, CheckClearPresence, CheckLookupPresence,
// CheckQueryPresence) for a URI that is not pcp://<common name>/<client
// type> (ValidatePCPURI), a record or a ClearPresence without a task, a
// record without an expiry, or a query without a client type or with a
// limit out of range. A call whose ctx has ended returns an error wrapping
// ctx.Err(), and SetPresence and ClearPresence then change nothing. Other
// failures of the backend are returned wrapped (ErrTransient where the
// driver can tell).
//
// Safe for concurrent use, across processes for shared backends; a
// SetPresence or ClearPresence that returned is seen by every later
// LookupPresence (drivers with eventually consistent indexes may show it to
// QueryPresence only within a second).
type PresenceStore interface {
	SetPresence(ctx context.Context, p Presence) error
	ClearPresence(ctx context.Context, uri, task string) error
	LookupPresence(ctx context.Context, uri string) (Presence, error)
	QueryPresence(ctx context.Context, q PresenceQuery) (PresencePage, error)
}

// Inbox carries PCP messages between the fleet's tasks: each task receives
// from its own inbox what other tasks post to it for the clients it holds.
// A task name is 1-256 bytes (ValidateInboxTask); drivers may map it to a
// backend name of their own (an SQS queue), but distinct task names name
// distinct inboxes.
//
// Open creates task's inbox (idempotent; an open inbox keeps its messages)
// before Receive may be called. Post stores msg (an encoded message, 1 to
// MaxInboxMessage bytes, else ErrInvalid) for task and returns once it is
// durable; posting to a task whose inbox does not exist (never opened, or
// closed) returns ErrNotFound. Receive blocks until at least one message is
// waiting for task, or ctx ends (an error wrapping ctx.Err()), and returns 1
// to 10 of them in no promised order, each exactly once in the absence of
// failures (a driver may deliver a message twice after a crash; PCP messages
// carry ids); ErrNotFound when task has no inbox. Close removes the inbox and
// what is in it (no error when there is none); a Receive waiting on it
// returns ErrNotFound, possibly only when the driver's long poll ends (20 s
// for SQS): cancel its ctx first. Reopening a closed task's inbox is not
// promised to work at once (SQS refuses a deleted queue's name for 60 s):
// task names are not reused. Messages older than a minute may be dropped:
// PCP messages expire in seconds. ErrInvalid for an invalid task name
// (CheckInboxOpen, CheckInboxPost, CheckInboxReceive, CheckInboxClose). A
// call whose ctx has ended returns an error wrapping ctx.Err(), and Open,
// Post and Close then change nothing.
//
// Safe for concurrent use, across processes for shared backends, one
// Receive per task at a time.
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
// CreateJob stores job as given (the caller sets State, Total and Counts:
// the store never derives them) and one RunJobNode per node {Job: job.ID,
// Node: node, State: JobNodeQueued, Updated: job.Created}. It returns
// ErrConflict when the id exists (of two concurrent creations of one id
// exactly one succeeds and the other writes nothing the winner reads), and
// ErrInvalid for a job that fails RunJob.Validate (bad id, no Created) or a
// node list with an invalid or repeated certname; an empty node list is
// allowed. Drivers write the nodes in batches and need not be atomic, but a
// job is listed by ListJobs only once its nodes are stored.
//
// UpdateJob is an atomic read-modify-write of the job record as
// NodeStore.UpdateNode: fn gets a copy of the stored record, may run more
// than once, and an error from fn writes nothing and is returned as is. It
// returns ErrNotFound for an unknown id (it never creates a job, and does
// not call fn), and ErrInvalid when fn changes ID or Created. UpdateJobNode is the
// same for one node of a job: ErrNotFound when the job does not exist or the
// node is not part of it, ErrInvalid when fn changes Job or Node.
//
// GetJob returns ErrNotFound for an unknown id and ErrInvalid for a bad one.
// ListJobs returns jobs newest first (Created descending, then ID
// descending), ListJobNodes a job's nodes in certname order (an empty page
// for an unknown job), in pages of at most the query's PageSize, without
// reading every job or node. Next is "" on the last page; a page may be
// shorter than the limit while Next is set. A ListJobs After is opaque: only
// "" or a Next returned by the same store (anything else may be ErrInvalid);
// a ListJobNodes After is a certname (only greater ones follow). Queries
// with a limit out of range, or ListJobNodes without a valid job id, are
// ErrInvalid. Every record returned is the caller's own copy. Times
// keep their instant to the nanosecond. The checks of the arguments are
// CheckCreateJob, CheckGetJob, CheckUpdateJob (and CheckUpdatedJob of
// fn's result), CheckUpdateJobNode (CheckUpdatedJobNode), CheckListJobs
// and CheckListJobNodes. A call whose ctx has ended returns an error
// wrapping ctx.Err(), and CreateJob, UpdateJob and UpdateJobNode then
// change nothing (and do not call fn).
//
// A driver may forget an ended job (its record and its nodes') some time
// after it ended (dynamostate: JobRetention, 30 days), never a running
// one.
//
// Safe for concurrent use, across processes for shared backends.
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

// Validate returns an ErrInvalid error for a record SetPresence refuses:
// an invalid URI, no task (ValidateInboxTask), no expiry.
func (p Presence) Validate() error {
	if err := ValidatePCPURI(p.URI); err != nil {
		return fmt.Errorf("presence: %w", err)
	}
	if err := ValidateInboxTask(p.Task); err != nil {
		return fmt.Errorf("presence of %s: %w", p.URI, err)
	}
	if p.Expires.IsZero() {
		return fmt.Errorf("presence of %s: no expiry: %w", p.URI, ErrInvalid)
	}
	return nil
}

// ClientType returns the client type of p.URI, a valid URI
// (ValidatePCPURI): pcp://<common name>/<client type>.
func (p Presence) ClientType() string {
	_, t := splitPCPURI(p.URI)
	return t
}

// CommonName returns the common name of p.URI (see ClientType).
func (p Presence) CommonName() string {
	cn, _ := splitPCPURI(p.URI)
	return cn
}

func splitPCPURI(uri string) (cn, clientType string) {
	rest := strings.TrimPrefix(uri, "pcp://")
	i := strings.LastIndexByte(rest, '/')
	if i < 0 {
		return "", rest
	}
	return rest[:i], rest[i+1:]
}

// Validate returns an ErrInvalid error for a query QueryPresence refuses:
// no client type, a client type or common name that cannot be part of a
// PCP URI, a limit out of range.
func (q PresenceQuery) Validate() error {
	if q.ClientType == "" {
		return fmt.Errorf("presence query: no client type: %w", ErrInvalid)
	}
	if err := ValidatePCPURI("pcp://" + q.CommonName + "/" + q.ClientType); err != nil {
		return fmt.Errorf("presence query: %w", err)
	}
	if q.Limit < 0 || q.Limit > MaxNodePage {
		return fmt.Errorf("presence query: limit %d is not between 0 and %d: %w", q.Limit, MaxNodePage, ErrInvalid)
	}
	return nil
}

// PageSize is the query's Limit with the default applied.
func (q PresenceQuery) PageSize() int { return pageSize(q.Limit) }

// Matches reports whether p is what q selects, expiry aside.
func (q PresenceQuery) Matches(p Presence) bool {
	cn, t := splitPCPURI(p.URI)
	return t == q.ClientType && (q.CommonName == "" || cn == q.CommonName) && p.URI > q.After
}

func pageSize(limit int) int {
	if limit <= 0 {
		return DefaultNodePage
	}
	return min(limit, MaxNodePage)
}

// ValidateInboxTask returns an ErrInvalid error for a task name that is
// empty or longer than 256 bytes.
func ValidateInboxTask(task string) error {
	if task == "" || len(task) > 256 {
		return fmt.Errorf("task name %q must be 1-256 bytes: %w", task, ErrInvalid)
	}
	return nil
}

// ValidateInboxMessage returns an ErrInvalid error for a message Post
// refuses: empty or larger than MaxInboxMessage.
func ValidateInboxMessage(msg []byte) error {
	if len(msg) == 0 || len(msg) > MaxInboxMessage {
		return fmt.Errorf("inbox message of %d bytes: must be 1-%d: %w", len(msg), MaxInboxMessage, ErrInvalid)
	}
	return nil
}

// Validate returns an ErrInvalid error for a job CreateJob refuses: an
// invalid id (ValidateJobID) or no Created time.
func (j *RunJob) Validate() error {
	if err := ValidateJobID(j.ID); err != nil {
		return err
	}
	if j.Created.IsZero() {
		return fmt.Errorf("job %s: no created time: %w", j.ID, ErrInvalid)
	}
	return nil
}

// ValidateJobNodes returns an ErrInvalid error for a node list CreateJob
// refuses: an invalid or repeated certname.
func ValidateJobNodes(nodes []string) error {
	seen := make(map[string]struct{}, len(nodes))
	for _, n := range nodes {
		if err := ValidateCertname(n); err != nil {
			return fmt.Errorf("job node: %w", err)
		}
		if _, ok := seen[n]; ok {
			return fmt.Errorf("job node %s is listed twice: %w", n, ErrInvalid)
		}
		seen[n] = struct{}{}
	}
	return nil
}

// Validate returns an ErrInvalid error for a limit out of range.
func (q RunJobQuery) Validate() error {
	if q.Limit < 0 || q.Limit > MaxNodePage {
		return fmt.Errorf("job query: limit %d is not between 0 and %d: %w", q.Limit, MaxNodePage, ErrInvalid)
	}
	return nil
}

// PageSize is the query's Limit with the default applied.
func (q RunJobQuery) PageSize() int { return pageSize(q.Limit) }

// Validate returns an ErrInvalid error for an invalid job id or a limit
// out of range.
func (q RunJobNodeQuery) Validate() error {
	if err := ValidateJobID(q.Job); err != nil {
		return fmt.Errorf("job node query: %w", err)
	}
	if q.Limit < 0 || q.Limit > MaxNodePage {
		return fmt.Errorf("job node query: limit %d is not between 0 and %d: %w", q.Limit, MaxNodePage, ErrInvalid)
	}
	return nil
}

// PageSize is the query's Limit with the default applied.
func (q RunJobNodeQuery) PageSize() int { return pageSize(q.Limit) }

// QueuedNode is the record CreateJob stores for node of j: queued, as of
// the job's creation.
func (j *RunJob) QueuedNode(node string) RunJobNode {
	return RunJobNode{Job: j.ID, Node: node, State: JobNodeQueued, Updated: j.Created}
}

// The checks every PresenceStore and Inbox method makes before it reaches
// its backend, so that each driver refuses the same calls in the same
// words: ctx's error once it is done, ErrInvalid for arguments the
// contract refuses (see checks.go).

// CheckSetPresence checks a SetPresence of p (Presence.Validate).
func CheckSetPresence(ctx context.Context, p *Presence) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("set presence of %s: %w", p.URI, err)
	}
	if err := p.Validate(); err != nil {
		return fmt.Errorf("set presence: %w", err)
	}
	return nil
}

// CheckClearPresence checks a ClearPresence of uri by task
// (ValidatePCPURI, ValidateInboxTask).
func CheckClearPresence(ctx context.Context, uri, task string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("clear presence of %s: %w", uri, err)
	}
	if err := ValidatePCPURI(uri); err != nil {
		return fmt.Errorf("clear presence: %w", err)
	}
	if err := ValidateInboxTask(task); err != nil {
		return fmt.Errorf("clear presence of %s: %w", uri, err)
	}
	return nil
}

// CheckLookupPresence checks a LookupPresence of uri (ValidatePCPURI).
func CheckLookupPresence(ctx context.Context, uri string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("look up presence of %s: %w", uri, err)
	}
	if err := ValidatePCPURI(uri); err != nil {
		return fmt.Errorf("look up presence: %w", err)
	}
	return nil
}

// CheckQueryPresence checks a QueryPresence of q (PresenceQuery.Validate).
func CheckQueryPresence(ctx context.Context, q PresenceQuery) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("query presence of %s: %w", q.ClientType, err)
	}
	if err := q.Validate(); err != nil {
		return fmt.Errorf("query presence: %w", err)
	}
	return nil
}

// CheckInboxOpen checks an Inbox.Open of task (ValidateInboxTask).
func CheckInboxOpen(ctx context.Context, task string) error {
	return checkInboxTask(ctx, "open inbox", task)
}

// CheckInboxPost checks an Inbox.Post of msg to task (ValidateInboxTask,
// ValidateInboxMessage).
func CheckInboxPost(ctx context.Context, task string, msg []byte) error {
	if err := checkInboxTask(ctx, "post to inbox", task); err != nil {
		return err
	}
	if err := ValidateInboxMessage(msg); err != nil {
		return fmt.Errorf("post to inbox %s: %w", task, err)
	}
	return nil
}

// CheckInboxReceive checks an Inbox.Receive from task
// (ValidateInboxTask). A Receive that waits checks its ctx again each time
// it wakes.
func CheckInboxReceive(ctx context.Context, task string) error {
	return checkInboxTask(ctx, "receive from inbox", task)
}

// CheckInboxClose checks an Inbox.Close of task (ValidateInboxTask).
func CheckInboxClose(ctx context.Context, task string) error {
	return checkInboxTask(ctx, "close inbox", task)
}

func checkInboxTask(ctx context.Context, op, task string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%s %s: %w", op, task, err)
	}
	if err := ValidateInboxTask(task); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	return nil
}

// The checks every RunJobStore method makes before it reaches its backend,
// so that each driver refuses the same calls in the same words: ctx's
// error once it is done, ErrInvalid for arguments the contract refuses.

// CheckCreateJob checks a CreateJob of job and nodes: RunJob.Validate and
// ValidateJobNodes.
func CheckCreateJob(ctx context.Context, job *RunJob, nodes []string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("create job %s: %w", job.ID, err)
	}
	if err := job.Validate(); err != nil {
		return fmt.Errorf("create job: %w", err)
	}
	if err := ValidateJobNodes(nodes); err != nil {
		return fmt.Errorf("create job %s: %w", job.ID, err)
	}
	return nil
}

// CheckGetJob checks a GetJob of id (ValidateJobID).
func CheckGetJob(ctx context.Context, id string) error {
	return checkJobID(ctx, "get job", id)
}

// CheckUpdateJob checks an UpdateJob of id (ValidateJobID).
func CheckUpdateJob(ctx context.Context, id string) error {
	return checkJobID(ctx, "update job", id)
}

func checkJobID(ctx context.Context, op, id string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%s %s: %w", op, id, err)
	}
	if err := ValidateJobID(id); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	return nil
}

// CheckUpdateJobNode checks an UpdateJobNode of node in job id
// (ValidateJobID, ValidateCertname).
func CheckUpdateJobNode(ctx context.Context, id, node string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("update node %s of job %s: %w", node, id, err)
	}
	if err := ValidateJobID(id); err != nil {
		return fmt.Errorf("update job node: %w", err)
	}
	if err := ValidateCertname(node); err != nil {
		return fmt.Errorf("update node of job %s: %w", id, err)
	}
	return nil
}

// CheckListJobs checks a ListJobs of q (RunJobQuery.Validate); whether
// q.After is a Next of the driver's is the driver's to check.
func CheckListJobs(ctx context.Context, q RunJobQuery) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("list jobs: %w", err)
	}
	if err := q.Validate(); err != nil {
		return fmt.Errorf("list jobs: %w", err)
	}
	return nil
}

// CheckListJobNodes checks a ListJobNodes of q (RunJobNodeQuery.Validate).
func CheckListJobNodes(ctx context.Context, q RunJobNodeQuery) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("list nodes of job %s: %w", q.Job, err)
	}
	if err := q.Validate(); err != nil {
		return fmt.Errorf("list job nodes: %w", err)
	}
	return nil
}

// CheckUpdatedJob checks what UpdateJob's fn left in j, the record of job
// id created at created: fn may not change ID or Created (ErrInvalid). The
// driver calls it after fn and writes nothing when it fails.
func CheckUpdatedJob(id string, created time.Time, j *RunJob) error {
	if j.ID != id || !j.Created.Equal(created) {
		return fmt.Errorf("update job %s: fn changed its id or created time: %w", id, ErrInvalid)
	}
	return nil
}

// CheckUpdatedJobNode checks what UpdateJobNode's fn left in n, the record
// of node in job id: fn may not change Job or Node (ErrInvalid).
func CheckUpdatedJobNode(id, node string, n *RunJobNode) error {
	if n.Job != id || n.Node != node {
		return fmt.Errorf("update node %s of job %s: fn changed its job or node: %w", node, id, ErrInvalid)
	}
	return nil
}

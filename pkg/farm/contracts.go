package farm

import (
	"context"
	"fmt"
	"regexp"
	"time"
)

// Space names a part of the content store. Each space is content addressed
// and separate from the others (drivers keep them under their own S3 key
// prefixes, directories).
type Space string

const (
	SpaceCatalogs Space = "catalogs" // catalog JSON and its gzip form
	SpaceContent  Space = "content"  // file content referenced by catalogs and code
	SpaceFacts    Space = "facts"    // fact documents
	SpaceReports  Space = "reports"  // agent reports
	SpaceCode     Space = "code"     // code manifests
	SpaceNodeInfo Space = "nodeinfo" // nodes' trusted data and classifications
)

var spaceRE = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,63}$`)

// Validate returns an ErrInvalid error for a space name that is not a plain
// lowercase name (drivers use spaces as directory names and key prefixes).
func (s Space) Validate() error {
	if !spaceRE.MatchString(string(s)) {
		return fmt.Errorf("content space %q must be lowercase letters, digits, '-' or '_': %w", s, ErrInvalid)
	}
	return nil
}

// ValidateAddress returns an ErrInvalid error unless space is valid and d
// is a SHA-256 hex digest: the check every content store makes on Get/Has.
func ValidateAddress(space Space, d Digest) error {
	if err := space.Validate(); err != nil {
		return err
	}
	if !d.Valid() {
		return fmt.Errorf("digest %q is not a lowercase hex sha256: %w", d, ErrInvalid)
	}
	return nil
}

// ContentStore keeps immutable blobs addressed by the SHA-256 of their bytes.
//
// Put stores a copy of data (empty, or as large as the caller holds in
// memory) in space and returns its digest, DigestOf(data). It is
// idempotent: putting bytes already there succeeds and returns the same
// digest. Get returns the bytes put under d in space, verified against d:
// ErrNotFound for a digest never put in that space, ErrInvalid for stored
// bytes that no longer hash to d (corruption; the error names the object).
// Has reports whether space holds d, without reading the bytes (a missing
// blob is false, not an error). Spaces are separate: a blob is found only
// in the space it was put in, and the same bytes may be put in several.
// The store keeps its own copy: changing a slice passed to Put or returned
// by Get changes nothing stored.
//
// ErrInvalid (CheckContentPut, CheckContentGet, CheckContentHas) for a
// space that fails Space.Validate, and, in Get and Has, a digest that is
// not a lowercase hex SHA-256 (Digest.Valid). A call whose ctx has ended
// returns an error wrapping ctx.Err(), and Put then stores nothing.
//
// Safe for concurrent use, across processes for shared backends; a Put
// that returned is visible to every later Get and Has, from any goroutine.
type ContentStore interface {
	Put(ctx context.Context, space Space, data []byte) (Digest, error)
	Get(ctx context.Context, space Space, d Digest) ([]byte, error)
	Has(ctx context.Context, space Space, d Digest) (bool, error)
}

// NodeStore keeps one record per node, keyed by its certname.
//
// UpdateNode is an atomic read-modify-write: fn sees the current record (a
// zero Node with Certname set when there is none) and changes it in place; if
// fn returns an error nothing is written (a node without a record stays
// without one) and UpdateNode returns that error as is. Drivers with
// optimistic concurrency may call fn more than once, so fn must not have
// side effects; concurrent UpdateNodes of one node never lose each other's
// changes. This is how the farm moves a catalog pointer only forward: fn
// returns ErrConflict when the stored sequence is newer. fn may not change
// Certname: UpdateNode then writes nothing and returns ErrInvalid
// (CheckUpdatedNode). It returns the record as written. GetNode returns
// ErrNotFound for an unknown node. Every field of a record is kept (times
// to the nanosecond), and every record returned is the caller's own copy.
//
// RecordReport keeps sum as the node's latest report summary in a place of
// its own beside the record, with one write that reads nothing first:
// RecordReport neither reads nor rewrites the record, and UpdateNode
// neither reads nor rewrites the recorded summary, so the two never
// conflict. The newer report wins: a sum older (by At) than the summary
// RecordReport last kept for the node is not kept (ErrConflict); one as
// old replaces it. It returns the summary it replaced (nil for the node's
// first) and keeps nothing for a node without a record (ErrNotFound) or
// for a sum without a time (ErrInvalid, as for an invalid certname). The
// summary it returns, and those reads return, are the caller's own copies.
// Every read of a record (GetNode, QueryNodes) returns as Report the newer
// of the record's own Report (as UpdateNode last wrote it) and the recorded
// summary, the recorded one when they are as old; what UpdateNode's fn
// sees as Report may be either (drivers differ), and whatever fn leaves
// there is written to the record as any other field.
//
// QueryNodes answers a NodeQuery (ErrInvalid for a malformed one) from an
// index the driver keeps beside the records (see Node.IndexEntries): the
// nodes of an environment, or those of them that export or collect a
// type, in certname order, at most q.PageSize() per page, and NodePage.Next
// to continue from. No driver reads every record to answer it. Every record
// returned matches the query as it was read; a page may hold fewer nodes
// than the limit (even none) while Next is set, when the driver skipped
// index entries that no longer match. A record written by an UpdateNode
// that returned is found under its new entries and no longer under its old
// ones: at once in the embedded drivers, after the index catches up (well
// under a second) in drivers with eventually consistent indexes (DynamoDB
// global secondary indexes). Records without an environment are in no index.
//
// ErrInvalid (CheckGetNode, CheckUpdateNode, CheckRecordReport,
// CheckQueryNodes) for a certname that fails ValidateCertname (UpdateNode
// then does not call fn), a summary without a time, or a query that fails
// NodeQuery.Validate. A call whose ctx has ended returns an error wrapping
// ctx.Err(), and UpdateNode and RecordReport then write nothing. Safe for
// concurrent use, across processes for shared backends.
type NodeStore interface {
	GetNode(ctx context.Context, certname string) (Node, error)
	QueryNodes(ctx context.Context, q NodeQuery) (NodePage, error)
	UpdateNode(ctx context.Context, certname string, fn func(*Node) error) (Node, error)
	RecordReport(ctx context.Context, certname string, sum ReportSummary) (*ReportSummary, error)
}

// EnvironmentStore records which code snapshot each environment runs.
//
// PutEnvironment replaces the record of env.Name with env (the last put
// wins), every field kept (times to the nanosecond). GetEnvironment returns the record of name, ErrNotFound for an
// environment never put. ListEnvironments returns every record, each name
// once, in no promised order (the drivers here sort by name).
//
// ErrInvalid (CheckGetEnvironment, CheckPutEnvironment) for a name that
// fails ValidateEnvironment; nothing is stored. A call whose ctx has ended
// returns an error wrapping ctx.Err(), and PutEnvironment then writes
// nothing. Safe for concurrent use, across processes for shared backends.
type EnvironmentStore interface {
	GetEnvironment(ctx context.Context, name string) (Environment, error)
	ListEnvironments(ctx context.Context) ([]Environment, error)
	PutEnvironment(ctx context.Context, env Environment) error
}

// Delivery is one job handed to a worker.
type Delivery struct {
	Job
	ID       string // the queue's identity for this delivery (receipt handle)
	Attempts int    // how many times this job has been delivered, this one included
}

// QueueStats describes the backlog of one lane.
type QueueStats struct {
	Lane      Lane
	Depth     int           // jobs waiting (not in flight)
	InFlight  int           // jobs handed out and not yet acknowledged
	OldestAge time.Duration // age of the oldest waiting job; 0 when empty
}

// Queue carries compile jobs from intake to workers, at least once, in two
// lanes: urgent (new nodes, changed facts) before bulk (code deploys).
//
// Enqueue stores job durably before it returns; a job with a zero
// EnqueuedAt gets the time of the Enqueue. It returns ErrInvalid, and
// stores nothing, for a job that fails Job.Validate (an empty or invalid
// certname, a lane other than LaneUrgent and LaneBulk).
//
// Receive blocks until a job is waiting or ctx ends, and hands the job out
// as a Delivery: the job with every field as enqueued (times to the
// nanosecond), a non-empty ID no other delivery had, and Attempts, 1 on
// the first delivery and one more on each later one. A waiting urgent job
// is handed out before any waiting bulk job, whatever their ages; within a
// lane no order is promised. A Receive blocked on an empty queue returns a job
// enqueued meanwhile (SQS: a bulk job within its long poll, a second by
// default). When ctx ends Receive returns an error wrapping ctx.Err()
// (context.Canceled, context.DeadlineExceeded), and a Receive whose ctx
// ended takes no job: the next Receive gets it as its first delivery.
//
// A delivery stays in flight until Ack (the job is done, successfully or
// for good, and removed) or Retry (the job waits again, handed out no
// sooner than after has passed; after <= 0 is at once, and a driver may cut
// a long delay to its limit, SQS's 12 hours) finishes it. A delivery that
// is neither acked nor retried is handed out again after the driver's
// visibility timeout. A job handed out again, after Retry or a timeout,
// comes with the same fields, a new ID and Attempts one more; short of
// that, no job is delivered twice. Ack and Retry return ErrInvalid for a
// delivery that is not one Receive returned: no ID, or a lane other than
// the two. Of a delivery no longer in flight (acked or retried already,
// timed out, never handed out), drivers that track deliveries (the
// embedded queues; farmtest.QueueCaps.FinishedDeliveryIsNotFound) return
// ErrNotFound; the others (SQS) may succeed without effect.
//
// Stats returns one QueueStats per lane, urgent first: Depth counts the
// waiting jobs, InFlight the unfinished deliveries, and OldestAge is the
// age by its EnqueuedAt of the lane's oldest waiting job (0 for a lane
// without one). An acked job counts nowhere. A retried job waiting out its
// delay counts in Depth, or in InFlight in drivers that hide it until then
// (SQS; farmtest.QueueCaps.RetriedCountsAsInFlight). A driver that cannot
// tell the oldest job's age reports 0 (SQS, where it is the CloudWatch
// metric ApproximateAgeOfOldestMessage; farmtest.QueueCaps.NoOldestAge).
// SQS's counts are approximate and, on AWS, up to a minute late.
//
// Drivers that can (the embedded queues; farmtest.QueueCaps.Collapses)
// keep one waiting job per Job.Key (node and slot): a job enqueued while
// another of its key waits (a job waiting again after Retry or a timeout
// included) merges with it into one delivery, carrying the fields of the
// job with the higher Seq (of the later enqueued, for equal Seqs), the
// more urgent of the two lanes and the older of the two EnqueuedAt. They
// (farmtest.QueueCaps.NodeExclusive) also never hand out a job of a key
// while another of that key is in flight, until that delivery is acked,
// retried or timed out, and hold nothing else back meanwhile. Jobs
// of different keys (two nodes, or one node's two slots) never merge nor
// wait for each other. The other drivers (SQS) deliver every job enqueued
// and rely on the node store's sequence checks to make a duplicate or
// stale compile harmless.
//
// Any method whose ctx has ended returns an error wrapping ctx.Err(), and
// Enqueue, Ack and Retry then change nothing. Safe for concurrent use by
// many producers and consumers, across processes for shared backends:
// every job enqueued is delivered.
type Queue interface {
	Enqueue(ctx context.Context, job Job) error
	Receive(ctx context.Context) (Delivery, error)
	Ack(ctx context.Context, d Delivery) error
	Retry(ctx context.Context, d Delivery, after time.Duration) error
	Stats(ctx context.Context) ([]QueueStats, error)
}

// Certificate states in a CA.
const (
	CertRequested = "requested"
	CertSigned    = "signed"
	CertRevoked   = "revoked"
)

// CertStatus describes one certname known to a CA.
type CertStatus struct {
	Certname    string    `json:"name"`
	State       string    `json:"state"`
	Serial      string    `json:"serial,omitempty"` // hex
	Fingerprint string    `json:"fingerprint"`      // SHA-256 of the DER, colon separated
	DNSAltNames []string  `json:"dns_alt_names,omitempty"`
	NotAfter    time.Time `json:"not_after,omitempty"`
}

// CA is a Puppet certificate authority as agents and operators use it.
//
// Certificates, requests and the CRL are PEM. SubmitCSR returns ErrInvalid
// when the request is malformed or its CN does not match certname, and
// ErrConflict when a signed certificate already exists for certname; it signs
// at once when the CA's autosign policy allows. Certificate and
// CertificateRequest return ErrNotFound when there is none. Sign and Revoke
// return ErrNotFound for an unknown certname. Safe for concurrent use.
//
// A request for Puppet's authorization extensions (OIDs under
// 1.3.6.1.4.1.34380.1.3), pp_cli_auth (…1.3.39, which makes its holder an
// operator) above all, is never signed by autosign unless the CA is set to
// allow them, and pp_cli_auth never is: SubmitCSR stores it as pending,
// Sign returns ErrInvalid for it, and only SignWith with
// AllowAuthorizationExtensions (an operator's explicit choice) signs it,
// copying the extensions into the certificate. A CA that signs nothing
// itself (a proxy to an upstream CA) returns ErrInvalid from Sign, SignWith,
// Revoke and List.
type CA interface {
	CACertificate(ctx context.Context) ([]byte, error)
	CRL(ctx context.Context) ([]byte, error)
	SubmitCSR(ctx context.Context, certname string, csrPEM []byte) error
	Certificate(ctx context.Context, certname string) ([]byte, error)
	CertificateRequest(ctx context.Context, certname string) ([]byte, error)
	Sign(ctx context.Context, certname string) error
	SignWith(ctx context.Context, certname string, opts SignOptions) error
	Revoke(ctx context.Context, certname string) error
	List(ctx context.Context) ([]CertStatus, error)
}

// SignOptions are an operator's choices when signing a request.
type SignOptions struct {
	// AllowAuthorizationExtensions signs a request carrying authorization
	// extensions, pp_cli_auth included (`broker ca sign NAME
	// --allow-authorization-extensions`).
	AllowAuthorizationExtensions bool
}

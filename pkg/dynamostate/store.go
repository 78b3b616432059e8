// Package dynamostate keeps the farm's node and environment records in
// DynamoDB: a farm.NodeStore and a farm.EnvironmentStore for the AWS wiring,
// the PCP broker's presence records and run jobs (a farm.PresenceStore and
// a farm.RunJobStore, see presence.go and runjobs.go), the recorded PuppetDB
// queries (a farm.QueryStore, see queries.go), and the CA's records
// (CAStore, a farm.CAStore).
//
// # Tables
//
// Store uses these three tables with on-demand billing, defined once in
// Tables, plus the presence, jobs and queries tables (described in
// presence.go, runjobs.go and queries.go; CAStore's table is described on
// CAStore):
//
//	nodes:        certname (S, partition key), version (N), record (S),
//	              report (M: RecordReport's summary, kept beside the record)
//	node-index:   certname (S, partition key), entry (S, sort key), at (N)
//	              global secondary index by-entry: entry, certname (keys only)
//	environments: name     (S, partition key), record (S)
//
// node-index holds one item per index entry of a node (farm.Node.IndexEntries:
// its environment, each type it exports, each type it collects). QueryNodes
// reads a page of certnames from by-entry and their records with
// BatchGetItem: no Scan on any path. A write whose entries stay the same (a
// check-in, a compile that exports what it did) is one UpdateItem; see
// putRecord for how entries change without a transaction.
//
// record is the farm record (farm.Node, farm.Environment) as JSON, the same
// encoding the embedded driver stores: every field the farm types have or
// will grow round-trips with no per-field mapping to keep in step, times keep
// their nanoseconds, and a node is always read and written whole (nothing
// queries inside it). History is bounded (farm.HistoryLen), so a record stays
// far below DynamoDB's 400 KB item limit. version counts the writes of a node
// and is the optimistic-concurrency token.
//
// # Concurrency
//
// UpdateNode reads the item with a consistent read, runs fn on a record
// decoded for this attempt alone, and writes it back with a condition: the
// version it read (attribute_not_exists(certname) when there was no item).
// When another writer got there first the condition fails, and UpdateNode
// reads again and calls fn again, after a jittered exponential backoff, up
// to Options.MaxAttempts times; then it returns farm.ErrConflict. Concurrent
// updates therefore never lose each other's changes. fn may run more than
// once (the farm.NodeStore contract allows it) and its error is returned as
// is, with nothing written.
//
// # Errors
//
// SDK errors are translated here and never leak: a missing item is
// farm.ErrNotFound; a conditional check that keeps failing farm.ErrConflict;
// throttling, 5xx answers and network failures farm.ErrTransient; a request
// DynamoDB refuses as malformed (ValidationException, e.g. an item too large)
// farm.ErrInvalid; a missing table a plain error naming the table (a
// deployment error, neither "not found" for the record nor worth retrying).
package dynamostate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/compilefarm/compilefarm/internal/backoff"
	"github.com/compilefarm/compilefarm/pkg/farm"
)

// Attribute names of the items.
const (
	AttrCertname = "certname" // nodes table partition key
	AttrName     = "name"     // environments table partition key
	AttrVersion  = "version"  // node write counter, the concurrency token
	AttrRecord   = "record"   // the farm record as JSON
	AttrEntry    = "entry"    // node-index table sort key: a farm index entry
	AttrAt       = "at"       // node-index item: when it was written (Unix seconds)
)

// Options configure a Store.
type Options struct {
	NodesTable        string // required
	IndexTable        string // required: the node-index table (see Tables)
	EnvironmentsTable string // required
	// PresenceTable, JobsTable and QueriesTable hold PresenceStore's,
	// RunJobStore's and QueryStore's items (presence.go, runjobs.go,
	// queries.go): needed only by those methods.
	PresenceTable string
	JobsTable     string
	QueriesTable  string
	// MaxAttempts bounds how often UpdateNode reads, calls fn and tries its
	// conditional write before giving up with farm.ErrConflict (default
	// 500; the context bounds it in time too).
	MaxAttempts int
	// BackoffBase and BackoffMax shape the pause between attempts: a random
	// duration up to min(BackoffMax, b·2^(attempt-1)), where b is the larger
	// of BackoffBase and the duration of the attempt that lost, so the
	// pauses stretch with the store's latency (defaults 2 ms and 1 s).
	BackoffBase time.Duration
	BackoffMax  time.Duration
	// ScanPageSize limits the items of one Scan page (0: DynamoDB's 1 MB
	// pages). For tests of pagination.
	ScanPageSize int32
}

// Store is the DynamoDB driver of farm.NodeStore, farm.EnvironmentStore,
// farm.PresenceStore, farm.RunJobStore and farm.QueryStore. Safe for
// concurrent use.
type Store struct {
	client *dynamodb.Client
	opts   Options
}

var (
	_ farm.NodeStore        = (*Store)(nil)
	_ farm.EnvironmentStore = (*Store)(nil)
)

// New returns a Store using client and the tables named in opts.
func New(client *dynamodb.Client, opts Options) *Store {
	if opts.MaxAttempts <= 0 {
		opts.MaxAttempts = 500
	}
	if opts.BackoffBase <= 0 {
		opts.BackoffBase = 2 * time.Millisecond
	}
	if opts.BackoffMax <= 0 {
		opts.BackoffMax = time.Second
	}
	return &Store{client: client, opts: opts}
}

// NewFromConfig returns a Store with a DynamoDB client made from cfg;
// optFns adjust the client (an endpoint for an emulator, for instance).
func NewFromConfig(cfg aws.Config, opts Options, optFns ...func(*dynamodb.Options)) *Store {
	return New(dynamodb.NewFromConfig(cfg, optFns...), opts)
}

// EnsureTables creates the tables opts name (on-demand billing, see
// Tables) unless they exist and waits until they are active. For tests and
// development; in AWS the infra stack owns the tables. It does not turn on
// the presence table's time to live (reads skip expired items anyway).
func (s *Store) EnsureTables(ctx context.Context) error {
	for _, t := range []struct{ name, role string }{
		{s.opts.NodesTable, RoleNodes}, {s.opts.IndexTable, RoleNodeIndex}, {s.opts.EnvironmentsTable, RoleEnvironments},
		{s.opts.PresenceTable, RolePresence}, {s.opts.JobsTable, RoleJobs}, {s.opts.QueriesTable, RoleQueries},
	} {
		if t.name == "" && (t.role == RolePresence || t.role == RoleJobs || t.role == RoleQueries) {
			continue
		}
		if err := ensureTable(ctx, s.client, t.name, TableSpecFor(t.role)); err != nil {
			return err
		}
	}
	return nil
}

func nodeKey(certname string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{AttrCertname: &types.AttributeValueMemberS{Value: certname}}
}

// storedNode is a node item decoded: the record and its version.
type storedNode struct {
	node    farm.Node
	version uint64
}

func decodeNode(item map[string]types.AttributeValue) (storedNode, error) {
	key, _ := item[AttrCertname].(*types.AttributeValueMemberS)
	if key == nil {
		return storedNode{}, fmt.Errorf("node item without a string %s: %w", AttrCertname, farm.ErrInvalid)
	}
	rec, _ := item[AttrRecord].(*types.AttributeValueMemberS)
	if rec == nil {
		return storedNode{}, fmt.Errorf("item of node %s has no string %s attribute: %w", key.Value, AttrRecord, farm.ErrInvalid)
	}
	var sn storedNode
	if err := json.Unmarshal([]byte(rec.Value), &sn.node); err != nil {
		return storedNode{}, fmt.Errorf("stored record of node %s is unreadable: %v: %w", key.Value, err, farm.ErrInvalid)
	}
	if sn.node.Certname != key.Value {
		return storedNode{}, fmt.Errorf("item %s holds the record of node %q: %w", key.Value, sn.node.Certname, farm.ErrInvalid)
	}
	ver, _ := item[AttrVersion].(*types.AttributeValueMemberN)
	if ver == nil {
		return storedNode{}, fmt.Errorf("item of node %s has no numeric %s attribute: %w", key.Value, AttrVersion, farm.ErrInvalid)
	}
	v, err := strconv.ParseUint(ver.Value, 10, 64)
	if err != nil {
		return storedNode{}, fmt.Errorf("item of node %s has version %q: %w", key.Value, ver.Value, farm.ErrInvalid)
	}
	sn.version = v
	if err := overlayReport(item, &sn.node); err != nil {
		return storedNode{}, err
	}
	return sn, nil
}

// readNode reads certname's item with a consistent read; found is false
// when there is none.
func (s *Store) readNode(ctx context.Context, certname string) (sn storedNode, found bool, err error) {
	out, err := s.client.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:      aws.String(s.opts.NodesTable),
		Key:            nodeKey(certname),
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return storedNode{}, false, translate(err, s.opts.NodesTable)
	}
	if len(out.Item) == 0 {
		return storedNode{}, false, nil
	}
	sn, err = decodeNode(out.Item)
	return sn, err == nil, err
}

// GetNode returns the record of certname (farm.ErrNotFound when none).
func (s *Store) GetNode(ctx context.Context, certname string) (farm.Node, error) {
	if err := farm.CheckGetNode(ctx, certname); err != nil {
		return farm.Node{}, err
	}
	sn, found, err := s.readNode(ctx, certname)
	if err != nil {
		return farm.Node{}, fmt.Errorf("get node %s: %w", certname, err)
	}
	if !found {
		return farm.Node{}, fmt.Errorf("get node %s: %w", certname, farm.ErrNotFound)
	}
	return sn.node, nil
}

// scan calls each on every item of table, with consistent reads.
func (s *Store) scan(ctx context.Context, table string, each func(map[string]types.AttributeValue) error) error {
	in := &dynamodb.ScanInput{TableName: aws.String(table), ConsistentRead: aws.Bool(true)}
	if s.opts.ScanPageSize > 0 {
		in.Limit = aws.Int32(s.opts.ScanPageSize)
	}
	return scanItems(ctx, s.client, in, each)
}

// scanItems runs the Scan in page by page and calls each on every item it
// returns. A failed page is translated (naming in's table); each's error is
// returned as is. Store and CAStore list their records with it.
func scanItems(ctx context.Context, client *dynamodb.Client, in *dynamodb.ScanInput, each func(map[string]types.AttributeValue) error) error {
	p := dynamodb.NewScanPaginator(client, in)
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return translate(err, aws.ToString(in.TableName))
		}
		for _, item := range page.Items {
			if err := each(item); err != nil {
				return err
			}
		}
	}
	return nil
}

// errLost is a conditional write that lost to another writer.
var errLost = errors.New("conditional write lost")

// UpdateNode runs fn on the current record of certname and writes the
// result with a conditional write, retrying (fn included) when another
// writer changed the item in between; see the package doc. fn's error is
// returned as is and nothing is written; fn may not change the certname
// (farm.ErrInvalid). After Options.MaxAttempts lost writes it returns
// farm.ErrConflict.
func (s *Store) UpdateNode(ctx context.Context, certname string, fn func(*farm.Node) error) (farm.Node, error) {
	if err := farm.CheckUpdateNode(ctx, certname); err != nil {
		return farm.Node{}, err
	}
	var took time.Duration // how long the last lost attempt took
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			if err := s.pause(ctx, attempt, took); err != nil {
				return farm.Node{}, fmt.Errorf("update node %s: %w", certname, err)
			}
		}
		start := time.Now()
		cur, found, err := s.readNode(ctx, certname)
		if err != nil {
			return farm.Node{}, fmt.Errorf("update node %s: %w", certname, err)
		}
		n := farm.Node{Certname: certname}
		if found {
			n = cur.node // decoded for this attempt alone: fn's changes reach nothing else
		}
		was := n.IndexCopy()
		if err := fn(&n); err != nil {
			return farm.Node{}, err
		}
		if err := farm.CheckUpdatedNode(certname, &n); err != nil {
			return farm.Node{}, err
		}
		out, err := s.writeNode(ctx, n, cur.version, found, &was)
		if errors.Is(err, errLost) {
			took = time.Since(start)
			if attempt+1 >= s.opts.MaxAttempts {
				return farm.Node{}, fmt.Errorf("update node %s: the item kept changing during %d attempts: %w", certname, s.opts.MaxAttempts, farm.ErrConflict)
			}
			continue
		}
		if err != nil {
			return farm.Node{}, fmt.Errorf("update node %s: %w", certname, err)
		}
		return out, nil
	}
}

// writeNode stores n as version prev+1 if the item is still at version prev
// (or still absent when !exists), moving its index entries from was's;
// errLost when it is not. It returns the record decoded from what it
// wrote, a copy no caller can reach.
func (s *Store) writeNode(ctx context.Context, n farm.Node, prev uint64, exists bool, was *farm.Node) (farm.Node, error) {
	rec, err := json.Marshal(n)
	if err != nil {
		return farm.Node{}, fmt.Errorf("encode: %v: %w", err, farm.ErrInvalid)
	}
	if err := s.putRecord(ctx, n.Certname, rec, prev, exists, was.IndexEntries(), n.IndexEntries()); err != nil {
		return farm.Node{}, err
	}
	var out farm.Node
	if err := json.Unmarshal(rec, &out); err != nil {
		return farm.Node{}, fmt.Errorf("decode what was written: %v: %w", err, farm.ErrInvalid)
	}
	return out, nil
}

// pause waits before attempt (≥ 1), after an attempt that lost and took
// took: full jitter over an exponential bound that starts at the larger of
// BackoffBase and took.
func (s *Store) pause(ctx context.Context, attempt int, took time.Duration) error {
	base := max(s.opts.BackoffBase, took)
	bound := s.opts.BackoffMax
	if attempt <= 30 {
		if b := base << (attempt - 1); b > 0 && b < bound {
			bound = b
		}
	}
	return backoff.Sleep(ctx, rand.N(bound)+1)
}

func envKey(name string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{AttrName: &types.AttributeValueMemberS{Value: name}}
}

func decodeEnv(item map[string]types.AttributeValue) (farm.Environment, error) {
	key, _ := item[AttrName].(*types.AttributeValueMemberS)
	if key == nil {
		return farm.Environment{}, fmt.Errorf("environment item without a string %s: %w", AttrName, farm.ErrInvalid)
	}
	rec, _ := item[AttrRecord].(*types.AttributeValueMemberS)
	if rec == nil {
		return farm.Environment{}, fmt.Errorf("item of environment %s has no string %s attribute: %w", key.Value, AttrRecord, farm.ErrInvalid)
	}
	var e farm.Environment
	if err := json.Unmarshal([]byte(rec.Value), &e); err != nil {
		return farm.Environment{}, fmt.Errorf("stored record of environment %s is unreadable: %v: %w", key.Value, err, farm.ErrInvalid)
	}
	if e.Name != key.Value {
		return farm.Environment{}, fmt.Errorf("item %s holds the record of environment %q: %w", key.Value, e.Name, farm.ErrInvalid)
	}
	return e, nil
}

// GetEnvironment returns the record of environment name (farm.ErrNotFound
// when it was never deployed).
func (s *Store) GetEnvironment(ctx context.Context, name string) (farm.Environment, error) {
	if err := farm.CheckGetEnvironment(ctx, name); err != nil {
		return farm.Environment{}, err
	}
	out, err := s.client.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:      aws.String(s.opts.EnvironmentsTable),
		Key:            envKey(name),
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return farm.Environment{}, fmt.Errorf("get environment %s: %w", name, translate(err, s.opts.EnvironmentsTable))
	}
	if len(out.Item) == 0 {
		return farm.Environment{}, fmt.Errorf("get environment %s: %w", name, farm.ErrNotFound)
	}
	e, err := decodeEnv(out.Item)
	if err != nil {
		return farm.Environment{}, fmt.Errorf("get environment %s: %w", name, err)
	}
	return e, nil
}

// ListEnvironments returns every environment record, sorted by name.
func (s *Store) ListEnvironments(ctx context.Context) ([]farm.Environment, error) {
	if err := farm.CheckListEnvironments(ctx); err != nil {
		return nil, err
	}
	out := []farm.Environment{}
	err := s.scan(ctx, s.opts.EnvironmentsTable, func(item map[string]types.AttributeValue) error {
		e, err := decodeEnv(item)
		if err != nil {
			return err
		}
		out = append(out, e)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list environments: %w", err)
	}
	slices.SortFunc(out, func(a, b farm.Environment) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// PutEnvironment replaces the record of env.Name (unconditionally: the last
// put wins, as the contract says).
func (s *Store) PutEnvironment(ctx context.Context, env farm.Environment) error {
	if err := farm.CheckPutEnvironment(ctx, &env); err != nil {
		return err
	}
	rec, err := json.Marshal(env)
	if err != nil {
		return fmt.Errorf("put environment %s: encode: %v: %w", env.Name, err, farm.ErrInvalid)
	}
	_, err = s.client.PutItem(ctx, &dynamodb.PutItemInput{
		TableName: aws.String(s.opts.EnvironmentsTable),
		Item: map[string]types.AttributeValue{
			AttrName:   &types.AttributeValueMemberS{Value: env.Name},
			AttrRecord: &types.AttributeValueMemberS{Value: string(rec)},
		},
	})
	if err != nil {
		return fmt.Errorf("put environment %s: %w", env.Name, translate(err, s.opts.EnvironmentsTable))
	}
	return nil
}

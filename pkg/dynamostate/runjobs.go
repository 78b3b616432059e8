package dynamostate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/compilefarm/compilefarm/pkg/farm"
)

// The jobs table (Options.JobsTable, RoleJobs) holds a job and its nodes
// under the job's id:
//
//	job (S, partition key), item (S, sort key: ItemJob, or ItemNodePrefix + certname),
//	record (S: farm.RunJob or farm.RunJobNode as JSON), version (N)
//	the job's item also: created (S: createdKey), list (S: ListJobs, once its nodes are stored)
//	expires_at (N, Unix seconds: the table's time to live), only on an ended job
//	(JobRetention after the write that ended it) or a node whose run ended
//	(JobNodeRetention after that write); a running job's and a queued or
//	running node's items have none and never expire
//	global secondary index by-created: list, created (all attributes)
//
// Calls: CreateJob is one conditional PutItem of the job's item (the
// winner of a race for an id is the one whose put succeeds; losers write
// nothing), BatchWriteItem of its nodes 25 a call (unprocessed items
// retried), then one UpdateItem that sets list, so the job is listed only
// once its nodes are stored (a job of no nodes: the PutItem alone).
// GetJob is one GetItem (consistent read); UpdateJob and UpdateJobNode are
// a GetItem (consistent) and an UpdateItem conditional on the version read
// per attempt, retried as UpdateNode; ListJobs is one Query of by-created
// per page (newest first, eventually consistent), ListJobNodes one Query
// of the job's partition per page (consistent). IAM: dynamodb:PutItem,
// BatchWriteItem, UpdateItem, GetItem and Query on the table and Query on
// its index.

var _ farm.RunJobStore = (*Store)(nil)

// JobRetention is how long a job's item stays after the write that ended
// it (finished, failed, stopped): 30 days, what `broker job show` and
// `broker job list` are for. It matches the reports the job's nodes link
// to (the stack's reportRetentionDays, 30 by default): a job's record
// outliving its reports by long would list runs nobody can read. DynamoDB
// deletes the item some time after (hours to days); readers never rely on
// it.
const JobRetention = 30 * 24 * time.Hour

// JobNodeRetention is how long a job's node item stays after the write
// that ended its run: JobRetention and 14 days more, so that the nodes of
// a job outlive the job's item when the job ends within 14 days of them
// (20,000 nodes at the default concurrency of 10, each run taking 7
// minutes, take about 10 days). The node's item does not know when its
// job ends; a job that runs longer loses its earliest nodes' items up to
// that much before its own.
const JobNodeRetention = JobRetention + 14*24*time.Hour

// jobExpiry is when a job item written as j expires: zero (never) while it
// runs.
func jobExpiry(j *farm.RunJob, now time.Time) time.Time {
	if j.State == farm.JobRunning {
		return time.Time{}
	}
	return now.Add(JobRetention)
}

// jobNodeExpiry is when a node item written as n expires: zero (never)
// while its run is queued or running.
func jobNodeExpiry(n *farm.RunJobNode, now time.Time) time.Time {
	if n.State == farm.JobNodeQueued || n.State == farm.JobNodeRunning {
		return time.Time{}
	}
	return now.Add(JobNodeRetention)
}

// ttlSeconds is an expiry as the time to live attribute holds it: Unix
// seconds, rounded up (never deleted before the time).
func ttlSeconds(t time.Time) int64 {
	secs := t.Unix()
	if t.Nanosecond() > 0 {
		secs++
	}
	return secs
}

// Attribute names and values of the jobs table's items.
const (
	AttrJob     = "job"     // partition key: the job's id
	AttrItem    = "item"    // sort key: ItemJob or ItemNodePrefix + certname
	AttrCreated = "created" // the job item's place in by-created
	AttrList    = "list"    // by-created's partition key: ListValue once listed

	ItemJob        = "job"
	ItemNodePrefix = "node#" // sorts after ItemJob
	ListValue      = "jobs"
)

func (s *Store) jobsTable() (string, error) {
	if s.opts.JobsTable == "" {
		return "", errors.New("dynamostate: no jobs table (Options.JobsTable)")
	}
	return s.opts.JobsTable, nil
}

func jobItemKey(id, item string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{
		AttrJob:  &types.AttributeValueMemberS{Value: id},
		AttrItem: &types.AttributeValueMemberS{Value: item},
	}
}

// createdKey orders jobs by created time, then id: 16 hex digits of the
// time in Unix nanoseconds with the sign bit flipped (earlier sorts first,
// before 1970 too), then the id. It is also the Next of a ListJobs page.
func createdKey(j *farm.RunJob) string {
	return fmt.Sprintf("%016x%s", uint64(j.Created.UnixNano())^(1<<63), j.ID)
}

var createdKeyRE = regexp.MustCompile(`^[0-9a-f]{16}[0-9A-Za-z][0-9A-Za-z_-]{0,63}$`)

// decodeRecord reads the JSON record and version of a jobs table item.
func decodeRecord[T any](item map[string]types.AttributeValue, what string) (T, uint64, error) {
	var r T
	rec, _ := item[AttrRecord].(*types.AttributeValueMemberS)
	ver, _ := item[AttrVersion].(*types.AttributeValueMemberN)
	if rec == nil || ver == nil {
		return r, 0, fmt.Errorf("item of %s lacks a string %s or a numeric %s: %w", what, AttrRecord, AttrVersion, farm.ErrInvalid)
	}
	if err := json.Unmarshal([]byte(rec.Value), &r); err != nil {
		return r, 0, fmt.Errorf("stored record of %s is unreadable: %v: %w", what, err, farm.ErrInvalid)
	}
	v, err := strconv.ParseUint(ver.Value, 10, 64)
	if err != nil {
		return r, 0, fmt.Errorf("item of %s has version %q: %w", what, ver.Value, farm.ErrInvalid)
	}
	return r, v, nil
}

func decodeJob(item map[string]types.AttributeValue) (farm.RunJob, uint64, error) {
	id, _ := item[AttrJob].(*types.AttributeValueMemberS)
	if id == nil {
		return farm.RunJob{}, 0, fmt.Errorf("job item without a string %s: %w", AttrJob, farm.ErrInvalid)
	}
	j, v, err := decodeRecord[farm.RunJob](item, "job "+id.Value)
	if err == nil && j.ID != id.Value {
		err = fmt.Errorf("item of job %s holds the record of job %q: %w", id.Value, j.ID, farm.ErrInvalid)
	}
	return j, v, err
}

func decodeJobNode(item map[string]types.AttributeValue) (farm.RunJobNode, uint64, error) {
	id, _ := item[AttrJob].(*types.AttributeValueMemberS)
	it, _ := item[AttrItem].(*types.AttributeValueMemberS)
	if id == nil || it == nil || !strings.HasPrefix(it.Value, ItemNodePrefix) {
		return farm.RunJobNode{}, 0, fmt.Errorf("job node item without a string %s and a node %s: %w", AttrJob, AttrItem, farm.ErrInvalid)
	}
	node := strings.TrimPrefix(it.Value, ItemNodePrefix)
	n, v, err := decodeRecord[farm.RunJobNode](item, "node "+node+" of job "+id.Value)
	if err == nil && (n.Job != id.Value || n.Node != node) {
		err = fmt.Errorf("item of node %s of job %s holds the record of node %q of job %q: %w", node, id.Value, n.Node, n.Job, farm.ErrInvalid)
	}
	return n, v, err
}

// CreateJob writes the job's item (if no job has its id), its nodes in
// batches, and then lists it; see the calls above.
func (s *Store) CreateJob(ctx context.Context, job farm.RunJob, nodes []string) error {
	if err := farm.CheckCreateJob(ctx, &job, nodes); err != nil {
		return err
	}
	table, err := s.jobsTable()
	if err != nil {
		return fmt.Errorf("create job %s: %w", job.ID, err)
	}
	rec, err := json.Marshal(job)
	if err != nil {
		return fmt.Errorf("create job %s: encode: %v: %w", job.ID, err, farm.ErrInvalid)
	}
	item := jobItemKey(job.ID, ItemJob)
	item[AttrRecord] = &types.AttributeValueMemberS{Value: string(rec)}
	item[AttrVersion] = numAttr(1)
	item[AttrCreated] = &types.AttributeValueMemberS{Value: createdKey(&job)}
	if x := jobExpiry(&job, time.Now()); !x.IsZero() {
		item[AttrExpiresAt] = numAttr(ttlSeconds(x))
	}
	if len(nodes) == 0 {
		item[AttrList] = &types.AttributeValueMemberS{Value: ListValue}
	}
	_, err = s.client.PutItem(ctx, &dynamodb.PutItemInput{
		TableName:                aws.String(table),
		Item:                     item,
		ConditionExpression:      aws.String("attribute_not_exists(#j)"),
		ExpressionAttributeNames: map[string]string{"#j": AttrJob},
	})
	if err = translate(err, table); errors.Is(err, errLost) {
		return fmt.Errorf("create job %s: it exists: %w", job.ID, farm.ErrConflict)
	}
	if err != nil {
		return fmt.Errorf("create job %s: %w", job.ID, err)
	}
	if len(nodes) == 0 {
		return nil
	}
	if err := s.writeJobNodes(ctx, table, &job, nodes); err != nil {
		return fmt.Errorf("create job %s: store its nodes: %w", job.ID, err)
	}
	_, err = s.client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 aws.String(table),
		Key:                       jobItemKey(job.ID, ItemJob),
		UpdateExpression:          aws.String("SET #l = :l"),
		ExpressionAttributeNames:  map[string]string{"#l": AttrList},
		ExpressionAttributeValues: map[string]types.AttributeValue{":l": &types.AttributeValueMemberS{Value: ListValue}},
	})
	if err != nil {
		return fmt.Errorf("create job %s: list it: %w", job.ID, translate(err, table))
	}
	return nil
}

// writeJobNodes puts the queued items of nodes with BatchWriteItem, 25 a
// call, retrying what DynamoDB leaves unprocessed.
func (s *Store) writeJobNodes(ctx context.Context, table string, job *farm.RunJob, nodes []string) error {
	for chunk := range slices.Chunk(nodes, 25) {
		reqs := make([]types.WriteRequest, 0, len(chunk))
		for _, n := range chunk {
			rec, err := json.Marshal(job.QueuedNode(n))
			if err != nil {
				return fmt.Errorf("encode node %s: %v: %w", n, err, farm.ErrInvalid)
			}
			item := jobItemKey(job.ID, ItemNodePrefix+n)
			item[AttrRecord] = &types.AttributeValueMemberS{Value: string(rec)}
			item[AttrVersion] = numAttr(1)
			reqs = append(reqs, types.WriteRequest{PutRequest: &types.PutRequest{Item: item}})
		}
		req := map[string][]types.WriteRequest{table: reqs}
		for attempt := 0; len(req) > 0; attempt++ {
			if attempt > 0 {
				if err := s.pause(ctx, attempt, 0); err != nil {
					return err
				}
			}
			out, err := s.client.BatchWriteItem(ctx, &dynamodb.BatchWriteItemInput{RequestItems: req})
			if err != nil {
				return translate(err, table)
			}
			req = out.UnprocessedItems
			if attempt+1 >= s.opts.MaxAttempts && len(req) > 0 {
				return fmt.Errorf("batch write of job nodes: items kept coming back unprocessed: %w", farm.ErrTransient)
			}
		}
	}
	return nil
}

// getJobItem reads one item of the jobs table with a consistent read; nil
// when there is none.
func (s *Store) getJobItem(ctx context.Context, table, id, item string) (map[string]types.AttributeValue, error) {
	out, err := s.client.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:      aws.String(table),
		Key:            jobItemKey(id, item),
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return nil, translate(err, table)
	}
	if len(out.Item) == 0 {
		return nil, nil
	}
	return out.Item, nil
}

// GetJob reads the job's item with one consistent GetItem.
func (s *Store) GetJob(ctx context.Context, id string) (farm.RunJob, error) {
	if err := farm.CheckGetJob(ctx, id); err != nil {
		return farm.RunJob{}, err
	}
	table, err := s.jobsTable()
	if err != nil {
		return farm.RunJob{}, fmt.Errorf("get job %s: %w", id, err)
	}
	item, err := s.getJobItem(ctx, table, id, ItemJob)
	if err != nil {
		return farm.RunJob{}, fmt.Errorf("get job %s: %w", id, err)
	}
	if item == nil {
		return farm.RunJob{}, fmt.Errorf("get job %s: %w", id, farm.ErrNotFound)
	}
	j, _, err := decodeJob(item)
	if err != nil {
		return farm.RunJob{}, fmt.Errorf("get job %s: %w", id, err)
	}
	return j, nil
}

// updateItem is the optimistic read-modify-write of one jobs table item:
// read (consistent), apply (fn on a record decoded for this attempt),
// write the record as version+1 on condition that the version is still the
// one read, and again after a pause when another writer won, up to
// Options.MaxAttempts times. apply's error is returned as is.
func updateItem[T any](ctx context.Context, s *Store, table, id, sortKey string,
	decode func(map[string]types.AttributeValue) (T, uint64, error), apply func(*T) error,
	expiry func(*T, time.Time) time.Time,
) (T, error) {
	var zero T
	var took time.Duration
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			if err := s.pause(ctx, attempt, took); err != nil {
				return zero, err
			}
		}
		start := time.Now()
		item, err := s.getJobItem(ctx, table, id, sortKey)
		if err != nil {
			return zero, err
		}
		if item == nil {
			return zero, farm.ErrNotFound
		}
		r, version, err := decode(item)
		if err != nil {
			return zero, err
		}
		if err := apply(&r); err != nil {
			return zero, err
		}
		rec, err := json.Marshal(r)
		if err != nil {
			return zero, fmt.Errorf("encode: %v: %w", err, farm.ErrInvalid)
		}
		in := &dynamodb.UpdateItemInput{
			TableName:                aws.String(table),
			Key:                      jobItemKey(id, sortKey),
			UpdateExpression:         aws.String("SET #r = :r, #v = :nv REMOVE #x"),
			ConditionExpression:      aws.String("#v = :v"),
			ExpressionAttributeNames: map[string]string{"#r": AttrRecord, "#v": AttrVersion, "#x": AttrExpiresAt},
			ExpressionAttributeValues: map[string]types.AttributeValue{
				":r":  &types.AttributeValueMemberS{Value: string(rec)},
				":v":  numAttr(int64(version)),
				":nv": numAttr(int64(version + 1)),
			},
		}
		if x := expiry(&r, time.Now()); !x.IsZero() {
			in.UpdateExpression = aws.String("SET #r = :r, #v = :nv, #x = :x")
			in.ExpressionAttributeValues[":x"] = numAttr(ttlSeconds(x))
		}
		_, err = s.client.UpdateItem(ctx, in)
		err = translate(err, table)
		if errors.Is(err, errLost) {
			took = time.Since(start)
			if attempt+1 >= s.opts.MaxAttempts {
				return zero, fmt.Errorf("the item kept changing during %d attempts: %w", s.opts.MaxAttempts, farm.ErrConflict)
			}
			continue
		}
		if err != nil {
			return zero, err
		}
		var out T // decoded from what was written: a copy no caller can reach
		if err := json.Unmarshal(rec, &out); err != nil {
			return zero, fmt.Errorf("decode what was written: %v: %w", err, farm.ErrInvalid)
		}
		return out, nil
	}
}

// errFn carries fn's error through updateItem, so it is returned as is.
type errFn struct{ err error }

func (e errFn) Error() string { return e.err.Error() }

// fnError returns fn's own error when err carries one.
func fnError(err error) (error, bool) {
	var fe errFn
	if errors.As(err, &fe) {
		return fe.err, true
	}
	return nil, false
}

// UpdateJob runs fn on the job's record and writes it back on condition
// that nobody wrote in between (see updateItem); fn's error is returned as
// is with nothing written.
func (s *Store) UpdateJob(ctx context.Context, id string, fn func(*farm.RunJob) error) (farm.RunJob, error) {
	if err := farm.CheckUpdateJob(ctx, id); err != nil {
		return farm.RunJob{}, err
	}
	table, err := s.jobsTable()
	if err != nil {
		return farm.RunJob{}, fmt.Errorf("update job %s: %w", id, err)
	}
	j, err := updateItem(ctx, s, table, id, ItemJob, decodeJob, func(j *farm.RunJob) error {
		created := j.Created
		if err := fn(j); err != nil {
			return errFn{err}
		}
		if err := farm.CheckUpdatedJob(id, created, j); err != nil {
			return errFn{err} // returned as is, as fn's own
		}
		return nil
	}, jobExpiry)
	if fe, ok := fnError(err); ok {
		return farm.RunJob{}, fe
	}
	if err != nil {
		return farm.RunJob{}, fmt.Errorf("update job %s: %w", id, err)
	}
	return j, nil
}

// UpdateJobNode runs fn on the record of node in job id as UpdateJob.
func (s *Store) UpdateJobNode(ctx context.Context, id, node string, fn func(*farm.RunJobNode) error) (farm.RunJobNode, error) {
	if err := farm.CheckUpdateJobNode(ctx, id, node); err != nil {
		return farm.RunJobNode{}, err
	}
	table, err := s.jobsTable()
	if err != nil {
		return farm.RunJobNode{}, fmt.Errorf("update node %s of job %s: %w", node, id, err)
	}
	n, err := updateItem(ctx, s, table, id, ItemNodePrefix+node, decodeJobNode, func(n *farm.RunJobNode) error {
		if err := fn(n); err != nil {
			return errFn{err}
		}
		if err := farm.CheckUpdatedJobNode(id, node, n); err != nil {
			return errFn{err} // returned as is, as fn's own
		}
		return nil
	}, jobNodeExpiry)
	if fe, ok := fnError(err); ok {
		return farm.RunJobNode{}, fe
	}
	if err != nil {
		return farm.RunJobNode{}, fmt.Errorf("update node %s of job %s: %w", node, id, err)
	}
	return n, nil
}

// ListJobs reads a page of by-created, newest first, with one Query of one
// item more than the page (so the last page has no Next).
func (s *Store) ListJobs(ctx context.Context, q farm.RunJobQuery) (farm.RunJobPage, error) {
	if err := farm.CheckListJobs(ctx, q); err != nil {
		return farm.RunJobPage{}, err
	}
	if q.After != "" && !createdKeyRE.MatchString(q.After) {
		return farm.RunJobPage{}, fmt.Errorf("list jobs: after %q is not the Next of a page: %w", q.After, farm.ErrInvalid)
	}
	table, err := s.jobsTable()
	if err != nil {
		return farm.RunJobPage{}, fmt.Errorf("list jobs: %w", err)
	}
	in := &dynamodb.QueryInput{
		TableName:                 aws.String(table),
		IndexName:                 aws.String(IndexByCreated),
		KeyConditionExpression:    aws.String("#l = :l"),
		ExpressionAttributeNames:  map[string]string{"#l": AttrList},
		ExpressionAttributeValues: map[string]types.AttributeValue{":l": &types.AttributeValueMemberS{Value: ListValue}},
		ScanIndexForward:          aws.Bool(false),
		Limit:                     aws.Int32(int32(q.PageSize() + 1)),
	}
	if q.After != "" {
		in.KeyConditionExpression = aws.String("#l = :l AND #c < :a")
		in.ExpressionAttributeNames["#c"] = AttrCreated
		in.ExpressionAttributeValues[":a"] = &types.AttributeValueMemberS{Value: q.After}
	}
	out, err := s.client.Query(ctx, in)
	if err != nil {
		return farm.RunJobPage{}, fmt.Errorf("list jobs: %w", translate(err, table))
	}
	page := farm.RunJobPage{Jobs: []farm.RunJob{}}
	more := len(out.LastEvaluatedKey) > 0
	items := out.Items
	if len(items) > q.PageSize() {
		items, more = items[:q.PageSize()], true
	}
	for _, item := range items {
		j, _, err := decodeJob(item)
		if err != nil {
			return farm.RunJobPage{}, fmt.Errorf("list jobs: %w", err)
		}
		page.Jobs = append(page.Jobs, j)
	}
	if more && len(page.Jobs) > 0 {
		page.Next = createdKey(&page.Jobs[len(page.Jobs)-1])
	}
	return page, nil
}

// ListJobNodes reads a page of the job's node items with one consistent
// Query of one item more than the page.
func (s *Store) ListJobNodes(ctx context.Context, q farm.RunJobNodeQuery) (farm.RunJobNodePage, error) {
	if err := farm.CheckListJobNodes(ctx, q); err != nil {
		return farm.RunJobNodePage{}, err
	}
	table, err := s.jobsTable()
	if err != nil {
		return farm.RunJobNodePage{}, fmt.Errorf("list nodes of job %s: %w", q.Job, err)
	}
	out, err := s.client.Query(ctx, &dynamodb.QueryInput{
		TableName:                aws.String(table),
		KeyConditionExpression:   aws.String("#j = :j AND #i > :a"),
		ExpressionAttributeNames: map[string]string{"#j": AttrJob, "#i": AttrItem},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":j": &types.AttributeValueMemberS{Value: q.Job},
			":a": &types.AttributeValueMemberS{Value: ItemNodePrefix + q.After},
		},
		ConsistentRead: aws.Bool(true),
		Limit:          aws.Int32(int32(q.PageSize() + 1)),
	})
	if err != nil {
		return farm.RunJobNodePage{}, fmt.Errorf("list nodes of job %s: %w", q.Job, translate(err, table))
	}
	page := farm.RunJobNodePage{Nodes: []farm.RunJobNode{}}
	more := len(out.LastEvaluatedKey) > 0
	items := out.Items
	if len(items) > q.PageSize() {
		items, more = items[:q.PageSize()], true
	}
	for _, item := range items {
		n, _, err := decodeJobNode(item)
		if err != nil {
			return farm.RunJobNodePage{}, fmt.Errorf("list nodes of job %s: %w", q.Job, err)
		}
		page.Nodes = append(page.Nodes, n)
	}
	if more && len(page.Nodes) > 0 {
		page.Next = page.Nodes[len(page.Nodes)-1].Node
	}
	return page, nil
}

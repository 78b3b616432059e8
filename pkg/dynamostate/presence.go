package dynamostate

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/compilefarm/compilefarm/pkg/farm"
)

// The presence table (Options.PresenceTable, RolePresence) holds one item
// per PCP client:
//
//	uri (S, partition key), client_type (S), client_shard (S: client type "#" shard),
//	task (S), expires_ns (N: farm.Presence.Expires in Unix nanoseconds),
//	expires_at (N: the same in Unix seconds, rounded up: the table's time to live)
//	global secondary index by-client-shard: client_shard, uri (and task, expires_ns)
//
// A client's shard is the FNV-1a hash of its URI modulo PresenceShards, so
// one client type's records spread over that many keys of the index (see
// PresenceShards for why), and a record stays in its shard for good.
// client_type is kept for operators (and the old index, while a stack
// keeps it for an upgrade).
//
// Calls: SetPresence is one PutItem, ClearPresence one conditional
// DeleteItem, LookupPresence one GetItem (consistent read), QueryPresence
// PresenceShards Queries of by-client-shard per page, one per shard, run
// together (eventually consistent, each of about PageSize/PresenceShards
// items, expired items filtered out by DynamoDB), or one GetItem when the
// query names a common name (the URI is then known). IAM:
// dynamodb:PutItem, DeleteItem, GetItem on the table and dynamodb:Query on
// its index.

var _ farm.PresenceStore = (*Store)(nil)

// Attribute names of the presence items.
const (
	AttrURI         = "uri"
	AttrClientType  = "client_type"
	AttrClientShard = "client_shard" // the key of IndexByClientShard: presenceShardKey
	AttrTask        = "task"
	AttrExpiresNS   = "expires_ns"
	AttrExpiresAt   = "expires_at" // the presence table's TTL attribute
)

func (s *Store) presenceTable() (string, error) {
	if s.opts.PresenceTable == "" {
		return "", errors.New("dynamostate: no presence table (Options.PresenceTable)")
	}
	return s.opts.PresenceTable, nil
}

// presenceShardKey is the IndexByClientShard key of the client uri of
// clientType: the type, '#' and the uri's shard, 0 to PresenceShards-1
// (digits after the last '#', so two types' keys never meet).
func presenceShardKey(clientType, uri string) string {
	h := fnv.New32a()
	h.Write([]byte(uri))
	return shardKey(clientType, int(h.Sum32()%PresenceShards))
}

func shardKey(clientType string, shard int) string {
	return clientType + "#" + strconv.Itoa(shard)
}

func uriKey(uri string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{AttrURI: &types.AttributeValueMemberS{Value: uri}}
}

func numAttr(n int64) *types.AttributeValueMemberN {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(n, 10)}
}

// SetPresence records p with one PutItem, replacing any item of p.URI.
func (s *Store) SetPresence(ctx context.Context, p farm.Presence) error {
	if err := farm.CheckSetPresence(ctx, &p); err != nil {
		return err
	}
	table, err := s.presenceTable()
	if err != nil {
		return fmt.Errorf("set presence of %s: %w", p.URI, err)
	}
	ns := p.Expires.UnixNano()
	secs := p.Expires.Unix()
	if p.Expires.Nanosecond() > 0 {
		secs++ // never deleted before it expires
	}
	_, err = s.client.PutItem(ctx, &dynamodb.PutItemInput{
		TableName: aws.String(table),
		Item: map[string]types.AttributeValue{
			AttrURI:         &types.AttributeValueMemberS{Value: p.URI},
			AttrClientType:  &types.AttributeValueMemberS{Value: p.ClientType()},
			AttrClientShard: &types.AttributeValueMemberS{Value: presenceShardKey(p.ClientType(), p.URI)},
			AttrTask:        &types.AttributeValueMemberS{Value: p.Task},
			AttrExpiresNS:   numAttr(ns),
			AttrExpiresAt:   numAttr(secs),
		},
	})
	if err != nil {
		return fmt.Errorf("set presence of %s: %w", p.URI, translate(err, table))
	}
	return nil
}

// ClearPresence deletes the item of uri on condition that it names task.
func (s *Store) ClearPresence(ctx context.Context, uri, task string) error {
	if err := farm.CheckClearPresence(ctx, uri, task); err != nil {
		return err
	}
	table, err := s.presenceTable()
	if err != nil {
		return fmt.Errorf("clear presence of %s: %w", uri, err)
	}
	_, err = s.client.DeleteItem(ctx, &dynamodb.DeleteItemInput{
		TableName:                 aws.String(table),
		Key:                       uriKey(uri),
		ConditionExpression:       aws.String("#t = :t"),
		ExpressionAttributeNames:  map[string]string{"#t": AttrTask},
		ExpressionAttributeValues: map[string]types.AttributeValue{":t": &types.AttributeValueMemberS{Value: task}},
	})
	if err = translate(err, table); err != nil && !errors.Is(err, errLost) { // lost: another task's, or none
		return fmt.Errorf("clear presence of %s: %w", uri, err)
	}
	return nil
}

// decodePresence reads a presence item; ok is false for an expired one.
func decodePresence(item map[string]types.AttributeValue, now time.Time) (p farm.Presence, ok bool, err error) {
	uri, _ := item[AttrURI].(*types.AttributeValueMemberS)
	task, _ := item[AttrTask].(*types.AttributeValueMemberS)
	ns, _ := item[AttrExpiresNS].(*types.AttributeValueMemberN)
	if uri == nil || task == nil || ns == nil {
		return farm.Presence{}, false, fmt.Errorf("presence item %v lacks %s, %s or %s: %w", item[AttrURI], AttrURI, AttrTask, AttrExpiresNS, farm.ErrInvalid)
	}
	n, err := strconv.ParseInt(ns.Value, 10, 64)
	if err != nil {
		return farm.Presence{}, false, fmt.Errorf("presence item %s has %s %q: %w", uri.Value, AttrExpiresNS, ns.Value, farm.ErrInvalid)
	}
	p = farm.Presence{URI: uri.Value, Task: task.Value, Expires: time.Unix(0, n).UTC()}
	return p, p.Expires.After(now), nil
}

// LookupPresence reads the item of uri with one consistent GetItem.
func (s *Store) LookupPresence(ctx context.Context, uri string) (farm.Presence, error) {
	if err := farm.CheckLookupPresence(ctx, uri); err != nil {
		return farm.Presence{}, err
	}
	p, found, err := s.getPresence(ctx, uri, true)
	if err != nil {
		return farm.Presence{}, fmt.Errorf("look up presence of %s: %w", uri, err)
	}
	if !found {
		return farm.Presence{}, fmt.Errorf("look up presence of %s: %w", uri, farm.ErrNotFound)
	}
	return p, nil
}

// getPresence reads the unexpired record of uri; found is false when
// there is none.
func (s *Store) getPresence(ctx context.Context, uri string, consistent bool) (p farm.Presence, found bool, err error) {
	table, err := s.presenceTable()
	if err != nil {
		return farm.Presence{}, false, err
	}
	now := time.Now()
	out, err := s.client.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:      aws.String(table),
		Key:            uriKey(uri),
		ConsistentRead: aws.Bool(consistent),
	})
	if err != nil {
		return farm.Presence{}, false, translate(err, table)
	}
	if len(out.Item) == 0 {
		return farm.Presence{}, false, nil
	}
	return decodePresence(out.Item, now)
}

// QueryPresence reads a page of every shard of by-client-shard, each of
// about PageSize/PresenceShards items, with PresenceShards Queries run
// together, and merges them in URI order: a page holds what every shard
// read up to the lowest URI a shard stopped at (what lies beyond it in that
// shard is unread), at most PageSize records, so it may be short, or empty
// while Next is set (DynamoDB filters expired items out after reading
// them). With a common name the query names one URI, read with one
// GetItem.
func (s *Store) QueryPresence(ctx context.Context, q farm.PresenceQuery) (farm.PresencePage, error) {
	if err := farm.CheckQueryPresence(ctx, q); err != nil {
		return farm.PresencePage{}, err
	}
	table, err := s.presenceTable()
	if err != nil {
		return farm.PresencePage{}, fmt.Errorf("query presence of %s: %w", q.ClientType, err)
	}
	page := farm.PresencePage{Records: []farm.Presence{}}
	if q.CommonName != "" {
		uri := "pcp://" + q.CommonName + "/" + q.ClientType
		if uri <= q.After {
			return page, nil
		}
		p, found, err := s.getPresence(ctx, uri, false)
		if err != nil {
			return farm.PresencePage{}, fmt.Errorf("query presence of %s: %w", uri, err)
		}
		if found {
			page.Records = append(page.Records, p)
		}
		return page, nil
	}
	now := time.Now()
	limit := (q.PageSize() + PresenceShards - 1) / PresenceShards
	shards := make([]shardPage, PresenceShards)
	var wg sync.WaitGroup
	for i := range shards {
		wg.Add(1)
		go func() {
			defer wg.Done()
			shards[i] = s.queryPresenceShard(ctx, table, q, i, limit, now)
		}()
	}
	wg.Wait()
	// bound: the lowest URI a shard stopped at; every shard has been read
	// up to it.
	bound := ""
	for _, sp := range shards {
		if sp.err != nil {
			return farm.PresencePage{}, fmt.Errorf("query presence of %s: %w", q.ClientType, sp.err)
		}
		if sp.stoppedAt != "" && (bound == "" || sp.stoppedAt < bound) {
			bound = sp.stoppedAt
		}
	}
	for _, sp := range shards {
		for _, p := range sp.records {
			if bound == "" || p.URI <= bound {
				page.Records = append(page.Records, p)
			}
		}
	}
	slices.SortFunc(page.Records, func(a, b farm.Presence) int { return strings.Compare(a.URI, b.URI) })
	if n := q.PageSize(); len(page.Records) > n {
		page.Records = page.Records[:n]
		page.Next = page.Records[n-1].URI
		return page, nil
	}
	page.Next = bound
	return page, nil
}

// shardPage is what one shard's Query of a QueryPresence page read: its
// live records that match, and the URI it stopped at ("" when the shard
// has no more).
type shardPage struct {
	records   []farm.Presence
	stoppedAt string
	err       error
}

// queryPresenceShard reads up to limit items of q's client type in shard
// with one Query of by-client-shard.
func (s *Store) queryPresenceShard(ctx context.Context, table string, q farm.PresenceQuery, shard, limit int, now time.Time) shardPage {
	in := &dynamodb.QueryInput{
		TableName:                aws.String(table),
		IndexName:                aws.String(IndexByClientShard),
		KeyConditionExpression:   aws.String("#cs = :cs"),
		FilterExpression:         aws.String("#x > :now"),
		ExpressionAttributeNames: map[string]string{"#cs": AttrClientShard, "#x": AttrExpiresNS},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":cs":  &types.AttributeValueMemberS{Value: shardKey(q.ClientType, shard)},
			":now": numAttr(now.UnixNano()),
		},
		Limit: aws.Int32(int32(limit)),
	}
	if q.After != "" {
		in.KeyConditionExpression = aws.String("#cs = :cs AND #u > :a")
		in.ExpressionAttributeNames["#u"] = AttrURI
		in.ExpressionAttributeValues[":a"] = &types.AttributeValueMemberS{Value: q.After}
	}
	out, err := s.client.Query(ctx, in)
	if err != nil {
		return shardPage{err: translate(err, table)}
	}
	var sp shardPage
	for _, item := range out.Items {
		p, live, err := decodePresence(item, now)
		if err != nil {
			return shardPage{err: err}
		}
		if live && q.Matches(p) {
			sp.records = append(sp.records, p)
		}
	}
	if last, _ := out.LastEvaluatedKey[AttrURI].(*types.AttributeValueMemberS); last != nil {
		sp.stoppedAt = last.Value
	}
	return sp
}

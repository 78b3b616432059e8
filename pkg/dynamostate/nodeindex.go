package dynamostate

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/compilefarm/compilefarm/pkg/farm"
)

// QueryNodes answers q through the node-index table's IndexByEntry index:
// one Query for the page's certnames, then BatchGetItem (consistent reads,
// 100 keys a call) for their records. The index is eventually consistent,
// so records that no longer match q are left out (see farm.NodeStore).
func (s *Store) QueryNodes(ctx context.Context, q farm.NodeQuery) (farm.NodePage, error) {
	if err := farm.CheckQueryNodes(ctx, q); err != nil {
		return farm.NodePage{}, err
	}
	in := &dynamodb.QueryInput{
		TableName:                aws.String(s.opts.IndexTable),
		IndexName:                aws.String(IndexByEntry),
		KeyConditionExpression:   aws.String("#e = :e"),
		ExpressionAttributeNames: map[string]string{"#e": AttrEntry},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":e": &types.AttributeValueMemberS{Value: q.Entry()},
		},
		Limit: aws.Int32(int32(q.PageSize())),
	}
	if q.After != "" {
		in.KeyConditionExpression = aws.String("#e = :e AND #c > :a")
		in.ExpressionAttributeNames["#c"] = AttrCertname
		in.ExpressionAttributeValues[":a"] = &types.AttributeValueMemberS{Value: q.After}
	}
	out, err := s.client.Query(ctx, in)
	if err != nil {
		return farm.NodePage{}, fmt.Errorf("query nodes %s: %w", q.Entry(), translate(err, s.opts.IndexTable))
	}
	names := make([]string, 0, len(out.Items))
	for _, item := range out.Items {
		c, _ := item[AttrCertname].(*types.AttributeValueMemberS)
		if c == nil {
			return farm.NodePage{}, fmt.Errorf("query nodes %s: index item without a string %s: %w", q.Entry(), AttrCertname, farm.ErrInvalid)
		}
		names = append(names, c.Value)
	}
	page := farm.NodePage{Nodes: []farm.Node{}}
	if len(out.LastEvaluatedKey) > 0 && len(names) > 0 {
		page.Next = names[len(names)-1]
	}
	nodes, err := s.batchGetNodes(ctx, names)
	if err != nil {
		return farm.NodePage{}, fmt.Errorf("query nodes %s: %w", q.Entry(), err)
	}
	matched := map[string]bool{}
	for _, n := range nodes {
		if q.Matches(&n) {
			page.Nodes = append(page.Nodes, n)
			matched[n.Certname] = true
		}
	}
	for _, c := range names {
		if !matched[c] {
			s.dropStaleEntry(ctx, c, q.Entry())
		}
	}
	return page, nil
}

// batchGetNodes reads the records of names with consistent reads, 100 a
// call, retrying what DynamoDB leaves unprocessed; the result is in
// certname order and leaves out names without a record.
func (s *Store) batchGetNodes(ctx context.Context, names []string) ([]farm.Node, error) {
	var out []farm.Node
	for chunk := range slices.Chunk(names, 100) {
		keys := make([]map[string]types.AttributeValue, len(chunk))
		for i, c := range chunk {
			keys[i] = nodeKey(c)
		}
		req := map[string]types.KeysAndAttributes{s.opts.NodesTable: {Keys: keys, ConsistentRead: aws.Bool(true)}}
		for attempt := 0; len(req) > 0; attempt++ {
			if attempt > 0 {
				if err := s.pause(ctx, attempt, 0); err != nil {
					return nil, err
				}
			}
			res, err := s.client.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{RequestItems: req})
			if err != nil {
				return nil, translate(err, s.opts.NodesTable)
			}
			for _, item := range res.Responses[s.opts.NodesTable] {
				sn, err := decodeNode(item)
				if err != nil {
					return nil, err
				}
				out = append(out, sn.node)
			}
			req = res.UnprocessedKeys
			if attempt+1 >= s.opts.MaxAttempts && len(req) > 0 {
				return nil, fmt.Errorf("batch read of nodes: keys kept coming back unprocessed: %w", farm.ErrTransient)
			}
		}
	}
	slices.SortFunc(out, func(a, b farm.Node) int { return strings.Compare(a.Certname, b.Certname) })
	return out, nil
}

// entryChanges returns the index entries to remove and to add when a
// record with entries was changes to one with is.
func entryChanges(was, is []string) (remove, add []string) {
	for _, e := range was {
		if !slices.Contains(is, e) {
			remove = append(remove, e)
		}
	}
	for _, e := range is {
		if !slices.Contains(was, e) {
			add = append(add, e)
		}
	}
	return remove, add
}

func indexItemKey(certname, entry string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{
		AttrCertname: &types.AttributeValueMemberS{Value: certname},
		AttrEntry:    &types.AttributeValueMemberS{Value: entry},
	}
}

// nodeUpdate is the conditional write of a node record as version prev+1:
// an UpdateItem of the record and version attributes alone (attributes
// other writers keep on the item survive), on condition that the item is
// still at version prev (still absent when !exists).
func (s *Store) nodeUpdate(certname string, rec []byte, prev uint64, exists bool) *types.Update {
	u := &types.Update{
		TableName:                aws.String(s.opts.NodesTable),
		Key:                      nodeKey(certname),
		UpdateExpression:         aws.String("SET #r = :r, #v = :nv"),
		ConditionExpression:      aws.String("attribute_not_exists(#k)"),
		ExpressionAttributeNames: map[string]string{"#r": AttrRecord, "#v": AttrVersion, "#k": AttrCertname},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":r":  &types.AttributeValueMemberS{Value: string(rec)},
			":nv": &types.AttributeValueMemberN{Value: strconv.FormatUint(prev+1, 10)},
		},
	}
	if exists {
		delete(u.ExpressionAttributeNames, "#k")
		u.ConditionExpression = aws.String("#v = :v")
		u.ExpressionAttributeValues[":v"] = &types.AttributeValueMemberN{Value: strconv.FormatUint(prev, 10)}
	}
	return u
}

// putRecord writes the record with one conditional UpdateItem (errLost
// when the version condition fails) and keeps the node-index items in step
// without a transaction (DynamoDB charges double for those, and not every
// emulator has them): index items the record gains are put BEFORE the
// record is written, and the ones it loses deleted AFTER. Whatever fails
// in between, the index then holds every entry of the stored record, plus
// perhaps stale ones, which QueryNodes skips (it checks every record it
// reads) and removes once they are older than staleEntryAge.
func (s *Store) putRecord(ctx context.Context, certname string, rec []byte, prev uint64, exists bool, was, is []string) error {
	remove, add := entryChanges(was, is)
	if err := s.writeEntries(ctx, certname, add, nil); err != nil {
		return fmt.Errorf("add index entries of node %s: %w", certname, err)
	}
	u := s.nodeUpdate(certname, rec, prev, exists)
	_, err := s.client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: u.TableName, Key: u.Key, UpdateExpression: u.UpdateExpression,
		ConditionExpression: u.ConditionExpression, ExpressionAttributeNames: u.ExpressionAttributeNames,
		ExpressionAttributeValues: u.ExpressionAttributeValues,
	})
	if err != nil {
		return translate(err, s.opts.NodesTable) // a failed condition is errLost
	}
	// The record is written; an entry that fails to go is a stale one,
	// skipped by queries and removed by a later one.
	_ = s.writeEntries(ctx, certname, nil, remove)
	return nil
}

// staleEntryAge is how old an index item that does not match its node's
// record must be before a query deletes it: younger ones may belong to a
// write in progress (put before its record).
const staleEntryAge = 5 * time.Minute

// writeEntries puts (with the time, AttrAt) and deletes node-index items
// of certname, 25 a BatchWriteItem, retrying what comes back unprocessed.
func (s *Store) writeEntries(ctx context.Context, certname string, put, del []string) error {
	var reqs []types.WriteRequest
	now := &types.AttributeValueMemberN{Value: strconv.FormatInt(time.Now().Unix(), 10)}
	for _, e := range put {
		item := indexItemKey(certname, e)
		item[AttrAt] = now
		reqs = append(reqs, types.WriteRequest{PutRequest: &types.PutRequest{Item: item}})
	}
	for _, e := range del {
		reqs = append(reqs, types.WriteRequest{DeleteRequest: &types.DeleteRequest{Key: indexItemKey(certname, e)}})
	}
	for chunk := range slices.Chunk(reqs, 25) {
		pending := map[string][]types.WriteRequest{s.opts.IndexTable: chunk}
		for attempt := 0; len(pending) > 0; attempt++ {
			if attempt > 0 {
				if attempt >= s.opts.MaxAttempts {
					return fmt.Errorf("index writes kept coming back unprocessed: %w", farm.ErrTransient)
				}
				if err := s.pause(ctx, attempt, 0); err != nil {
					return err
				}
			}
			out, err := s.client.BatchWriteItem(ctx, &dynamodb.BatchWriteItemInput{RequestItems: pending})
			if err != nil {
				return translate(err, s.opts.IndexTable)
			}
			pending = out.UnprocessedItems
		}
	}
	return nil
}

// dropStaleEntry deletes the index item of certname under entry if it is
// older than staleEntryAge (a query found that the record does not match
// it). Failures are ignored: the next query tries again.
func (s *Store) dropStaleEntry(ctx context.Context, certname, entry string) {
	cutoff := strconv.FormatInt(time.Now().Add(-staleEntryAge).Unix(), 10)
	_, _ = s.client.DeleteItem(ctx, &dynamodb.DeleteItemInput{
		TableName:                 aws.String(s.opts.IndexTable),
		Key:                       indexItemKey(certname, entry),
		ConditionExpression:       aws.String("#at < :cutoff"),
		ExpressionAttributeNames:  map[string]string{"#at": AttrAt},
		ExpressionAttributeValues: map[string]types.AttributeValue{":cutoff": &types.AttributeValueMemberN{Value: cutoff}},
	})
}

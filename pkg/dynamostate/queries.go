package dynamostate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/compilefarm/compilefarm/pkg/farm"
)

// The queries table (Options.QueriesTable, RoleQueries) holds the recorded
// PuppetDB queries (farm.QueryStore) under one partition, sorted by key:
//
//	list (S, partition key: QueriesListValue), query (S, sort key: farm.QueryState.Key, "ENV|DIGEST"),
//	record (S: farm.QueryState as JSON), version (N)
//
// One partition, because ListQueries pages through every query in order
// with Query (no Scan on any path), and because the table is small and
// quiet: a site has tens to thousands of distinct queries, each written
// once when first recorded and about once per refresh round (a few writes
// a second at most, far below a partition's limits).
//
// Calls: RecordQueries is one BatchGetItem (consistent, keys only) per 100
// queries, then one PutItem, conditional on the item not existing, per
// query not recorded yet: a compile whose queries are all known writes
// nothing. ListQueries is one consistent Query per page (one item more
// than the page, so the last page has no Next). SetQueryState is one
// UpdateItem conditional on the version; when the condition fails, one
// GetItem tells a missing query (ErrNotFound) from a newer version
// (ErrConflict). IAM: dynamodb:BatchGetItem, PutItem, Query, UpdateItem and
// GetItem on the table.

var _ farm.QueryStore = (*Store)(nil)

// Attribute names and values of the queries table's items.
const (
	AttrQuery        = "query" // sort key: farm.QueryState.Key
	QueriesListValue = "queries"
)

func (s *Store) queriesTable() (string, error) {
	if s.opts.QueriesTable == "" {
		return "", errors.New("dynamostate: no queries table (Options.QueriesTable)")
	}
	return s.opts.QueriesTable, nil
}

func queryItemKey(key string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{
		AttrList:  &types.AttributeValueMemberS{Value: QueriesListValue},
		AttrQuery: &types.AttributeValueMemberS{Value: key},
	}
}

// decodeQuery reads a queries table item: the record, its Version the
// item's version attribute.
func decodeQuery(item map[string]types.AttributeValue) (farm.QueryState, error) {
	key, _ := item[AttrQuery].(*types.AttributeValueMemberS)
	if key == nil {
		return farm.QueryState{}, fmt.Errorf("query item without a string %s: %w", AttrQuery, farm.ErrInvalid)
	}
	st, v, err := decodeRecord[farm.QueryState](item, "query "+key.Value)
	if err != nil {
		return farm.QueryState{}, err
	}
	if st.Key() != key.Value {
		return farm.QueryState{}, fmt.Errorf("item of query %s holds the record of %s: %w", key.Value, st.Key(), farm.ErrInvalid)
	}
	st.Version = v
	return st, nil
}

// RecordQueries puts the queries not recorded yet; see the calls above.
func (s *Store) RecordQueries(ctx context.Context, environment string, queries []farm.Digest) error {
	if err := farm.CheckRecordQueries(ctx, environment, queries); err != nil {
		return err
	}
	table, err := s.queriesTable()
	if err != nil {
		return fmt.Errorf("record queries of %s: %w", environment, err)
	}
	missing, err := s.missingQueries(ctx, table, environment, queries)
	if err != nil {
		return fmt.Errorf("record queries of %s: %w", environment, err)
	}
	for _, st := range missing {
		rec, err := json.Marshal(st)
		if err != nil {
			return fmt.Errorf("record query %s of %s: encode: %v: %w", st.Query, environment, err, farm.ErrInvalid)
		}
		item := queryItemKey(st.Key())
		item[AttrRecord] = &types.AttributeValueMemberS{Value: string(rec)}
		item[AttrVersion] = numAttr(int64(st.Version))
		_, err = s.client.PutItem(ctx, &dynamodb.PutItemInput{
			TableName:                aws.String(table),
			Item:                     item,
			ConditionExpression:      aws.String("attribute_not_exists(#q)"),
			ExpressionAttributeNames: map[string]string{"#q": AttrQuery},
		})
		if err = translate(err, table); err != nil && !errors.Is(err, errLost) { // lost: recorded meanwhile
			return fmt.Errorf("record query %s of %s: %w", st.Query, environment, err)
		}
	}
	return nil
}

// missingQueries returns the new records of the queries the table does not
// hold for environment, each once, read with BatchGetItem (keys only).
func (s *Store) missingQueries(ctx context.Context, table, environment string, queries []farm.Digest) ([]farm.QueryState, error) {
	want := map[string]farm.QueryState{}
	for _, d := range queries {
		st := farm.QueryState{Environment: environment, Query: d, Version: 1}
		want[st.Key()] = st
	}
	keys := slices.Sorted(func(yield func(string) bool) {
		for k := range want {
			if !yield(k) {
				return
			}
		}
	})
	for chunk := range slices.Chunk(keys, 100) {
		req := &types.KeysAndAttributes{
			ConsistentRead:           aws.Bool(true),
			ProjectionExpression:     aws.String("#q"),
			ExpressionAttributeNames: map[string]string{"#q": AttrQuery},
		}
		for _, k := range chunk {
			req.Keys = append(req.Keys, queryItemKey(k))
		}
		reqs := map[string]types.KeysAndAttributes{table: *req}
		for attempt := 0; len(reqs) > 0; attempt++ {
			if attempt > 0 {
				if err := s.pause(ctx, attempt, 0); err != nil {
					return nil, err
				}
			}
			out, err := s.client.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{RequestItems: reqs})
			if err != nil {
				return nil, translate(err, table)
			}
			for _, item := range out.Responses[table] {
				if k, ok := item[AttrQuery].(*types.AttributeValueMemberS); ok {
					delete(want, k.Value)
				}
			}
			reqs = out.UnprocessedKeys
			if attempt+1 >= s.opts.MaxAttempts && len(reqs) > 0 {
				return nil, fmt.Errorf("batch get of queries: keys kept coming back unprocessed: %w", farm.ErrTransient)
			}
		}
	}
	out := make([]farm.QueryState, 0, len(want))
	for _, k := range keys {
		if st, ok := want[k]; ok {
			out = append(out, st)
		}
	}
	return out, nil
}

// ListQueries reads a page of the table's one partition with one
// consistent Query of one item more than the page.
func (s *Store) ListQueries(ctx context.Context, l farm.QueryList) (farm.QueryPage, error) {
	if err := farm.CheckListQueries(ctx, l); err != nil {
		return farm.QueryPage{}, err
	}
	table, err := s.queriesTable()
	if err != nil {
		return farm.QueryPage{}, fmt.Errorf("list queries: %w", err)
	}
	in := &dynamodb.QueryInput{
		TableName:                 aws.String(table),
		KeyConditionExpression:    aws.String("#l = :l"),
		ExpressionAttributeNames:  map[string]string{"#l": AttrList},
		ExpressionAttributeValues: map[string]types.AttributeValue{":l": &types.AttributeValueMemberS{Value: QueriesListValue}},
		ConsistentRead:            aws.Bool(true),
		Limit:                     aws.Int32(int32(l.PageSize() + 1)),
	}
	if l.After != "" {
		in.KeyConditionExpression = aws.String("#l = :l AND #q > :a")
		in.ExpressionAttributeNames["#q"] = AttrQuery
		in.ExpressionAttributeValues[":a"] = &types.AttributeValueMemberS{Value: l.After}
	}
	out, err := s.client.Query(ctx, in)
	if err != nil {
		return farm.QueryPage{}, fmt.Errorf("list queries: %w", translate(err, table))
	}
	var p farm.QueryPage
	more := len(out.LastEvaluatedKey) > 0
	items := out.Items
	if len(items) > l.PageSize() {
		items, more = items[:l.PageSize()], true
	}
	for _, item := range items {
		st, err := decodeQuery(item)
		if err != nil {
			return farm.QueryPage{}, fmt.Errorf("list queries: %w", err)
		}
		p.Queries = append(p.Queries, st)
	}
	if more && len(p.Queries) > 0 {
		p.Next = p.Queries[len(p.Queries)-1].Key()
	}
	return p, nil
}

// SetQueryState writes st with one UpdateItem conditional on its version;
// see the calls above.
func (s *Store) SetQueryState(ctx context.Context, st farm.QueryState) (farm.QueryState, error) {
	if err := farm.CheckSetQueryState(ctx, &st); err != nil {
		return farm.QueryState{}, err
	}
	fail := func(err error) (farm.QueryState, error) {
		return farm.QueryState{}, fmt.Errorf("set state of query %s in %s: %w", st.Query, st.Environment, err)
	}
	table, err := s.queriesTable()
	if err != nil {
		return fail(err)
	}
	next := st
	next.Version++
	rec, err := json.Marshal(next)
	if err != nil {
		return fail(fmt.Errorf("encode: %v: %w", err, farm.ErrInvalid))
	}
	_, err = s.client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                aws.String(table),
		Key:                      queryItemKey(st.Key()),
		UpdateExpression:         aws.String("SET #r = :r, #v = :nv"),
		ConditionExpression:      aws.String("#v = :v"),
		ExpressionAttributeNames: map[string]string{"#r": AttrRecord, "#v": AttrVersion},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":r":  &types.AttributeValueMemberS{Value: string(rec)},
			":v":  numAttr(int64(st.Version)),
			":nv": numAttr(int64(next.Version)),
		},
	})
	err = translate(err, table)
	if errors.Is(err, errLost) {
		return fail(s.whyNotSet(ctx, table, &st))
	}
	if err != nil {
		return fail(err)
	}
	return next, nil
}

// whyNotSet tells, with one GetItem, why a SetQueryState's condition
// failed: the query is not recorded, or its version moved on.
func (s *Store) whyNotSet(ctx context.Context, table string, st *farm.QueryState) error {
	out, err := s.client.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:                aws.String(table),
		Key:                      queryItemKey(st.Key()),
		ConsistentRead:           aws.Bool(true),
		ProjectionExpression:     aws.String("#v"),
		ExpressionAttributeNames: map[string]string{"#v": AttrVersion},
	})
	if err != nil {
		return translate(err, table)
	}
	if len(out.Item) == 0 {
		return fmt.Errorf("not recorded: %w", farm.ErrNotFound)
	}
	v := "?"
	if n, ok := out.Item[AttrVersion].(*types.AttributeValueMemberN); ok {
		v = n.Value
	}
	return fmt.Errorf("version %s, not %d: %w", v, st.Version, farm.ErrConflict)
}

package dynamostate

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/compilefarm/compilefarm/pkg/farm"
)

// The presence table (Options.PresenceTable, RolePresence) holds one item
// per PCP client:
//
//	uri (S, partition key), client_type (S), task (S),
//	expires_ns (N: farm.Presence.Expires in Unix nanoseconds),
//	expires_at (N: the same in Unix seconds, rounded up: the table's time to live)
//	global secondary index by-client-type: client_type, uri (all attributes)
//
// Calls: SetPresence is one PutItem, ClearPresence one conditional
// DeleteItem, LookupPresence one GetItem (consistent read), QueryPresence
// one Query of by-client-type per page (eventually consistent, expired items
// filtered out by DynamoDB), or one GetItem when the query names a common
// name (the URI is then known). IAM: dynamodb:PutItem, DeleteItem, GetItem
// on the table and dynamodb:Query on its index.

var _ farm.PresenceStore = (*Store)(nil)

// Attribute names of the presence items.
const (
	AttrURI        = "uri"
	AttrClientType = "client_type"
	AttrTask       = "task"
	AttrExpiresNS  = "expires_ns"
	AttrExpiresAt  = "expires_at" // the presence table's TTL attribute
)

func (s *Store) presenceTable() (string, error) {
	if s.opts.PresenceTable == "" {
		return "", errors.New("dynamostate: no presence table (Options.PresenceTable)")
	}
	return s.opts.PresenceTable, nil
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
			AttrURI:        &types.AttributeValueMemberS{Value: p.URI},
			AttrClientType: &types.AttributeValueMemberS{Value: p.ClientType()},
			AttrTask:       &types.AttributeValueMemberS{Value: p.Task},
			AttrExpiresNS:  numAttr(ns),
			AttrExpiresAt:  numAttr(secs),
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

// QueryPresence reads a page of by-client-type with one Query; DynamoDB
// filters the expired items out after reading Limit of them, so a page may
// be short (or empty) with Next set. With a common name the query names one
// URI, read with one GetItem.
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
	in := &dynamodb.QueryInput{
		TableName:                aws.String(table),
		IndexName:                aws.String(IndexByClientType),
		KeyConditionExpression:   aws.String("#ct = :ct"),
		FilterExpression:         aws.String("#x > :now"),
		ExpressionAttributeNames: map[string]string{"#ct": AttrClientType, "#x": AttrExpiresNS},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":ct":  &types.AttributeValueMemberS{Value: q.ClientType},
			":now": numAttr(now.UnixNano()),
		},
		Limit: aws.Int32(int32(q.PageSize())),
	}
	if q.After != "" {
		in.KeyConditionExpression = aws.String("#ct = :ct AND #u > :a")
		in.ExpressionAttributeNames["#u"] = AttrURI
		in.ExpressionAttributeValues[":a"] = &types.AttributeValueMemberS{Value: q.After}
	}
	out, err := s.client.Query(ctx, in)
	if err != nil {
		return farm.PresencePage{}, fmt.Errorf("query presence of %s: %w", q.ClientType, translate(err, table))
	}
	for _, item := range out.Items {
		p, live, err := decodePresence(item, now)
		if err != nil {
			return farm.PresencePage{}, fmt.Errorf("query presence of %s: %w", q.ClientType, err)
		}
		if live && q.Matches(p) {
			page.Records = append(page.Records, p)
		}
	}
	if last, _ := out.LastEvaluatedKey[AttrURI].(*types.AttributeValueMemberS); last != nil {
		page.Next = last.Value
	}
	return page, nil
}

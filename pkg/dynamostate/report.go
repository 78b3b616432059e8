package dynamostate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/compilefarm/compilefarm/pkg/farm"
)

// Attributes of the report summary RecordReport keeps on a node's item,
// beside its record: AttrReport is a map of the report's time (Unix
// nanoseconds, which the "newer report wins" condition compares) and the
// farm.ReportSummary as JSON. UpdateNode writes only record and version,
// so the two writers never overwrite each other's attributes, and neither
// bumps the other's concurrency token.
const (
	AttrReport        = "report"
	attrReportAt      = "at"
	attrReportSummary = "summary"
)

// RecordReport keeps sum as the node's latest report summary with one
// conditional UpdateItem of the report attribute, which reads nothing
// first: the condition requires the node's item and a recorded report no
// newer than sum, and the update returns the attribute it replaced
// (ReturnValues costs no read capacity). A write is billed by the size of
// the whole item, record included. Only when the condition fails does it
// read the item (projecting the key and the report), to tell an unknown
// node (farm.ErrNotFound) from a newer report (farm.ErrConflict).
func (s *Store) RecordReport(ctx context.Context, certname string, sum farm.ReportSummary) (*farm.ReportSummary, error) {
	if err := farm.CheckRecordReport(ctx, certname, sum); err != nil {
		return nil, err
	}
	js, err := json.Marshal(sum)
	if err != nil {
		return nil, fmt.Errorf("record report of %s: encode: %v: %w", certname, err, farm.ErrInvalid)
	}
	at := &types.AttributeValueMemberN{Value: strconv.FormatInt(sum.At.UnixNano(), 10)}
	out, err := s.client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:           aws.String(s.opts.NodesTable),
		Key:                 nodeKey(certname),
		UpdateExpression:    aws.String("SET #rep = :rep"),
		ConditionExpression: aws.String("attribute_exists(#k) AND (attribute_not_exists(#rep) OR #rep.#at <= :at)"),
		ExpressionAttributeNames: map[string]string{
			"#k": AttrCertname, "#rep": AttrReport, "#at": attrReportAt,
		},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":rep": &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{
				attrReportAt:      at,
				attrReportSummary: &types.AttributeValueMemberS{Value: string(js)},
			}},
			":at": at,
		},
		ReturnValues: types.ReturnValueUpdatedOld,
	})
	if err = translate(err, s.opts.NodesTable); errors.Is(err, errLost) {
		err = s.notRecorded(ctx, certname, sum)
	}
	if err != nil {
		return nil, fmt.Errorf("record report of %s: %w", certname, err)
	}
	prev, err := decodeReport(certname, out.Attributes[AttrReport])
	if err != nil {
		return nil, fmt.Errorf("record report of %s: the summary it replaced: %w", certname, err)
	}
	return prev, nil
}

// notRecorded says why RecordReport's condition failed: no item, or a
// newer report on it.
func (s *Store) notRecorded(ctx context.Context, certname string, sum farm.ReportSummary) error {
	out, err := s.client.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:                aws.String(s.opts.NodesTable),
		Key:                      nodeKey(certname),
		ConsistentRead:           aws.Bool(true),
		ProjectionExpression:     aws.String("#k, #rep"),
		ExpressionAttributeNames: map[string]string{"#k": AttrCertname, "#rep": AttrReport},
	})
	if err != nil {
		return translate(err, s.opts.NodesTable)
	}
	if len(out.Item) == 0 {
		return farm.ErrNotFound
	}
	kept, err := decodeReport(certname, out.Item[AttrReport])
	if err != nil {
		return err
	}
	if kept == nil { // the condition failed on an item that has none: it cannot be older
		return fmt.Errorf("the conditional write failed, yet the item has no report: %w", farm.ErrConflict)
	}
	return farm.ReportOlder(*kept, sum)
}

// decodeReport decodes a report attribute; nil when v is nil.
func decodeReport(certname string, v types.AttributeValue) (*farm.ReportSummary, error) {
	if v == nil {
		return nil, nil
	}
	m, _ := v.(*types.AttributeValueMemberM)
	var js *types.AttributeValueMemberS
	if m != nil {
		js, _ = m.Value[attrReportSummary].(*types.AttributeValueMemberS)
	}
	if js == nil {
		return nil, fmt.Errorf("item of node %s has a %s attribute that is not a map with a string %s: %w",
			certname, AttrReport, attrReportSummary, farm.ErrInvalid)
	}
	var sum farm.ReportSummary
	if err := json.Unmarshal([]byte(js.Value), &sum); err != nil {
		return nil, fmt.Errorf("report summary of node %s is unreadable: %v: %w", certname, err, farm.ErrInvalid)
	}
	return &sum, nil
}

// overlayReport lays the summary RecordReport kept on the item over n's
// Report (farm.Node.OverlayReport): decodeNode calls it, so every read of
// a node item presents the two as one.
func overlayReport(item map[string]types.AttributeValue, n *farm.Node) error {
	rec, err := decodeReport(n.Certname, item[AttrReport])
	if err != nil {
		return err
	}
	n.OverlayReport(rec)
	return nil
}

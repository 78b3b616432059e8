package lambdaruntime

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// Poller does what Lambda's SQS event source mapping does: it receives
// batches from a queue, invokes the function with an SQS event, and deletes
// the messages the function did not report as failed (ReportBatchItemFailures);
// failed ones become visible again after the queue's visibility timeout,
// and the queue's redrive policy dead-letters them.
type Poller struct {
	SQS       *sqs.Client
	QueueURL  string
	QueueARN  string
	Region    string
	BatchSize int32 // default 10
	Runtime   *Runtime
	// VisibilityTimeout, when set, overrides the queue's for received
	// messages (seconds), so tests need not wait out the default 30s.
	VisibilityTimeout int32
}

// PollOnce receives one batch (waiting up to waitSeconds) and runs it
// through the function. It returns how many messages it handed over and
// how many the function reported failed.
func (p *Poller) PollOnce(ctx context.Context, waitSeconds int32) (received, failed int, err error) {
	n := p.BatchSize
	if n <= 0 {
		n = 10
	}
	out, err := p.SQS.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
		QueueUrl: aws.String(p.QueueURL), MaxNumberOfMessages: n, WaitTimeSeconds: waitSeconds,
		VisibilityTimeout:           p.VisibilityTimeout,
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
		MessageAttributeNames:       []string{"All"},
	})
	if err != nil {
		return 0, 0, fmt.Errorf("receive from %s: %w", p.QueueURL, err)
	}
	if len(out.Messages) == 0 {
		return 0, 0, nil
	}
	ev := events.SQSEvent{}
	receipts := map[string]string{}
	for _, m := range out.Messages {
		rec := events.SQSMessage{
			MessageId: aws.ToString(m.MessageId), ReceiptHandle: aws.ToString(m.ReceiptHandle),
			Body: aws.ToString(m.Body), Md5OfBody: aws.ToString(m.MD5OfBody),
			Attributes: map[string]string{}, MessageAttributes: map[string]events.SQSMessageAttribute{},
			EventSource: "aws:sqs", EventSourceARN: p.QueueARN, AWSRegion: p.Region,
		}
		for k, v := range m.Attributes {
			rec.Attributes[k] = v
		}
		for k, v := range m.MessageAttributes {
			rec.MessageAttributes[k] = events.SQSMessageAttribute{
				DataType: aws.ToString(v.DataType), StringValue: v.StringValue, BinaryValue: v.BinaryValue,
			}
		}
		ev.Records = append(ev.Records, rec)
		receipts[rec.MessageId] = rec.ReceiptHandle
	}
	payload, err := json.Marshal(ev)
	if err != nil {
		return 0, 0, fmt.Errorf("encode SQS event: %w", err)
	}
	respBody, err := p.Runtime.Invoke(ctx, payload)
	if err != nil {
		// A failed invocation deletes nothing: the whole batch comes back.
		return len(ev.Records), len(ev.Records), fmt.Errorf("invoke with %d messages: %w", len(ev.Records), err)
	}
	var resp events.SQSEventResponse
	if len(respBody) > 0 && string(respBody) != "null" {
		if err := json.Unmarshal(respBody, &resp); err != nil {
			return len(ev.Records), len(ev.Records), fmt.Errorf("decode the function's batch response %q: %w", respBody, err)
		}
	}
	for _, f := range resp.BatchItemFailures {
		delete(receipts, f.ItemIdentifier)
	}
	var entries []types.DeleteMessageBatchRequestEntry
	i := 0
	for _, handle := range receipts {
		entries = append(entries, types.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: aws.String(handle)})
		i++
	}
	if len(entries) > 0 {
		res, err := p.SQS.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(p.QueueURL), Entries: entries})
		if err != nil {
			return len(ev.Records), len(resp.BatchItemFailures), fmt.Errorf("delete handled messages: %w", err)
		}
		if len(res.Failed) > 0 {
			return len(ev.Records), len(resp.BatchItemFailures), fmt.Errorf("delete handled messages: %d failed (%s)", len(res.Failed), aws.ToString(res.Failed[0].Message))
		}
	}
	return len(ev.Records), len(resp.BatchItemFailures), nil
}

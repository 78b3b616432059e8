package sqsqueue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"

	"github.com/compilefarm/compilefarm/pkg/farm"
)

// QueueURLs are the four queues EnsureQueues makes for a prefix.
type QueueURLs struct {
	UrgentURL, BulkURL       string
	UrgentDLQURL, BulkDLQURL string
}

// Options returns Options for the lanes, with the other fields zero.
func (u QueueURLs) Options() Options { return Options{UrgentURL: u.UrgentURL, BulkURL: u.BulkURL} }

// DLQ returns the dead-letter queue URL of a lane.
func (u QueueURLs) DLQ(lane farm.Lane) string {
	if lane == farm.LaneUrgent {
		return u.UrgentDLQURL
	}
	return u.BulkDLQURL
}

// QueueNames returns the names EnsureQueues gives a lane's queue and its
// dead-letter queue: PREFIX-LANE and PREFIX-LANE-dlq.
func QueueNames(prefix string, lane farm.Lane) (queue, dlq string) {
	return prefix + "-" + string(lane), prefix + "-" + string(lane) + "-dlq"
}

var prefixRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,69}$`)

// dlqRetention is how long a dead-lettered job is kept: 14 days, SQS's
// maximum, so an operator has time to look at it.
const dlqRetention = 14 * 24 * 60 * 60

// EnsureQueues creates, when missing, the urgent and bulk queues for
// prefix, each with a dead-letter queue that receives a job after
// maxReceiveCount deliveries (RedrivePolicy), and returns their URLs. For
// tests and development; in AWS the CDK app creates the queues. An
// existing queue gets its RedrivePolicy set. The prefix must be 1 to 69
// letters, digits, '-' or '_' (queue names are at most 80); maxReceiveCount
// is 1 to 1000.
func EnsureQueues(ctx context.Context, client *sqs.Client, prefix string, maxReceiveCount int) (QueueURLs, error) {
	if !prefixRE.MatchString(prefix) {
		return QueueURLs{}, fmt.Errorf("sqsqueue: queue prefix %q must be 1 to 69 letters, digits, '-' or '_': %w", prefix, farm.ErrInvalid)
	}
	if maxReceiveCount < 1 || maxReceiveCount > 1000 {
		return QueueURLs{}, fmt.Errorf("sqsqueue: maxReceiveCount %d is not between 1 and 1000: %w", maxReceiveCount, farm.ErrInvalid)
	}
	var urls QueueURLs
	for _, lane := range []farm.Lane{farm.LaneUrgent, farm.LaneBulk} {
		name, dlqName := QueueNames(prefix, lane)
		dlq, err := ensureQueue(ctx, client, dlqName, map[string]string{
			string(types.QueueAttributeNameMessageRetentionPeriod): strconv.Itoa(dlqRetention),
		})
		if err != nil {
			return QueueURLs{}, err
		}
		attrs, err := client.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
			QueueUrl:       aws.String(dlq),
			AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn},
		})
		if err != nil {
			return QueueURLs{}, translate("read the ARN of queue "+dlqName, err, false)
		}
		arn := attrs.Attributes[string(types.QueueAttributeNameQueueArn)]
		if arn == "" {
			return QueueURLs{}, fmt.Errorf("sqsqueue: queue %s has no QueueArn attribute", dlqName)
		}
		policy, _ := json.Marshal(map[string]string{
			"deadLetterTargetArn": arn,
			"maxReceiveCount":     strconv.Itoa(maxReceiveCount),
		})
		url, err := ensureQueue(ctx, client, name, map[string]string{
			string(types.QueueAttributeNameRedrivePolicy): string(policy),
		})
		if err != nil {
			return QueueURLs{}, err
		}
		if lane == farm.LaneUrgent {
			urls.UrgentURL, urls.UrgentDLQURL = url, dlq
		} else {
			urls.BulkURL, urls.BulkDLQURL = url, dlq
		}
	}
	return urls, nil
}

// ensureQueue creates a queue with attrs (standard unless they say
// FifoQueue), or sets attrs on the existing queue of that name.
func ensureQueue(ctx context.Context, client *sqs.Client, name string, attrs map[string]string) (string, error) {
	out, err := client.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name), Attributes: attrs})
	if err == nil {
		return aws.ToString(out.QueueUrl), nil
	}
	var ae smithy.APIError
	if !errors.As(err, &ae) || (apiCode(ae) != "QueueNameExists" && apiCode(ae) != "QueueAlreadyExists") {
		return "", translate("create queue "+name, err, false)
	}
	got, err := client.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(name)})
	if err != nil {
		return "", translate("find queue "+name, err, false)
	}
	attrs = maps.Clone(attrs)
	delete(attrs, string(types.QueueAttributeNameFifoQueue)) // fixed when the queue was made
	if _, err := client.SetQueueAttributes(ctx, &sqs.SetQueueAttributesInput{QueueUrl: got.QueueUrl, Attributes: attrs}); err != nil {
		return "", translate("set attributes of queue "+name, err, false)
	}
	return aws.ToString(got.QueueUrl), nil
}

// OutboxQueueURLs are the two queues EnsureOutboxQueues makes.
type OutboxQueueURLs struct {
	QueueURL, DeadLetterURL string
}

// Options returns OutboxOptions for the queues, with the other fields zero.
func (u OutboxQueueURLs) Options() OutboxOptions {
	return OutboxOptions{QueueURL: u.QueueURL, DeadLetterURL: u.DeadLetterURL}
}

// OutboxQueueNames returns the names EnsureOutboxQueues gives the outbox
// queue and its dead-letter queue: NAME.fifo and NAME-dlq.fifo.
func OutboxQueueNames(name string) (queue, dlq string) {
	return name + ".fifo", name + "-dlq.fifo"
}

var outboxNameRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,71}$`)

// outboxRetention is how long the outbox queues keep a message: 14 days,
// SQS's most, for a PuppetDB down that long and for an operator to look
// at dead letters.
const outboxRetention = 14 * 24 * 60 * 60

// EnsureOutboxQueues creates, when missing, the FIFO queues of an Outbox:
// NAME.fifo and its dead-letter queue NAME-dlq.fifo, with explicit
// deduplication IDs (no ContentBasedDeduplication), deduplication and
// throughput per message group (SQS's high-throughput FIFO), a retention
// of 14 days and a maximum message size of 256 KiB; the outbox queue has
// no redrive policy (see Outbox). An existing queue gets these attributes
// set. For tests and development; in AWS the CDK app creates the queues.
// The name must be 1 to 71 letters, digits, '-' or '_'.
func EnsureOutboxQueues(ctx context.Context, client *sqs.Client, name string) (OutboxQueueURLs, error) {
	if !outboxNameRE.MatchString(name) {
		return OutboxQueueURLs{}, fmt.Errorf("sqsqueue: outbox queue name %q must be 1 to 71 letters, digits, '-' or '_': %w", name, farm.ErrInvalid)
	}
	attrs := map[string]string{
		string(types.QueueAttributeNameFifoQueue):                 "true",
		string(types.QueueAttributeNameContentBasedDeduplication): "false",
		string(types.QueueAttributeNameDeduplicationScope):        "messageGroup",
		string(types.QueueAttributeNameFifoThroughputLimit):       "perMessageGroupId",
		string(types.QueueAttributeNameMessageRetentionPeriod):    strconv.Itoa(outboxRetention),
		string(types.QueueAttributeNameMaximumMessageSize):        strconv.Itoa(maxSQSMessage),
	}
	queue, dlq := OutboxQueueNames(name)
	var urls OutboxQueueURLs
	var err error
	if urls.DeadLetterURL, err = ensureQueue(ctx, client, dlq, attrs); err != nil {
		return OutboxQueueURLs{}, err
	}
	if urls.QueueURL, err = ensureQueue(ctx, client, queue, attrs); err != nil {
		return OutboxQueueURLs{}, err
	}
	return urls, nil
}

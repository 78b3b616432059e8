package farmstack

import (
	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssqs"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"
)

// MaxReceives is the compile queues' maxReceiveCount: a job delivered this
// many times without a stored catalog moves to the dead-letter queue. The
// compile function is told the same number (COMPILEFARM_MAX_RECEIVES), so it
// knows a delivery is the last one.
const MaxReceives = 3

// VisibilityFactor is the compile queues' visibility timeout over the
// compile function's timeout. AWS recommends at least 6x for an SQS event
// source: the poller may retry a throttled invocation of a batch several
// times while its messages stay invisible, and a message must not
// reappear (and be compiled twice) while a batch holding it still runs.
// The cost: a job the function reports failed is delivered again only when
// its visibility timeout ends (30 minutes with the default 300 s timeout).
const VisibilityFactor = 6

// Lane is one compile lane: its queue and dead-letter queue.
type Lane struct {
	Name  string // "urgent" or "bulk" (farm.Lane)
	Queue awssqs.Queue
	DLQ   awssqs.Queue
}

// Queues are the urgent and bulk compile queues, each with its dead-letter
// queue.
type Queues struct {
	Construct    constructs.Construct // the construct holding the resources
	Urgent, Bulk *Lane
}

// Lanes returns the lanes, urgent first.
func (q *Queues) Lanes() []*Lane { return []*Lane{q.Urgent, q.Bulk} }

// NewQueues declares the queues; compileTimeout is the compile function's
// timeout (the visibility timeout is VisibilityFactor times it).
func NewQueues(scope constructs.Construct, id string, cfg Config, compileTimeout awscdk.Duration) *Queues {
	q := &Queues{Construct: constructs.NewConstruct(scope, jsii.String(id))}
	visibility := awscdk.Duration_Seconds(jsii.Number(*compileTimeout.ToSeconds(nil) * VisibilityFactor))
	lane := func(name string) *Lane {
		dlq := awssqs.NewQueue(q.Construct, jsii.String(name+"-dlq"), &awssqs.QueueProps{
			QueueName:       jsii.String(cfg.Name(name + "-dlq")),
			Encryption:      awssqs.QueueEncryption_SQS_MANAGED,
			EnforceSSL:      jsii.Bool(true),
			RetentionPeriod: awscdk.Duration_Days(jsii.Number(14)), // the maximum: time to look at what failed
		})
		main := awssqs.NewQueue(q.Construct, jsii.String(name), &awssqs.QueueProps{
			QueueName:         jsii.String(cfg.Name(name)),
			Encryption:        awssqs.QueueEncryption_SQS_MANAGED,
			EnforceSSL:        jsii.Bool(true),
			VisibilityTimeout: visibility,
			// A compile job older than 4 days is stale anyway: the agent
			// asked again long since, and that queued a newer one.
			RetentionPeriod: awscdk.Duration_Days(jsii.Number(4)),
			DeadLetterQueue: &awssqs.DeadLetterQueue{Queue: dlq, MaxReceiveCount: jsii.Number(MaxReceives)},
		})
		return &Lane{Name: name, Queue: main, DLQ: dlq}
	}
	q.Urgent, q.Bulk = lane("urgent"), lane("bulk")
	return q
}

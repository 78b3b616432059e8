package lambdaruntime

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/compilefarm/compilefarm/internal/emulator"
)

// TestPollerLikeEventSourceMapping runs SQS messages through a real
// function: handled ones are deleted, failed ones come back after the
// visibility timeout and land on the dead-letter queue after
// maxReceiveCount receives.
func TestPollerLikeEventSourceMapping(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the SQS emulator; skipped with -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	emu, err := emulator.StartSQS(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer emu.Stop()
	rt := startEcho(t)

	client := sqs.New(sqs.Options{Region: "us-east-1", BaseEndpoint: aws.String(emu.URL),
		Credentials: credentials.NewStaticCredentialsProvider("test", "test", "")})
	dlq, err := client.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("esm-dlq")})
	if err != nil {
		t.Fatal(err)
	}
	dlqAttrs, err := client.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: dlq.QueueUrl, AttributeNames: []types.QueueAttributeName{"QueueArn"}})
	if err != nil {
		t.Fatal(err)
	}
	q, err := client.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("esm"), Attributes: map[string]string{
		"VisibilityTimeout": "1",
		"RedrivePolicy":     `{"deadLetterTargetArn":"` + dlqAttrs.Attributes["QueueArn"] + `","maxReceiveCount":"2"}`,
	}})
	if err != nil {
		t.Fatal(err)
	}
	for _, body := range []string{"ok", "fail", "ok"} {
		if _, err := client.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: q.QueueUrl, MessageBody: aws.String(body)}); err != nil {
			t.Fatal(err)
		}
	}
	p := &Poller{SQS: client, QueueURL: aws.ToString(q.QueueUrl), QueueARN: "arn:aws:sqs:us-east-1:000000000000:esm", Region: "us-east-1", Runtime: rt}
	got, failed, err := p.PollOnce(ctx, 1)
	if err != nil || got != 3 || failed != 1 {
		t.Fatalf("first poll: %d received, %d failed, %v", got, failed, err)
	}
	// The failed one comes back after the visibility timeout, fails again,
	// and its next receive moves it to the dead-letter queue.
	deadline := time.Now().Add(30 * time.Second)
	for {
		n, _, err := p.PollOnce(ctx, 1)
		if err != nil {
			t.Fatal(err)
		}
		attrs, _ := client.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: dlq.QueueUrl, AttributeNames: []types.QueueAttributeName{"ApproximateNumberOfMessages"}})
		if attrs != nil && attrs.Attributes["ApproximateNumberOfMessages"] == "1" && n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the failing message never reached the dead-letter queue")
		}
	}
	left, _ := client.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: q.QueueUrl,
		AttributeNames: []types.QueueAttributeName{"ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"}})
	if left.Attributes["ApproximateNumberOfMessages"] != "0" || left.Attributes["ApproximateNumberOfMessagesNotVisible"] != "0" {
		t.Errorf("source queue not empty: %v", left.Attributes)
	}
}

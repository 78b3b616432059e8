// Command echo is a tiny Lambda function for the harness's tests: it
// reports each SQS record's body back as a batch item failure when the
// body is "fail", and panics on "panic".
package main

import (
	"context"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"
)

func main() {
	lambda.Start(func(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
		var resp events.SQSEventResponse
		for _, r := range ev.Records {
			switch r.Body {
			case "fail":
				resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: r.MessageId})
			case "panic":
				panic("asked to")
			}
		}
		return resp, nil
	})
}

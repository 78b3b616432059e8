// Command scaler is the compile lanes' scaler Lambda: on each invocation (an
// EventBridge schedule every minute, and the queue-age alarms' state
// changes) it reads, for every configured lane, the last 15 minutes of its
// queue's ApproximateAgeOfOldestMessage and
// ApproximateNumberOfMessagesNotVisible (the messages in flight; both in
// one CloudWatch GetMetricData call) and its event source mapping (Lambda
// GetEventSourceMapping: its cap, batch size and last change), decides the
// mapping's ScalingConfig.MaximumConcurrency with pkg/scaling, and sets it
// when it changes (UpdateEventSourceMapping). Each decision is logged with
// its inputs (keys lane, queue, mapping, age_seconds, in_flight: the most
// messages in flight in the last low_for or -1 for none, datapoints, from,
// to, reason).
//
// The stack (infra/) gives it the bulk lane only: the urgent lane's event
// source sits at its maximum and Lambda's own SQS scaling fills it
// (scaling.Urgent says why). Any lane it is given, it steers.
//
// Configuration (environment): COMPILEFARM_SCALER_LANES, a JSON array of
// {"lane":"urgent"|"bulk","queue":"<queue name>","mapping":"<event source
// mapping UUID>","min":N,"max":M,"step":S}, each optionally with "high",
// "low" and "low_for" (Go durations; defaults by lane in pkg/scaling), and
// COMPILEFARM_SCALER_COOLDOWN (a Go duration, default 2m); AWS endpoints
// and credentials from the standard AWS configuration.
//
// IAM: lambda:GetEventSourceMapping and lambda:UpdateEventSourceMapping on
// the mappings, cloudwatch:GetMetricData.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	awslambda "github.com/aws/aws-lambda-go/lambda"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatch"
	"github.com/aws/aws-sdk-go-v2/service/lambda"
)

func main() {
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	h, err := setup(context.Background(), os.Getenv, log)
	if err != nil {
		log.Error("scaler function init failed", "err", err)
		os.Exit(1) // the Lambda runtime reports an init error
	}
	awslambda.Start(h.handle)
}

func setup(ctx context.Context, env func(string) string, log *slog.Logger) (*handler, error) {
	lanes, err := parseLanes(env)
	if err != nil {
		return nil, err
	}
	cfg, err := awsconfig.LoadDefaultConfig(ctx)
	if err != nil {
		return nil, fmt.Errorf("load AWS configuration: %w", err)
	}
	for _, l := range lanes {
		log.Info("scaler lane", "lane", l.Name, "queue", l.Queue, "mapping", l.Mapping, "min", l.Config.Min, "max", l.Config.Max,
			"step", l.Config.Step, "high", l.Config.High.String(), "low", l.Config.Low.String(), "low_for", l.Config.LowFor.String(),
			"cooldown", l.Config.Cooldown.String())
	}
	return &handler{lanes: lanes, metrics: cloudwatch.NewFromConfig(cfg), mappings: lambda.NewFromConfig(cfg), log: log, now: time.Now}, nil
}

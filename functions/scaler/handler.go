package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatch"
	cwtypes "github.com/aws/aws-sdk-go-v2/service/cloudwatch/types"
	"github.com/aws/aws-sdk-go-v2/service/lambda"
	lambdatypes "github.com/aws/aws-sdk-go-v2/service/lambda/types"

	"github.com/compilefarm/compilefarm/pkg/scaling"
)

// metricReader is what the handler calls of CloudWatch.
type metricReader interface {
	GetMetricData(ctx context.Context, in *cloudwatch.GetMetricDataInput, opts ...func(*cloudwatch.Options)) (*cloudwatch.GetMetricDataOutput, error)
}

// mappingClient is what the handler calls of Lambda.
type mappingClient interface {
	GetEventSourceMapping(ctx context.Context, in *lambda.GetEventSourceMappingInput, opts ...func(*lambda.Options)) (*lambda.GetEventSourceMappingOutput, error)
	UpdateEventSourceMapping(ctx context.Context, in *lambda.UpdateEventSourceMappingInput, opts ...func(*lambda.Options)) (*lambda.UpdateEventSourceMappingOutput, error)
}

// lookBack is how much of the queue's metrics the handler reads.
const lookBack = 15 * time.Minute

// handler evaluates every lane on each invocation.
type handler struct {
	lanes    []lane
	metrics  metricReader
	mappings mappingClient
	log      *slog.Logger
	now      func() time.Time
}

// trigger is what the handler reads of its event: an alarm's Lambda
// action ({"source":"aws.cloudwatch","alarmData":{...}}), EventBridge's
// "CloudWatch Alarm State Change" (the same in "detail") or its
// "Scheduled Event".
type trigger struct {
	Source     string     `json:"source"`
	DetailType string     `json:"detail-type"`
	AlarmData  *alarmData `json:"alarmData"`
	Detail     *alarmData `json:"detail"`
}

type alarmData struct {
	AlarmName string `json:"alarmName"`
	State     struct {
		Value string `json:"value"`
	} `json:"state"`
}

// handle logs what invoked it, then evaluates every lane, each on its
// own: one lane's failure does not keep the others from scaling. It fails
// (so Lambda records an error) when any lane failed.
func (h *handler) handle(ctx context.Context, ev json.RawMessage) error {
	var t trigger
	_ = json.Unmarshal(ev, &t) // any event evaluates the lanes; what it was is only logged
	attrs := []any{"source", t.Source, "detail_type", t.DetailType}
	for _, a := range []*alarmData{t.AlarmData, t.Detail} {
		if a != nil && a.AlarmName != "" {
			attrs = append(attrs, "alarm", a.AlarmName, "alarm_state", a.State.Value)
		}
	}
	h.log.Info("scaler invoked", attrs...)
	var errs []error
	for _, l := range h.lanes {
		if err := h.evaluate(ctx, l); err != nil {
			h.log.Error("lane not evaluated", "lane", l.Name, "queue", l.Queue, "mapping", l.Mapping, "err", err)
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// evaluate reads the lane's mapping and queue metrics, decides, and
// applies a change.
func (h *handler) evaluate(ctx context.Context, l lane) error {
	m, err := h.mappings.GetEventSourceMapping(ctx, &lambda.GetEventSourceMappingInput{UUID: aws.String(l.Mapping)})
	if err != nil {
		return fmt.Errorf("lane %s: read event source mapping %s: %w", l.Name, l.Mapping, err)
	}
	now := h.now()
	samples, inFlight, err := h.queueMetrics(ctx, l.Queue, now)
	if err != nil {
		return fmt.Errorf("lane %s: read the age and messages in flight of queue %s: %w", l.Name, l.Queue, err)
	}
	st := scaling.State{Samples: samples, InFlight: inFlight, BatchSize: int(aws.ToInt32(m.BatchSize))}
	if m.ScalingConfig != nil && m.ScalingConfig.MaximumConcurrency != nil {
		st.Current = int(*m.ScalingConfig.MaximumConcurrency)
	}
	if m.LastModified != nil {
		st.LastChange = *m.LastModified
	}
	d := scaling.Decide(now, l.Config, st)
	if state := aws.ToString(m.State); d.Changed() && state != "Enabled" && state != "Disabled" {
		// Creating, Updating, Deleting...: an update now would be refused.
		d.To, d.Reason = d.From, fmt.Sprintf("mapping is %s; wanted %d: %s", state, d.To, d.Reason)
	}
	age := -1.0
	if d.Age >= 0 {
		age = d.Age.Seconds()
	}
	attrs := []any{"lane", l.Name, "queue", l.Queue, "mapping", l.Mapping, "age_seconds", age,
		"in_flight", d.InFlight, "datapoints", len(samples), "from", d.From, "to", d.To, "reason", d.Reason}
	if !d.Changed() {
		h.log.Info("concurrency unchanged", attrs...)
		return nil
	}
	_, err = h.mappings.UpdateEventSourceMapping(ctx, &lambda.UpdateEventSourceMappingInput{
		UUID:          aws.String(l.Mapping),
		ScalingConfig: &lambdatypes.ScalingConfig{MaximumConcurrency: aws.Int32(int32(d.To))},
	})
	if err != nil {
		return fmt.Errorf("lane %s: set MaximumConcurrency of event source mapping %s from %d to %d: %w", l.Name, l.Mapping, d.From, d.To, err)
	}
	h.log.Info("concurrency changed", attrs...)
	return nil
}

// The queue's metrics the handler reads, by their query's Id.
const (
	ageQuery      = "age"
	inFlightQuery = "in_flight"
)

// queueMetrics reads the last lookBack of the queue's
// ApproximateAgeOfOldestMessage and ApproximateNumberOfMessagesNotVisible
// (the messages in flight), Maximum per minute, from CloudWatch in one
// GetMetricData call (and its pages).
func (h *handler) queueMetrics(ctx context.Context, queue string, now time.Time) ([]scaling.Sample, []scaling.InFlightSample, error) {
	query := func(id, metric string) cwtypes.MetricDataQuery {
		return cwtypes.MetricDataQuery{
			Id: aws.String(id),
			MetricStat: &cwtypes.MetricStat{
				Metric: &cwtypes.Metric{
					Namespace:  aws.String("AWS/SQS"),
					MetricName: aws.String(metric),
					Dimensions: []cwtypes.Dimension{{Name: aws.String("QueueName"), Value: aws.String(queue)}},
				},
				Period: aws.Int32(60),
				Stat:   aws.String("Maximum"),
			},
		}
	}
	in := &cloudwatch.GetMetricDataInput{
		StartTime: aws.Time(now.Truncate(time.Minute).Add(-lookBack)),
		EndTime:   aws.Time(now),
		ScanBy:    cwtypes.ScanByTimestampAscending,
		MetricDataQueries: []cwtypes.MetricDataQuery{
			query(ageQuery, "ApproximateAgeOfOldestMessage"),
			query(inFlightQuery, "ApproximateNumberOfMessagesNotVisible"),
		},
	}
	var ages []scaling.Sample
	var inFlight []scaling.InFlightSample
	for {
		page, err := h.metrics.GetMetricData(ctx, in)
		if err != nil {
			return nil, nil, err
		}
		for _, r := range page.MetricDataResults {
			id := aws.ToString(r.Id)
			if len(r.Timestamps) != len(r.Values) {
				return nil, nil, fmt.Errorf("GetMetricData returned %d timestamps for %d values of %s", len(r.Timestamps), len(r.Values), id)
			}
			for i, ts := range r.Timestamps {
				switch id {
				case ageQuery:
					ages = append(ages, scaling.Sample{Time: ts, Age: time.Duration(r.Values[i] * float64(time.Second))})
				case inFlightQuery:
					inFlight = append(inFlight, scaling.InFlightSample{Time: ts, Messages: int(math.Round(r.Values[i]))})
				}
			}
		}
		if page.NextToken == nil {
			return ages, inFlight, nil
		}
		in.NextToken = page.NextToken
	}
}

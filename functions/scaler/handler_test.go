package main

import (
	"archive/zip"
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatch"
	cwschemas "github.com/aws/aws-sdk-go-v2/service/cloudwatch/schemas"
	cwtypes "github.com/aws/aws-sdk-go-v2/service/cloudwatch/types"
	"github.com/aws/aws-sdk-go-v2/service/lambda"
	lambdatypes "github.com/aws/aws-sdk-go-v2/service/lambda/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"
	"github.com/aws/smithy-go/transport/http/protocol/awsquery"

	"github.com/compilefarm/compilefarm/internal/emulator"
	"github.com/compilefarm/compilefarm/pkg/scaling"
)

// emu is moto's server on loopback: it serves Lambda's event source
// mappings, SQS, IAM and CloudWatch in one process.
var emu *emulator.Process

// TestMain runs one moto server (started by internal/emulator as the
// Secrets Manager emulator: the same server answers every service). Without
// it the tests fail, naming the script that installs it.
func TestMain(m *testing.M) { emulator.Main(m, emulator.SecretsManager(&emu)) }

const region = "us-east-1"

var creds = credentials.NewStaticCredentialsProvider("test", "test", "")

func lambdaClient() *lambda.Client {
	return lambda.New(lambda.Options{Region: region, Credentials: creds, BaseEndpoint: aws.String(emu.URL)})
}

// cloudwatchClient speaks the awsQuery protocol: moto implements
// CloudWatch in it only, not in rpcv2-CBOR, the SDK's default (which AWS
// serves). What the handler asks and reads is the same in both.
func cloudwatchClient() *cloudwatch.Client {
	return cloudwatch.New(cloudwatch.Options{Region: region, Credentials: creds, BaseEndpoint: aws.String(emu.URL)},
		func(o *cloudwatch.Options) { o.Protocol = awsquery.New(cwschemas.GraniteServiceVersion20100801) })
}

var seq atomic.Int64

// newLane makes, in moto, an SQS queue and a compile function with an event
// source mapping from it whose MaximumConcurrency is maxConc and BatchSize
// batch, and returns the queue's name and the mapping's UUID.
func newLane(t *testing.T, name string, maxConc, batch int32) (queue, uuid string) {
	t.Helper()
	return newLaneOn(t, name, maxConc, batch, "")
}

// newLaneOn is newLane with the mapping on alias, a version of the
// function published for it, as the stack wires the compile function;
// with alias "" on the function itself.
func newLaneOn(t *testing.T, name string, maxConc, batch int32, alias string) (queue, uuid string) {
	t.Helper()
	ctx := t.Context()
	n := seq.Add(1)
	queue = fmt.Sprintf("compilefarm-%s-%d", name, n)
	q := sqs.New(sqs.Options{Region: region, Credentials: creds, BaseEndpoint: aws.String(emu.URL)})
	qo, err := q.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(queue)})
	if err != nil {
		t.Fatalf("create queue %s: %v", queue, err)
	}
	attrs, err := q.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: qo.QueueUrl, AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn}})
	if err != nil {
		t.Fatalf("queue ARN: %v", err)
	}
	l := lambdaClient()
	fn := fmt.Sprintf("compilefarm-compile-%d", n)
	if _, err := l.CreateFunction(ctx, &lambda.CreateFunctionInput{
		FunctionName: aws.String(fn), Role: aws.String(role(t)), Runtime: lambdatypes.RuntimeProvidedal2023,
		Handler: aws.String("bootstrap"), Code: &lambdatypes.FunctionCode{ZipFile: bootstrapZip(t)},
	}); err != nil {
		t.Fatalf("create function: %v", err)
	}
	if alias != "" {
		v, err := l.PublishVersion(ctx, &lambda.PublishVersionInput{FunctionName: aws.String(fn)})
		if err != nil {
			t.Fatalf("publish a version of %s: %v", fn, err)
		}
		if _, err := l.CreateAlias(ctx, &lambda.CreateAliasInput{FunctionName: aws.String(fn), Name: aws.String(alias), FunctionVersion: v.Version}); err != nil {
			t.Fatalf("create alias %s of %s: %v", alias, fn, err)
		}
		fn += ":" + alias
	}
	m, err := l.CreateEventSourceMapping(ctx, &lambda.CreateEventSourceMappingInput{
		FunctionName: aws.String(fn), EventSourceArn: aws.String(attrs.Attributes[string(types.QueueAttributeNameQueueArn)]),
		BatchSize: aws.Int32(batch), ScalingConfig: &lambdatypes.ScalingConfig{MaximumConcurrency: aws.Int32(maxConc)},
	}, trailingSlash)
	if err != nil {
		t.Fatalf("create event source mapping: %v", err)
	}
	return queue, aws.ToString(m.UUID)
}

// trailingSlash makes the request path end in "/", as moto's route for
// CreateEventSourceMapping wants (AWS's API reference writes the path so;
// the SDK leaves the slash out, and AWS takes both).
func trailingSlash(o *lambda.Options) {
	o.APIOptions = append(o.APIOptions, func(s *middleware.Stack) error {
		return s.Build.Add(middleware.BuildMiddlewareFunc("TrailingSlash", func(ctx context.Context, in middleware.BuildInput, next middleware.BuildHandler) (middleware.BuildOutput, middleware.Metadata, error) {
			if r, ok := in.Request.(*smithyhttp.Request); ok && !strings.HasSuffix(r.URL.Path, "/") {
				r.URL.Path += "/"
			}
			return next.HandleBuild(ctx, in)
		}), middleware.After)
	})
}

// role returns the ARN of an IAM role in moto, which checks that a
// function's role exists. IAM has no client in this module: the query is
// signed by hand.
func role(t *testing.T) string {
	t.Helper()
	name := fmt.Sprintf("compilefarm-compile-%d", seq.Add(1))
	form := url.Values{"Action": {"CreateRole"}, "Version": {"2010-05-08"}, "RoleName": {name},
		"AssumeRolePolicyDocument": {`{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"Service":"lambda.amazonaws.com"},"Action":"sts:AssumeRole"}]}`}}
	body := form.Encode()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, emu.URL+"/", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	sum := sha256.Sum256([]byte(body))
	c, _ := creds.Retrieve(t.Context())
	if err := v4.NewSigner().SignHTTP(t.Context(), c, req, hex.EncodeToString(sum[:]), "iam", region, time.Now()); err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("create role: %v", err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("create role: %s: %s", resp.Status, out)
	}
	return "arn:aws:iam::123456789012:role/" + name
}

func bootstrapZip(t *testing.T) []byte {
	var b bytes.Buffer
	z := zip.NewWriter(&b)
	w, err := z.Create("bootstrap")
	if err == nil {
		_, err = w.Write([]byte("#!/bin/sh\n"))
	}
	if err == nil {
		err = z.Close()
	}
	if err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// putAges stores one ApproximateAgeOfOldestMessage datapoint a minute for
// queue, the last at last, in seconds.
func putAges(t *testing.T, queue string, last time.Time, ages ...int) {
	t.Helper()
	putMetric(t, queue, "ApproximateAgeOfOldestMessage", cwtypes.StandardUnitSeconds, last, ages)
}

// putInFlight stores one ApproximateNumberOfMessagesNotVisible datapoint a
// minute for queue, the last at last.
func putInFlight(t *testing.T, queue string, last time.Time, counts ...int) {
	t.Helper()
	putMetric(t, queue, "ApproximateNumberOfMessagesNotVisible", cwtypes.StandardUnitCount, last, counts)
}

func putMetric(t *testing.T, queue, metric string, unit cwtypes.StandardUnit, last time.Time, values []int) {
	t.Helper()
	var data []cwtypes.MetricDatum
	for i, v := range values {
		data = append(data, cwtypes.MetricDatum{
			MetricName: aws.String(metric),
			Dimensions: []cwtypes.Dimension{{Name: aws.String("QueueName"), Value: aws.String(queue)}},
			Timestamp:  aws.Time(last.Add(-time.Duration(len(values)-1-i) * time.Minute)),
			Value:      aws.Float64(float64(v)), Unit: unit,
		})
	}
	// moto does not read a gzip body: PutMetricData goes uncompressed.
	uncompressed := func(o *cloudwatch.Options) { o.DisableRequestCompression = true }
	if _, err := cloudwatchClient().PutMetricData(t.Context(), &cloudwatch.PutMetricDataInput{Namespace: aws.String("AWS/SQS"), MetricData: data}, uncompressed); err != nil {
		t.Fatalf("put metric data: %v", err)
	}
}

func maxConcurrency(t *testing.T, uuid string) (int, time.Time) {
	t.Helper()
	m, err := lambdaClient().GetEventSourceMapping(t.Context(), &lambda.GetEventSourceMappingInput{UUID: aws.String(uuid)})
	if err != nil {
		t.Fatalf("get event source mapping: %v", err)
	}
	return int(aws.ToInt32(m.ScalingConfig.MaximumConcurrency)), aws.ToTime(m.LastModified)
}

// logLines returns the JSON log records in b, by message.
func logLines(t *testing.T, b *bytes.Buffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	s := bufio.NewScanner(bytes.NewReader(b.Bytes()))
	for s.Scan() {
		var m map[string]any
		if err := json.Unmarshal(s.Bytes(), &m); err != nil {
			t.Fatalf("log line %q: %v", s.Text(), err)
		}
		out = append(out, m)
	}
	return out
}

func decisionOf(t *testing.T, logs []map[string]any, lane string) map[string]any {
	t.Helper()
	for _, m := range logs {
		if m["lane"] == lane && m["reason"] != nil {
			return m
		}
	}
	t.Fatalf("no decision logged for lane %s", lane)
	return nil
}

// The handler against moto: it reads each lane's mapping and metrics,
// scales the flooded bulk lane up and the quiet urgent lane down, logs each
// decision with its inputs, and holds within the cool-down (the mapping's
// LastModified).
func TestHandlerScalesLanes(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the moto emulator; skipped with -short")
	}
	bulkQueue, bulkMapping := newLane(t, "bulk", 12, 2)
	urgentQueue, urgentMapping := newLane(t, "urgent", 10, 1)
	_, created := maxConcurrency(t, bulkMapping)
	// Decide 3 minutes after the mappings were made: past the cool-down.
	at := created.Add(3 * time.Minute).Truncate(time.Minute).Add(10 * time.Second)
	last := at.Truncate(time.Minute).Add(-2 * time.Minute)
	putAges(t, bulkQueue, last, 0, 60, 120, 180, 240, 300, 360, 420)  // a deploy's flood
	putInFlight(t, bulkQueue, last, 4, 4, 4, 4, 24, 24, 24, 24)       // every invocation a full batch
	putAges(t, urgentQueue, last, 3, 2, 0, 1, 0, 0, 4, 0, 0, 1, 0, 0) // quiet for 12 minutes
	putInFlight(t, urgentQueue, last, 1, 1, 0, 1, 0, 0, 1, 0, 0, 1, 0, 0)

	const lanesJSON = `[{"lane":"urgent","queue":%q,"mapping":%q,"min":2,"max":50,"step":2},
		{"lane":"bulk","queue":%q,"mapping":%q,"min":2,"max":200,"step":10}]`
	lanes, err := parseLanes(envOf(map[string]string{"COMPILEFARM_SCALER_LANES": fmt.Sprintf(lanesJSON, urgentQueue, urgentMapping, bulkQueue, bulkMapping)}))
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	h := &handler{lanes: lanes, metrics: cloudwatchClient(), mappings: lambdaClient(),
		log: slog.New(slog.NewJSONHandler(&logs, nil)), now: func() time.Time { return at }}
	alarm := `{"source":"aws.cloudwatch","alarmArn":"arn:aws:cloudwatch:us-east-1:123456789012:alarm:bulk-age",
		"alarmData":{"alarmName":"compilefarm-bulk-age","state":{"value":"ALARM"},"previousState":{"value":"OK"}}}`
	if err := h.handle(t.Context(), json.RawMessage(alarm)); err != nil {
		t.Fatalf("handle: %v", err)
	}
	// Bulk: age 420 s ≥ 2m and rising: 3 steps of 10, at most double 12.
	if got, _ := maxConcurrency(t, bulkMapping); got != 24 {
		t.Errorf("bulk lane's MaximumConcurrency %d, want 24", got)
	}
	// Urgent: ≤ 5 s for 10 minutes: one step of 2 down.
	if got, _ := maxConcurrency(t, urgentMapping); got != 8 {
		t.Errorf("urgent lane's MaximumConcurrency %d, want 8", got)
	}
	recs := logLines(t, &logs)
	if recs[0]["alarm"] != "compilefarm-bulk-age" || recs[0]["alarm_state"] != "ALARM" {
		t.Errorf("the alarm is not logged: %v", recs[0])
	}
	b := decisionOf(t, recs, "bulk")
	if b["queue"] != bulkQueue || b["age_seconds"] != 420.0 || b["in_flight"] != 24.0 || b["from"] != 12.0 || b["to"] != 24.0 || b["datapoints"] != 8.0 || !strings.Contains(b["reason"].(string), "high 2m0s") {
		t.Errorf("bulk decision logged as %v", b)
	}
	if u := decisionOf(t, recs, "urgent"); u["from"] != 10.0 || u["to"] != 8.0 || u["age_seconds"] != 0.0 || u["in_flight"] != 1.0 {
		t.Errorf("urgent decision logged as %v", u)
	}

	// A minute after the changes, on the schedule: both lanes cool down.
	_, changed := maxConcurrency(t, bulkMapping)
	logs.Reset()
	h.now = func() time.Time { return changed.Add(time.Minute) }
	schedule := `{"version":"0","source":"aws.events","detail-type":"Scheduled Event","detail":{}}`
	if err := h.handle(t.Context(), json.RawMessage(schedule)); err != nil {
		t.Fatalf("handle: %v", err)
	}
	recs = logLines(t, &logs)
	if recs[0]["detail_type"] != "Scheduled Event" || recs[0]["alarm"] != nil {
		t.Errorf("the schedule is logged as %v", recs[0])
	}
	for _, lane := range []string{"bulk", "urgent"} {
		if d := decisionOf(t, recs, lane); d["from"] != d["to"] || !strings.Contains(d["reason"].(string), "cool-down") {
			t.Errorf("%s lane within the cool-down: %v", lane, d)
		}
	}
	if got, _ := maxConcurrency(t, bulkMapping); got != 24 {
		t.Errorf("bulk lane's MaximumConcurrency %d after the cool-down hold, want 24", got)
	}
}

// One lane's failure is reported, with its context, and does not keep the
// other lane from scaling; a lane with no data holds.
func TestHandlerLaneFailureDoesNotStopOthers(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the moto emulator; skipped with -short")
	}
	queue, mapping := newLane(t, "bulk", 300, 2) // above the lane's max: brought down at once
	lanes := []lane{
		{Name: "urgent", Queue: "compilefarm-missing", Mapping: "00000000-0000-0000-0000-000000000000",
			Config: scaling.Config{Min: 2, Max: 50, Step: 2}.WithDefaults("urgent")},
		{Name: "bulk", Queue: queue, Mapping: mapping, Config: scaling.Config{Min: 2, Max: 200, Step: 10}.WithDefaults("bulk")},
	}
	var logs bytes.Buffer
	h := &handler{lanes: lanes, metrics: cloudwatchClient(), mappings: lambdaClient(),
		log: slog.New(slog.NewJSONHandler(&logs, nil)), now: time.Now}
	err := h.handle(t.Context(), json.RawMessage(`{}`))
	if err == nil || !strings.Contains(err.Error(), "lane urgent: read event source mapping 00000000-0000-0000-0000-000000000000") {
		t.Fatalf("handle: %v, want the urgent lane's failure", err)
	}
	if got, _ := maxConcurrency(t, mapping); got != 200 {
		t.Errorf("bulk lane's MaximumConcurrency %d, want its max 200", got)
	}
	if d := decisionOf(t, logLines(t, &logs), "bulk"); d["age_seconds"] != -1.0 || d["in_flight"] != -1.0 || d["datapoints"] != 0.0 {
		t.Errorf("bulk decision with no datapoints logged as %v", d)
	}
}

// Two urgent lanes (batch size 1) whose age has stayed low for 12 minutes:
// the busy one, with up to 12 messages in flight at its cap of 14, holds
// (a cap of 12 would not hold 12 plus a quarter); the idle one steps down;
// one whose messages in flight CloudWatch has no datapoints of holds.
func TestHandlerBusyLaneHolds(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the moto emulator; skipped with -short")
	}
	busyQueue, busyMapping := newLane(t, "urgent", 14, 1)
	idleQueue, idleMapping := newLane(t, "urgent", 14, 1)
	blindQueue, blindMapping := newLane(t, "urgent", 14, 1)
	_, created := maxConcurrency(t, busyMapping)
	at := created.Add(3 * time.Minute).Truncate(time.Minute).Add(10 * time.Second)
	last := at.Truncate(time.Minute).Add(-2 * time.Minute)
	low := []int{1, 1, 2, 1, 1, 1, 2, 1, 1, 1, 1, 1}
	putAges(t, busyQueue, last, low...)
	putInFlight(t, busyQueue, last, 10, 11, 12, 11, 10, 12, 11, 11, 10, 12, 11, 11)
	putAges(t, idleQueue, last, low...)
	putInFlight(t, idleQueue, last, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
	putAges(t, blindQueue, last, low...) // no messages in flight stored

	c := scaling.Config{Min: 2, Max: 50, Step: 2}.WithDefaults("urgent")
	lanes := []lane{
		{Name: "busy", Queue: busyQueue, Mapping: busyMapping, Config: c},
		{Name: "idle", Queue: idleQueue, Mapping: idleMapping, Config: c},
		{Name: "blind", Queue: blindQueue, Mapping: blindMapping, Config: c},
	}
	var logs bytes.Buffer
	calls := &recordingReader{metricReader: cloudwatchClient()}
	h := &handler{lanes: lanes, metrics: calls, mappings: lambdaClient(),
		log: slog.New(slog.NewJSONHandler(&logs, nil)), now: func() time.Time { return at }}
	if err := h.handle(t.Context(), json.RawMessage(`{"source":"aws.events","detail-type":"Scheduled Event"}`)); err != nil {
		t.Fatalf("handle: %v", err)
	}
	// One GetMetricData call a lane, for both metrics.
	if len(calls.queries) != len(lanes) {
		t.Errorf("%d GetMetricData calls for %d lanes", len(calls.queries), len(lanes))
	}
	for _, q := range calls.queries {
		if strings.Join(q, ",") != "AWS/SQS ApproximateAgeOfOldestMessage Maximum 60,AWS/SQS ApproximateNumberOfMessagesNotVisible Maximum 60" {
			t.Errorf("GetMetricData asked for %q", q)
		}
	}
	recs := logLines(t, &logs)
	for _, tt := range []struct {
		name, mapping string
		want          int
		inFlight      float64
		reason        string
	}{
		{"busy", busyMapping, 14, 12, "would not hold them"},
		{"idle", idleMapping, 12, 0, "down one step"},
		{"blind", blindMapping, 14, -1, "too few to tell"},
	} {
		if got, _ := maxConcurrency(t, tt.mapping); got != tt.want {
			t.Errorf("%s lane's MaximumConcurrency %d, want %d", tt.name, got, tt.want)
		}
		d := decisionOf(t, recs, tt.name)
		if d["to"] != float64(tt.want) || d["in_flight"] != tt.inFlight || !strings.Contains(d["reason"].(string), tt.reason) {
			t.Errorf("%s lane's decision logged as %v, want to %d, in_flight %v, reason …%s…", tt.name, d, tt.want, tt.inFlight, tt.reason)
		}
	}
}

// recordingReader records the metrics each GetMetricData call asks for.
type recordingReader struct {
	metricReader
	queries [][]string
}

func (r *recordingReader) GetMetricData(ctx context.Context, in *cloudwatch.GetMetricDataInput, opts ...func(*cloudwatch.Options)) (*cloudwatch.GetMetricDataOutput, error) {
	var q []string
	for _, m := range in.MetricDataQueries {
		s := m.MetricStat
		q = append(q, fmt.Sprintf("%s %s %s %d", aws.ToString(s.Metric.Namespace), aws.ToString(s.Metric.MetricName), aws.ToString(s.Stat), aws.ToInt32(s.Period)))
	}
	r.queries = append(r.queries, q)
	return r.metricReader.GetMetricData(ctx, in, opts...)
}

// The stack's mappings invoke the compile function's alias live (its
// CodeDeploy canary moves the alias): the handler finds such a mapping by
// its UUID and sets its MaximumConcurrency like any other.
func TestHandlerScalesAliasMapping(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the moto emulator; skipped with -short")
	}
	queue, mapping := newLaneOn(t, "bulk", 300, 2, "live") // above the lane's max: brought down at once
	// AWS names the alias in the mapping's FunctionArn; moto the version
	// the alias points at. Either way a qualified ARN, not the function's.
	m, err := lambdaClient().GetEventSourceMapping(t.Context(), &lambda.GetEventSourceMappingInput{UUID: aws.String(mapping)})
	if arn := aws.ToString(m.FunctionArn); err != nil || strings.Count(arn, ":") != 7 {
		t.Fatalf("mapping %s invokes %s (%v), want a qualified function ARN", mapping, arn, err)
	}
	h := &handler{lanes: []lane{{Name: "bulk", Queue: queue, Mapping: mapping, Config: scaling.Config{Min: 2, Max: 200, Step: 10}.WithDefaults("bulk")}},
		metrics: cloudwatchClient(), mappings: lambdaClient(), log: slog.New(slog.NewJSONHandler(io.Discard, nil)), now: time.Now}
	if err := h.handle(t.Context(), json.RawMessage(`{}`)); err != nil {
		t.Fatalf("handle: %v", err)
	}
	if got, _ := maxConcurrency(t, mapping); got != 200 {
		t.Errorf("the alias mapping's MaximumConcurrency %d, want the lane's max 200", got)
	}
}

package awscalls_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/compilefarm/compilefarm/internal/emulator"
	"github.com/compilefarm/compilefarm/pkg/awscalls"
)

// config is an aws.Config for the emulators, instrumented by c, as broker
// serve makes its clients.
func config(c *awscalls.Counter) aws.Config {
	cfg := aws.Config{Region: "us-east-1", Credentials: credentials.NewStaticCredentialsProvider("test", "test", "")}
	c.Instrument(&cfg)
	return cfg
}

func find(t *testing.T, c *awscalls.Counter, service, op, res string) awscalls.Count {
	t.Helper()
	for _, cnt := range c.Snapshot() {
		if cnt.Service == service && cnt.Operation == op && cnt.Resource == res {
			return cnt
		}
	}
	t.Fatalf("no count for %s %s %q in %v", service, op, res, c.Snapshot())
	return awscalls.Count{}
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// TestDynamoDB counts calls, errors by code and body bytes of DynamoDB
// calls made through dynalite.
func TestDynamoDB(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the DynamoDB emulator; skipped with -short")
	}
	ctx := testCtx(t)
	emu, err := emulator.StartDynamoDB(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(emu.Stop)
	c := awscalls.New()
	db := dynamodb.NewFromConfig(config(c), func(o *dynamodb.Options) { o.BaseEndpoint = aws.String(emu.URL) })

	_, err = db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String("missing"),
		Key: map[string]ddbtypes.AttributeValue{"k": &ddbtypes.AttributeValueMemberS{Value: "x"}}})
	if err == nil {
		t.Fatal("GetItem of a missing table succeeded")
	}
	miss := find(t, c, "DynamoDB", "GetItem", "missing")
	if miss.Calls != 1 || miss.Errors["ResourceNotFoundException"] != 1 {
		t.Errorf("GetItem of a missing table counted as %v, errors %v", miss, miss.Errors)
	}

	_, err = db.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:            aws.String("things"),
		BillingMode:          ddbtypes.BillingModePayPerRequest,
		AttributeDefinitions: []ddbtypes.AttributeDefinition{{AttributeName: aws.String("k"), AttributeType: ddbtypes.ScalarAttributeTypeS}},
		KeySchema:            []ddbtypes.KeySchemaElement{{AttributeName: aws.String("k"), KeyType: ddbtypes.KeyTypeHash}},
	})
	if err != nil {
		t.Fatal(err)
	}
	// A new table is CREATING until it is ACTIVE, on AWS as on dynalite
	// (whose creation finishes asynchronously even with --createTableMs 0):
	// a PutItem before then is ResourceNotFoundException.
	if err := dynamodb.NewTableExistsWaiter(db, func(o *dynamodb.TableExistsWaiterOptions) {
		o.MinDelay = 10 * time.Millisecond
	}).Wait(ctx, &dynamodb.DescribeTableInput{TableName: aws.String("things")}, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	value := strings.Repeat("v", 3000)
	item := map[string]ddbtypes.AttributeValue{"k": &ddbtypes.AttributeValueMemberS{Value: "a"}, "v": &ddbtypes.AttributeValueMemberS{Value: value}}
	for range 3 {
		if _, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String("things"), Item: item}); err != nil {
			t.Fatal(err)
		}
	}
	_, err = db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String("things"), Item: item,
		ConditionExpression: aws.String("attribute_not_exists(k)")})
	var ccf *ddbtypes.ConditionalCheckFailedException
	if !errors.As(err, &ccf) {
		t.Fatalf("conditional put over an item: %v", err)
	}
	out, err := db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String("things"), Key: map[string]ddbtypes.AttributeValue{"k": item["k"]}})
	if err != nil || len(out.Item) == 0 {
		t.Fatalf("get item: %v %v", out, err)
	}

	put := find(t, c, "DynamoDB", "PutItem", "things")
	if put.Calls != 4 || put.Errors["ConditionalCheckFailedException"] != 1 || put.ErrorCount() != 1 {
		t.Errorf("PutItem counted as %v, errors %v; want 4 calls, 1 ConditionalCheckFailedException", put, put.Errors)
	}
	if put.RequestBytes < 4*int64(len(value)) || put.RequestBytes > 4*int64(len(value)+300) {
		t.Errorf("PutItem sent %d bytes for four items of %d bytes", put.RequestBytes, len(value))
	}
	get := find(t, c, "DynamoDB", "GetItem", "things")
	if get.Calls != 1 || get.ErrorCount() != 0 || get.ResponseBytes < int64(len(value)) || get.ResponseBytes > int64(len(value)+300) {
		t.Errorf("GetItem counted as %v; want 1 call receiving about %d bytes", get, len(value))
	}

	// The Prometheus side.
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	got := gather(t, reg)
	for sample, v := range map[string]float64{
		`compilefarm_aws_errors_total{code="ConditionalCheckFailedException",operation="PutItem",resource="things",service="DynamoDB"}`: 1,
		`compilefarm_aws_errors_total{code="ResourceNotFoundException",operation="GetItem",resource="missing",service="DynamoDB"}`:      1,
		`compilefarm_aws_calls_total{operation="PutItem",resource="things",service="DynamoDB"}`:                                         4,
		`compilefarm_aws_calls_total{operation="GetItem",resource="things",service="DynamoDB"}`:                                         1,
		`compilefarm_aws_request_bytes_total{operation="PutItem",resource="things",service="DynamoDB"}`:                                 float64(put.RequestBytes),
		`compilefarm_aws_response_bytes_total{operation="GetItem",resource="things",service="DynamoDB"}`:                                float64(get.ResponseBytes),
	} {
		if got[sample] != v {
			t.Errorf("%s = %v, want %v", sample, got[sample], v)
		}
	}
}

// gather returns the samples of reg's counters as name{labels} -> value,
// labels sorted by name as in Prometheus' text format.
func gather(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var l []string
			for _, lp := range m.GetLabel() {
				l = append(l, fmt.Sprintf("%s=%q", lp.GetName(), lp.GetValue()))
			}
			out[mf.GetName()+"{"+strings.Join(l, ",")+"}"] = m.GetCounter().GetValue()
		}
	}
	return out
}

// TestS3 counts object bytes both ways through versitygw, a streamed body
// included, and S3's error codes.
func TestS3(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the S3 emulator; skipped with -short")
	}
	ctx := testCtx(t)
	emu, err := emulator.StartS3(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(emu.Stop)
	c := awscalls.New()
	cl := s3.NewFromConfig(config(c), func(o *s3.Options) { o.BaseEndpoint, o.UsePathStyle = aws.String(emu.URL), true })
	if _, err := cl.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("bucket1")}); err != nil {
		t.Fatal(err)
	}
	body := bytes.Repeat([]byte("0123456789"), 10000)
	if _, err := cl.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("bucket1"), Key: aws.String("k"),
		Body: bytes.NewReader(body), ContentLength: aws.Int64(int64(len(body)))}); err != nil {
		t.Fatal(err)
	}
	out, err := cl.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("bucket1"), Key: aws.String("k")})
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(out.Body)
	out.Body.Close()
	if err != nil || !bytes.Equal(got, body) {
		t.Fatalf("get object: %d bytes, %v", len(got), err)
	}
	if _, err := cl.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("bucket1"), Key: aws.String("absent")}); err == nil {
		t.Fatal("GetObject of an absent key succeeded")
	}

	put := find(t, c, "S3", "PutObject", "bucket1")
	// The SDK may send the body aws-chunked with a trailing checksum.
	if put.Calls != 1 || put.RequestBytes < int64(len(body)) || put.RequestBytes > int64(len(body))+1024 {
		t.Errorf("PutObject counted as %v; want 1 call sending about %d bytes", put, len(body))
	}
	get := find(t, c, "S3", "GetObject", "bucket1")
	if get.Calls != 2 || get.Errors["NoSuchKey"] != 1 || get.ResponseBytes < int64(len(body)) || get.ResponseBytes > int64(len(body))+1024 {
		t.Errorf("GetObject counted as %v, errors %v; want 2 calls, 1 NoSuchKey, about %d bytes received", get, get.Errors, len(body))
	}
}

// TestSQS names a queue by the last element of its URL, and counts a
// call that the caller's deadline ended.
func TestSQS(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the SQS emulator; skipped with -short")
	}
	ctx := testCtx(t)
	emu, err := emulator.StartSQS(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(emu.Stop)
	c := awscalls.New()
	cl := sqs.NewFromConfig(config(c), func(o *sqs.Options) { o.BaseEndpoint = aws.String(emu.URL) })
	q, err := cl.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("jobs")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: q.QueueUrl, MessageBody: aws.String("hello")}); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	for {
		// Long polling an emptied queue outlives the deadline.
		_, err := cl.ReceiveMessage(short, &sqs.ReceiveMessageInput{QueueUrl: q.QueueUrl, WaitTimeSeconds: 5})
		if err != nil {
			break
		}
	}
	if n := find(t, c, "SQS", "SendMessage", "jobs"); n.Calls != 1 || n.RequestBytes == 0 {
		t.Errorf("SendMessage counted as %v", n)
	}
	recv := find(t, c, "SQS", "ReceiveMessage", "jobs")
	if recv.Calls < 2 || recv.Errors[awscalls.CodeDeadline] != 1 {
		t.Errorf("ReceiveMessage counted as %v, errors %v; want a deadline error", recv, recv.Errors)
	}
}

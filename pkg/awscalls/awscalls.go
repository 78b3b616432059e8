// Package awscalls counts the AWS API calls a process makes: per service,
// operation and resource (DynamoDB table, SQS queue, S3 bucket), the calls,
// the calls that failed by error code, and the bytes of request and response
// bodies, as aws-sdk-go-v2 middleware on every client made from an
// aws.Config (Counter.Instrument) or given one client's APIOptions
// (Counter.APIOption), exported as Prometheus counters.
//
// A call is one SDK operation call, however many attempts its retryer
// made; bytes are those of every attempt, as sent and as received (bodies
// only: headers, TLS and signing overhead are not counted). What AWS bills
// follows from these: S3 requests by operation, DynamoDB request units from
// the calls and the items' sizes, SQS requests.
package awscalls

import (
	"context"
	"errors"
	"io"
	"net/url"
	"path"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"
	"github.com/prometheus/client_golang/prometheus"
)

// Key identifies what a count is of.
type Key struct {
	Service   string // the SDK's service ID: "DynamoDB", "S3", "SQS", "Secrets Manager"
	Operation string // "GetItem", "PutObject", ...
	// Resource is the DynamoDB table, the SQS queue's name or the S3
	// bucket the call named; "" for calls that name none (or several).
	Resource string
}

// Count is what a Counter counted for one Key.
type Count struct {
	Key
	Calls         int64
	Errors        map[string]int64 // failed calls by error code
	RequestBytes  int64
	ResponseBytes int64
}

// ErrorCount is the number of failed calls, whatever their code.
func (c Count) ErrorCount() int64 {
	var n int64
	for _, v := range c.Errors {
		n += v
	}
	return n
}

// Error codes besides the services' own (ConditionalCheckFailedException,
// NoSuchKey, PreconditionFailed, ...).
const (
	CodeCanceled = "canceled" // the caller's context was cancelled
	CodeDeadline = "deadline" // the caller's context ran out
	CodeOther    = "other"    // no service answer: a connection failure, a client-side error
)

type stats struct {
	calls, reqBytes, respBytes atomic.Int64
	mu                         sync.Mutex
	errors                     map[string]int64
}

// Counter counts the calls of the clients it instruments. The zero value
// is not ready: use New. Safe for concurrent use.
type Counter struct {
	mu    sync.RWMutex
	stats map[Key]*stats
}

// New returns an empty Counter.
func New() *Counter {
	return &Counter{stats: map[Key]*stats{}}
}

// Instrument adds the counting middleware to cfg, so every client made
// from it afterwards (s3.NewFromConfig, dynamodb.NewFromConfig, ...) is
// counted.
func (c *Counter) Instrument(cfg *aws.Config) {
	cfg.APIOptions = append(cfg.APIOptions, c.APIOption)
}

// APIOption adds the counting middleware to one operation's stack: for a
// client's Options.APIOptions or aws.Config.APIOptions.
func (c *Counter) APIOption(stack *middleware.Stack) error {
	// After the SDK's own initialize middleware, which records the
	// service and operation names in the context.
	if err := stack.Initialize.Add(middleware.InitializeMiddlewareFunc("awscalls.Calls", c.countCall), middleware.After); err != nil {
		return err
	}
	// Innermost in the deserialize step, which the retryer runs once per
	// attempt: it sees the request as sent and the response as received,
	// before the SDK's deserializer reads the body.
	return stack.Deserialize.Add(middleware.DeserializeMiddlewareFunc("awscalls.Bytes", c.countBytes), middleware.After)
}

type keyCtx struct{}

func (c *Counter) countCall(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
	k := Key{Service: awsmiddleware.GetServiceID(ctx), Operation: awsmiddleware.GetOperationName(ctx), Resource: resource(in.Parameters)}
	st := c.get(k)
	ctx = context.WithValue(ctx, keyCtx{}, st)
	out, md, err := next.HandleInitialize(ctx, in)
	st.calls.Add(1)
	if err != nil {
		code := errorCode(ctx, err)
		st.mu.Lock()
		if st.errors == nil {
			st.errors = map[string]int64{}
		}
		st.errors[code]++
		st.mu.Unlock()
	}
	return out, md, err
}

func (c *Counter) countBytes(ctx context.Context, in middleware.DeserializeInput, next middleware.DeserializeHandler) (middleware.DeserializeOutput, middleware.Metadata, error) {
	st, _ := ctx.Value(keyCtx{}).(*stats)
	if st == nil { // a stack without the initialize half: nothing to count into
		return next.HandleDeserialize(ctx, in)
	}
	if req, ok := in.Request.(*smithyhttp.Request); ok {
		n := req.ContentLength
		if n < 0 {
			if l, ok, err := req.StreamLength(); ok && err == nil {
				n = l
			}
		}
		if n > 0 {
			st.reqBytes.Add(n)
		}
	}
	out, md, err := next.HandleDeserialize(ctx, in)
	if resp, ok := out.RawResponse.(*smithyhttp.Response); ok && resp != nil && resp.Response != nil {
		switch {
		case resp.ContentLength >= 0:
			st.respBytes.Add(resp.ContentLength)
		case resp.Body != nil:
			// Length unknown (chunked): count what is read.
			resp.Body = &countingBody{ReadCloser: resp.Body, n: &st.respBytes}
		}
	}
	return out, md, err
}

type countingBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n.Add(int64(n))
	return n, err
}

func (c *Counter) get(k Key) *stats {
	c.mu.RLock()
	st := c.stats[k]
	c.mu.RUnlock()
	if st != nil {
		return st
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if st = c.stats[k]; st == nil {
		st = &stats{}
		c.stats[k] = st
	}
	return st
}

// resource names the table, queue or bucket an operation's input names,
// from its TableName, QueueUrl or Bucket field.
func resource(params any) string {
	v := reflect.ValueOf(params)
	if v.Kind() != reflect.Pointer || v.IsNil() || v.Elem().Kind() != reflect.Struct {
		return ""
	}
	v = v.Elem()
	for _, f := range []string{"TableName", "QueueUrl", "Bucket"} {
		fv := v.FieldByName(f)
		if !fv.IsValid() || fv.Type() != reflect.TypeFor[*string]() || fv.IsNil() {
			continue
		}
		s := fv.Elem().String()
		if f == "QueueUrl" {
			if u, err := url.Parse(s); err == nil {
				s = path.Base(u.Path)
			}
		}
		return s
	}
	return ""
}

// errorCode is the service's error code for err, or one of the Code
// constants.
func errorCode(ctx context.Context, err error) string {
	var ae smithy.APIError
	switch {
	case errors.As(err, &ae) && ae.ErrorCode() != "":
		return ae.ErrorCode()
	case errors.Is(err, context.Canceled) || errors.Is(ctx.Err(), context.Canceled):
		return CodeCanceled
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(ctx.Err(), context.DeadlineExceeded):
		return CodeDeadline
	}
	return CodeOther
}

// Snapshot returns every count so far, sorted by service, operation and
// resource.
func (c *Counter) Snapshot() []Count {
	c.mu.RLock()
	out := make([]Count, 0, len(c.stats))
	for k, st := range c.stats {
		cnt := Count{Key: k, Calls: st.calls.Load(), RequestBytes: st.reqBytes.Load(), ResponseBytes: st.respBytes.Load()}
		st.mu.Lock()
		if len(st.errors) > 0 {
			cnt.Errors = make(map[string]int64, len(st.errors))
			for code, n := range st.errors {
				cnt.Errors[code] = n
			}
		}
		st.mu.Unlock()
		out = append(out, cnt)
	}
	c.mu.RUnlock()
	slices.SortFunc(out, func(a, b Count) int {
		return strings.Compare(a.Service+"\x00"+a.Operation+"\x00"+a.Resource, b.Service+"\x00"+b.Operation+"\x00"+b.Resource)
	})
	return out
}

// The metrics a Counter exports.
var (
	callsDesc = prometheus.NewDesc("compilefarm_aws_calls_total",
		"AWS API calls (retries included in one call), by service, operation and resource (table, queue or bucket).",
		[]string{"service", "operation", "resource"}, nil)
	errorsDesc = prometheus.NewDesc("compilefarm_aws_errors_total",
		"AWS API calls that returned an error, by service, operation, resource and error code.",
		[]string{"service", "operation", "resource", "code"}, nil)
	reqBytesDesc = prometheus.NewDesc("compilefarm_aws_request_bytes_total",
		"Bytes of AWS API request bodies sent (every attempt), by service, operation and resource.",
		[]string{"service", "operation", "resource"}, nil)
	respBytesDesc = prometheus.NewDesc("compilefarm_aws_response_bytes_total",
		"Bytes of AWS API response bodies received (every attempt), by service, operation and resource.",
		[]string{"service", "operation", "resource"}, nil)
)

// Describe is part of prometheus.Collector.
func (c *Counter) Describe(ch chan<- *prometheus.Desc) {
	ch <- callsDesc
	ch <- errorsDesc
	ch <- reqBytesDesc
	ch <- respBytesDesc
}

// Collect is part of prometheus.Collector.
func (c *Counter) Collect(ch chan<- prometheus.Metric) {
	for _, cnt := range c.Snapshot() {
		l := []string{cnt.Service, cnt.Operation, cnt.Resource}
		ch <- prometheus.MustNewConstMetric(callsDesc, prometheus.CounterValue, float64(cnt.Calls), l...)
		ch <- prometheus.MustNewConstMetric(reqBytesDesc, prometheus.CounterValue, float64(cnt.RequestBytes), l...)
		ch <- prometheus.MustNewConstMetric(respBytesDesc, prometheus.CounterValue, float64(cnt.ResponseBytes), l...)
		for code, n := range cnt.Errors {
			ch <- prometheus.MustNewConstMetric(errorsDesc, prometheus.CounterValue, float64(n), append(l, code)...)
		}
	}
}

var _ prometheus.Collector = (*Counter)(nil)

// String formats a count for logs: "DynamoDB GetItem nodes: 3 calls, 310 bytes sent, 4512 received".
func (c Count) String() string {
	s := c.Service + " " + c.Operation
	if c.Resource != "" {
		s += " " + c.Resource
	}
	s += ": " + strconv.FormatInt(c.Calls, 10) + " calls"
	if n := c.ErrorCount(); n > 0 {
		s += " (" + strconv.FormatInt(n, 10) + " failed)"
	}
	return s + ", " + strconv.FormatInt(c.RequestBytes, 10) + " bytes sent, " + strconv.FormatInt(c.ResponseBytes, 10) + " received"
}

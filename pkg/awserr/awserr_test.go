package awserr_test

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"syscall"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/compilefarm/compilefarm/pkg/awserr"
)

// answer builds the error an SDK client returns for an HTTP answer with
// status whose body said api (nil: no error code).
func answer(status int, api error) error {
	if api == nil {
		api = errors.New("http error")
	}
	return &smithy.OperationError{
		ServiceID:     "DynamoDB",
		OperationName: "GetItem",
		Err: &awshttp.ResponseError{
			ResponseError: &smithyhttp.ResponseError{
				Response: &smithyhttp.Response{Response: &http.Response{StatusCode: status}},
				Err:      api,
			},
			RequestID: "req-1",
		},
	}
}

func code(c string) error {
	return &smithy.GenericAPIError{Code: c, Message: c + " message"}
}

// notSent is the error of a request the SDK could not send.
func notSent(err error) error {
	return &smithy.OperationError{ServiceID: "SQS", OperationName: "SendMessage", Err: &smithyhttp.RequestSendError{Err: err}}
}

func TestTransient(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: &net.OpError{Op: "connect", Err: syscall.ECONNREFUSED}}
	tests := []struct {
		name string
		err  error
		want bool
	}{
		// Codes common to AWS services, whatever the status.
		{"Throttling", answer(400, code("Throttling")), true},
		{"ThrottlingException", answer(400, code("ThrottlingException")), true},
		{"RequestThrottled", answer(403, code("RequestThrottled")), true},
		{"TooManyRequestsException", answer(400, code("TooManyRequestsException")), true},
		{"RequestLimitExceeded", answer(400, code("RequestLimitExceeded")), true},
		{"BandwidthLimitExceeded", answer(400, code("BandwidthLimitExceeded")), true},
		{"SlowDown", answer(503, code("SlowDown")), true},
		{"RequestTimeout", answer(400, code("RequestTimeout")), true},
		{"RequestTimeoutException", answer(400, code("RequestTimeoutException")), true},
		{"InternalError", answer(500, code("InternalError")), true},
		{"InternalFailure", answer(500, code("InternalFailure")), true},
		{"InternalServerError", answer(500, code("InternalServerError")), true},
		{"ServiceUnavailable", answer(503, code("ServiceUnavailable")), true},
		{"ServiceUnavailableException", answer(503, code("ServiceUnavailableException")), true},
		// A service's own codes are its driver's to list.
		{"DynamoDB's ProvisionedThroughputExceededException", answer(400, code("ProvisionedThroughputExceededException")), false},
		{"SQS's KmsThrottled", answer(400, code("KmsThrottled")), false},
		{"S3's BadDigest", answer(400, code("BadDigest")), false},
		// Answers that retrying does not change.
		{"AccessDenied", answer(403, code("AccessDenied")), false},
		{"ValidationException", answer(400, code("ValidationException")), false},
		{"bare 404", answer(404, nil), false},
		{"bare 400", answer(400, nil), false},
		// The service says the fault is its own.
		{"server fault", answer(400, &smithy.GenericAPIError{Code: "SomethingNew", Fault: smithy.FaultServer}), true},
		{"client fault", answer(400, &smithy.GenericAPIError{Code: "SomethingNew", Fault: smithy.FaultClient}), false},
		// The status alone.
		{"bare 500", answer(500, nil), true},
		{"bare 502", answer(502, nil), true},
		{"bare 503", answer(503, nil), true},
		{"429", answer(429, nil), true},
		{"5xx with an unknown code", answer(500, code("SomethingNew")), true},
		// The SDK retried and gave up.
		{"retries exhausted", &retry.MaxAttemptsError{Attempt: 3, Err: answer(400, code("PriorRequestNotComplete"))}, true},
		// Transport: the request never got a whole answer.
		{"connection refused", notSent(refused), true},
		{"certificate not trusted", notSent(&url.Error{Op: "Post", URL: "https://127.0.0.1:1", Err: x509.UnknownAuthorityError{}}), true},
		{"network error", refused, true},
		{"connection reset", fmt.Errorf("read: %w", syscall.ECONNRESET), true},
		{"body cut short", answer(200, &smithy.DeserializationError{Err: fmt.Errorf("read body: %w", io.ErrUnexpectedEOF)}), true},
		{"deadline (a timeout)", fmt.Errorf("op: %w", context.DeadlineExceeded), true},
		// Neither.
		{"canceled", &aws.RequestCanceledError{Err: context.Canceled}, false},
		{"plain error", errors.New("boom"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := awserr.Transient(tt.err); got != tt.want {
				t.Errorf("Transient(%v) = %v, want %v", tt.err, got, tt.want)
			}
		})
	}
}

func TestTransientCode(t *testing.T) {
	for code, want := range map[string]bool{
		"ThrottlingException": true,
		"SlowDown":            true,
		"ServiceUnavailable":  true,
		"AccessDenied":        false,
		"KmsThrottled":        false,
		"":                    false,
	} {
		if got := awserr.TransientCode(code); got != want {
			t.Errorf("TransientCode(%q) = %v, want %v", code, got, want)
		}
	}
}

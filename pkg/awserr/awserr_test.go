package awserr_test

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"syscall"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/smithy-go"

	"github.com/compilefarm/compilefarm/pkg/awserr"
	"github.com/compilefarm/compilefarm/pkg/awserr/awserrtest"
)

func TestTransient(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: &net.OpError{Op: "connect", Err: syscall.ECONNREFUSED}}
	tests := []struct {
		name string
		err  error
		want bool
	}{
		// Codes common to AWS services, whatever the status.
		{"Throttling", awserrtest.Answer(400, awserrtest.Code("Throttling")), true},
		{"ThrottlingException", awserrtest.Answer(400, awserrtest.Code("ThrottlingException")), true},
		{"RequestThrottled", awserrtest.Answer(403, awserrtest.Code("RequestThrottled")), true},
		{"TooManyRequestsException", awserrtest.Answer(400, awserrtest.Code("TooManyRequestsException")), true},
		{"RequestLimitExceeded", awserrtest.Answer(400, awserrtest.Code("RequestLimitExceeded")), true},
		{"BandwidthLimitExceeded", awserrtest.Answer(400, awserrtest.Code("BandwidthLimitExceeded")), true},
		{"SlowDown", awserrtest.Answer(503, awserrtest.Code("SlowDown")), true},
		{"RequestTimeout", awserrtest.Answer(400, awserrtest.Code("RequestTimeout")), true},
		{"RequestTimeoutException", awserrtest.Answer(400, awserrtest.Code("RequestTimeoutException")), true},
		{"InternalError", awserrtest.Answer(500, awserrtest.Code("InternalError")), true},
		{"InternalFailure", awserrtest.Answer(500, awserrtest.Code("InternalFailure")), true},
		{"InternalServerError", awserrtest.Answer(500, awserrtest.Code("InternalServerError")), true},
		{"ServiceUnavailable", awserrtest.Answer(503, awserrtest.Code("ServiceUnavailable")), true},
		{"ServiceUnavailableException", awserrtest.Answer(503, awserrtest.Code("ServiceUnavailableException")), true},
		// A service's own codes are its driver's to list.
		{"DynamoDB's ProvisionedThroughputExceededException", awserrtest.Answer(400, awserrtest.Code("ProvisionedThroughputExceededException")), false},
		{"SQS's KmsThrottled", awserrtest.Answer(400, awserrtest.Code("KmsThrottled")), false},
		{"S3's BadDigest", awserrtest.Answer(400, awserrtest.Code("BadDigest")), false},
		// Answers that retrying does not change.
		{"AccessDenied", awserrtest.Answer(403, awserrtest.Code("AccessDenied")), false},
		{"ValidationException", awserrtest.Answer(400, awserrtest.Code("ValidationException")), false},
		{"bare 404", awserrtest.Answer(404, nil), false},
		{"bare 400", awserrtest.Answer(400, nil), false},
		// The service says the fault is its own.
		{"server fault", awserrtest.Answer(400, &smithy.GenericAPIError{Code: "SomethingNew", Fault: smithy.FaultServer}), true},
		{"client fault", awserrtest.Answer(400, &smithy.GenericAPIError{Code: "SomethingNew", Fault: smithy.FaultClient}), false},
		// The status alone.
		{"bare 500", awserrtest.Answer(500, nil), true},
		{"bare 502", awserrtest.Answer(502, nil), true},
		{"bare 503", awserrtest.Answer(503, nil), true},
		{"429", awserrtest.Answer(429, nil), true},
		{"5xx with an unknown code", awserrtest.Answer(500, awserrtest.Code("SomethingNew")), true},
		// The SDK retried and gave up.
		{"retries exhausted", &retry.MaxAttemptsError{Attempt: 3, Err: awserrtest.Answer(400, awserrtest.Code("PriorRequestNotComplete"))}, true},
		// Transport: the request never got a whole answer.
		{"connection refused", awserrtest.NotSent(refused), true},
		{"certificate not trusted", awserrtest.NotSent(&url.Error{Op: "Post", URL: "https://127.0.0.1:1", Err: x509.UnknownAuthorityError{}}), true},
		{"network error", refused, true},
		{"connection reset", fmt.Errorf("read: %w", syscall.ECONNRESET), true},
		{"body cut short", awserrtest.Answer(200, &smithy.DeserializationError{Err: fmt.Errorf("read body: %w", io.ErrUnexpectedEOF)}), true},
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

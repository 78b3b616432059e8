// Package awserr tells which errors of an AWS SDK call mean "try again
// later": the error codes common to AWS services for throttling and
// failures on the service's side, 5xx and 429 answers, retries the SDK gave
// up on, and failures to reach the service or to get its whole answer. The
// AWS drivers (pkg/dynamostate, pkg/s3store, pkg/sqsqueue) map these to
// farm.ErrTransient after their service-specific codes.
package awserr

import (
	"errors"
	"io"
	"net"
	"net/http"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// transientCodes are the error codes AWS services answer with when the
// same request may succeed later: throttling (the SDK's throttle codes S3,
// SQS and DynamoDB share, S3's SlowDown among them: no other service sends
// it), a request that timed out, and failures on the service's side.
// Codes of one service only (DynamoDB's ProvisionedThroughputExceeded, SQS's
// KmsThrottled, ...) stay in its driver.
var transientCodes = map[string]bool{
	"Throttling":                  true,
	"ThrottlingException":         true,
	"RequestThrottled":            true,
	"TooManyRequestsException":    true,
	"RequestLimitExceeded":        true,
	"BandwidthLimitExceeded":      true,
	"SlowDown":                    true,
	"RequestTimeout":              true,
	"RequestTimeoutException":     true,
	"InternalError":               true,
	"InternalFailure":             true,
	"InternalServerError":         true,
	"ServiceUnavailable":          true,
	"ServiceUnavailableException": true,
}

// TransientCode reports whether code, an AWS error code, is one that
// services of every kind answer with when the same request may succeed
// later (throttling, a timed-out request, a failure on the service's side).
func TransientCode(code string) bool {
	return transientCodes[code]
}

// Transient reports whether err, returned by an AWS SDK client, means the
// same request may succeed later: an error code TransientCode lists, a
// fault the service calls its own, an HTTP answer 5xx or 429, a retryable
// error the SDK retried until it gave up, or, for an error without an
// error code, a failure to reach the service or to get its whole answer
// (a network error, a request that could not be sent, a body cut short).
// Context cancellation is not looked at: drivers check it first.
func Transient(err error) bool {
	var api smithy.APIError
	code := ""
	if errors.As(err, &api) {
		code = api.ErrorCode()
		if transientCodes[code] || api.ErrorFault() == smithy.FaultServer {
			return true
		}
	}
	var status interface{ HTTPStatusCode() int }
	if errors.As(err, &status) {
		if s := status.HTTPStatusCode(); s >= 500 || s == http.StatusTooManyRequests {
			return true
		}
	}
	var gaveUp *retry.MaxAttemptsError
	if errors.As(err, &gaveUp) {
		return true
	}
	return code == "" && transport(err)
}

// transport reports whether err is a failure to reach the service or to
// get its whole answer: a network error, a request the SDK could not send,
// a body cut short, or what the SDK's own retryer counts as a connection
// error or a timeout.
func transport(err error) bool {
	var (
		netErr net.Error
		send   *smithyhttp.RequestSendError
	)
	if errors.As(err, &netErr) || errors.As(err, &send) || errors.Is(err, io.ErrUnexpectedEOF) {
		return true
	}
	if retry.IsErrorRetryables(retry.DefaultRetryables).IsErrorRetryable(err) == aws.TrueTernary {
		return true
	}
	return retry.IsErrorTimeouts(retry.DefaultTimeouts).IsErrorTimeout(err) == aws.TrueTernary
}

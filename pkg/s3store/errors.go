package s3store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/compilefarm/compilefarm/pkg/farm"
)

// Error codes S3 (or an S3-compatible store) answers with when retrying
// later may succeed, besides any 5xx or 429 status.
var transientCodes = map[string]bool{
	"SlowDown":                   true,
	"Throttling":                 true,
	"ThrottlingException":        true,
	"RequestThrottled":           true,
	"TooManyRequestsException":   true,
	"RequestLimitExceeded":       true,
	"BandwidthLimitExceeded":     true,
	"RequestTimeout":             true,
	"RequestTimeoutException":    true,
	"InternalError":              true,
	"ServiceUnavailable":         true,
	"OperationAborted":           true,
	"ConditionalRequestConflict": true,
	// The body did not match the checksum or content hash sent with it: the
	// bytes were damaged in transit (both are computed here from the caller's
	// bytes), so sending them again may succeed.
	"BadDigest":                 true,
	"XAmzContentSHA256Mismatch": true,
}

// notFoundCodes mean the object is not there. HeadObject answers a bare 404
// (code "NotFound"), for a missing key and a missing bucket alike.
var notFoundCodes = map[string]bool{
	"NoSuchKey": true,
	"NotFound":  true,
}

// errorCode returns the S3 error code of err, or a code derived from the
// HTTP status when the answer had no body (HEAD requests): "" when err is not
// an answer from the service.
func errorCode(err error) string {
	var api smithy.APIError
	if errors.As(err, &api) && api.ErrorCode() != "" {
		return api.ErrorCode()
	}
	switch httpStatus(err) {
	case http.StatusNotFound:
		return "NotFound"
	case http.StatusPreconditionFailed:
		return "PreconditionFailed"
	case http.StatusConflict:
		return "ConditionalRequestConflict"
	}
	return ""
}

func httpStatus(err error) int {
	var re *smithyhttp.ResponseError
	if errors.As(err, &re) {
		return re.HTTPStatusCode()
	}
	return 0
}

// translate turns an error from the S3 client into one that carries the
// domain's kind (farm.ErrNotFound, farm.ErrTransient) and the SDK's message,
// but no SDK type: callers cannot, and need not, look inside. op is "get",
// "put" or "has".
func translate(op, bucket, key string, err error) error {
	return translateAt(fmt.Sprintf("%s content s3://%s/%s", op, bucket, key), bucket, err)
}

// translateAt is translate for an error of what where says ("put name
// s3://b/k").
func translateAt(where, bucket string, err error) error {
	msg := err.Error()
	switch {
	case errors.Is(err, context.Canceled):
		return fmt.Errorf("%s: %w", where, context.Canceled)
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%s: %w: %w", where, farm.ErrTransient, context.DeadlineExceeded)
	}
	code := errorCode(err)
	status := httpStatus(err)
	switch {
	case notFoundCodes[code]:
		return fmt.Errorf("%s: %w", where, farm.ErrNotFound)
	case code == "NoSuchBucket":
		return fmt.Errorf("%s: bucket %q does not exist: %s", where, bucket, msg)
	case transientCodes[code], status >= 500, status == http.StatusTooManyRequests:
		return fmt.Errorf("%s: %s: %w", where, msg, farm.ErrTransient)
	case code == "" && isTransportError(err):
		return fmt.Errorf("%s: %s: %w", where, msg, farm.ErrTransient)
	}
	return fmt.Errorf("%s: %s", where, msg)
}

// isTransportError reports whether err is a failure to reach the service or
// to get its whole answer (connection refused or reset, timeouts, a body cut
// short): the SDK's own list of retryable errors, after it gave up retrying.
func isTransportError(err error) bool {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return true // the connection ended in the middle of a body
	}
	if retry.IsErrorRetryables(retry.DefaultRetryables).IsErrorRetryable(err) == aws.TrueTernary {
		return true
	}
	return retry.IsErrorTimeouts(retry.DefaultTimeouts).IsErrorTimeout(err) == aws.TrueTernary
}

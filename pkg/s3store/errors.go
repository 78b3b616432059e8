package s3store

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/compilefarm/compilefarm/pkg/awserr"
	"github.com/compilefarm/compilefarm/pkg/farm"
)

// transientCodes are the error codes of S3's own (or an S3-compatible
// store's) that mean retrying later may succeed; awserr.Transient has the
// ones common to AWS services (SlowDown among them), 5xx and 429 answers
// and transport failures.
var transientCodes = map[string]bool{
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
	switch {
	case notFoundCodes[code]:
		return fmt.Errorf("%s: %w", where, farm.ErrNotFound)
	case code == "NoSuchBucket":
		return fmt.Errorf("%s: bucket %q does not exist: %s", where, bucket, msg)
	case transientCodes[code], awserr.Transient(err):
		return fmt.Errorf("%s: %s: %w", where, msg, farm.ErrTransient)
	}
	return fmt.Errorf("%s: %s", where, msg)
}

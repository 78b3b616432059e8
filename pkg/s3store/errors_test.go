package s3store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/compilefarm/compilefarm/pkg/farm"
)

// sdkError builds the error the S3 client returns for an HTTP answer with
// status and (optionally) an S3 error code.
func sdkError(status int, api error) error {
	if api == nil {
		api = errors.New("http error")
	}
	return &smithy.OperationError{
		ServiceID:     "S3",
		OperationName: "GetObject",
		Err: &awshttp.ResponseError{
			ResponseError: &smithyhttp.ResponseError{
				Response: &smithyhttp.Response{Response: &http.Response{StatusCode: status}},
				Err:      api,
			},
			RequestID: "req-1",
		},
	}
}

func apiErr(code string) error {
	return &smithy.GenericAPIError{Code: code, Message: code + " message"}
}

func TestTranslate(t *testing.T) {
	var none error // no domain kind
	connRefused := &net.OpError{Op: "dial", Net: "tcp", Err: &net.OpError{Op: "connect", Err: syscall.ECONNREFUSED}}
	tests := []struct {
		name string
		err  error
		want error
	}{
		{"NoSuchKey", sdkError(404, &types.NoSuchKey{Message: aws.String("gone")}), farm.ErrNotFound},
		{"HEAD 404 without body", sdkError(404, &types.NotFound{}), farm.ErrNotFound},
		{"bare 404", sdkError(404, nil), farm.ErrNotFound},
		{"NoSuchBucket", sdkError(404, apiErr("NoSuchBucket")), none},
		{"AccessDenied", sdkError(403, apiErr("AccessDenied")), none},
		{"SlowDown", sdkError(503, apiErr("SlowDown")), farm.ErrTransient},
		{"InternalError", sdkError(500, apiErr("InternalError")), farm.ErrTransient},
		{"bare 502", sdkError(502, nil), farm.ErrTransient},
		{"429", sdkError(429, nil), farm.ErrTransient},
		{"RequestTimeout", sdkError(400, apiErr("RequestTimeout")), farm.ErrTransient},
		{"BadDigest", sdkError(400, apiErr("BadDigest")), farm.ErrTransient},
		{"retries exhausted on throttling", &retry.MaxAttemptsError{Attempt: 3, Err: sdkError(503, apiErr("SlowDown"))}, farm.ErrTransient},
		{"connection refused", &smithy.OperationError{ServiceID: "S3", OperationName: "PutObject", Err: &smithyhttp.RequestSendError{Err: connRefused}}, farm.ErrTransient},
		{"body cut short", fmt.Errorf("read body: %w", io.ErrUnexpectedEOF), farm.ErrTransient},
		{"deadline", fmt.Errorf("op: %w", context.DeadlineExceeded), farm.ErrTransient},
		{"canceled", &aws.RequestCanceledError{Err: context.Canceled}, context.Canceled},
		{"InvalidBucketName", sdkError(400, apiErr("InvalidBucketName")), none},
	}
	kinds := []error{farm.ErrNotFound, farm.ErrTransient, farm.ErrInvalid, farm.ErrConflict, context.Canceled}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := translate("get", "bkt", "content/ab/abc", tt.err)
			for _, k := range kinds {
				if is := errors.Is(got, k); is != (k == tt.want) {
					t.Errorf("errors.Is(%v, %v) = %v", got, k, is)
				}
			}
			if !strings.Contains(got.Error(), "s3://bkt/content/ab/abc") {
				t.Errorf("error %q does not name the object", got)
			}
			// No SDK type leaks: callers see only the domain's kinds.
			var api smithy.APIError
			var op *smithy.OperationError
			var re *smithyhttp.ResponseError
			if errors.As(got, &api) || errors.As(got, &op) || errors.As(got, &re) {
				t.Errorf("translated error %v still wraps an SDK type", got)
			}
		})
	}
}

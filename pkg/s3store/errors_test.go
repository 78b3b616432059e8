package s3store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/compilefarm/compilefarm/pkg/awserr/awserrtest"
	"github.com/compilefarm/compilefarm/pkg/farm"
)

func TestTranslate(t *testing.T) {
	var none error // no domain kind
	connRefused := &net.OpError{Op: "dial", Net: "tcp", Err: &net.OpError{Op: "connect", Err: syscall.ECONNREFUSED}}
	tests := []struct {
		name string
		err  error
		want error
	}{
		{"NoSuchKey", awserrtest.Answer(404, &types.NoSuchKey{Message: aws.String("gone")}), farm.ErrNotFound},
		{"HEAD 404 without body", awserrtest.Answer(404, &types.NotFound{}), farm.ErrNotFound},
		{"bare 404", awserrtest.Answer(404, nil), farm.ErrNotFound},
		{"NoSuchBucket", awserrtest.Answer(404, awserrtest.Code("NoSuchBucket")), none},
		{"AccessDenied", awserrtest.Answer(403, awserrtest.Code("AccessDenied")), none},
		{"SlowDown", awserrtest.Answer(503, awserrtest.Code("SlowDown")), farm.ErrTransient},
		{"InternalError", awserrtest.Answer(500, awserrtest.Code("InternalError")), farm.ErrTransient},
		{"bare 502", awserrtest.Answer(502, nil), farm.ErrTransient},
		{"429", awserrtest.Answer(429, nil), farm.ErrTransient},
		{"RequestTimeout", awserrtest.Answer(400, awserrtest.Code("RequestTimeout")), farm.ErrTransient},
		{"BadDigest", awserrtest.Answer(400, awserrtest.Code("BadDigest")), farm.ErrTransient},
		{"retries exhausted on throttling", &retry.MaxAttemptsError{Attempt: 3, Err: awserrtest.Answer(503, awserrtest.Code("SlowDown"))}, farm.ErrTransient},
		{"connection refused", &smithy.OperationError{ServiceID: "S3", OperationName: "PutObject", Err: &smithyhttp.RequestSendError{Err: connRefused}}, farm.ErrTransient},
		{"body cut short", fmt.Errorf("read body: %w", io.ErrUnexpectedEOF), farm.ErrTransient},
		{"deadline", fmt.Errorf("op: %w", context.DeadlineExceeded), farm.ErrTransient},
		{"canceled", &aws.RequestCanceledError{Err: context.Canceled}, context.Canceled},
		{"InvalidBucketName", awserrtest.Answer(400, awserrtest.Code("InvalidBucketName")), none},
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

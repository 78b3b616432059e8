package kmskey

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
	"github.com/aws/aws-sdk-go-v2/service/kms/types"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/compilefarm/compilefarm/pkg/awserr/awserrtest"
	"github.com/compilefarm/compilefarm/pkg/farm"
)

func TestTranslate(t *testing.T) {
	var none error // no domain kind
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: &net.OpError{Op: "connect", Err: syscall.ECONNREFUSED}}
	tests := []struct {
		name string
		err  error
		want error
		say  string
	}{
		{"NotFoundException", awserrtest.Answer(400, &types.NotFoundException{Message: aws.String("Alias x is not found.")}), farm.ErrNotFound, "Alias x is not found."},
		{"AlreadyExistsException", awserrtest.Answer(400, &types.AlreadyExistsException{Message: aws.String("exists")}), farm.ErrConflict, "exists"},
		{"DisabledException", awserrtest.Answer(400, &types.DisabledException{Message: aws.String("k is disabled.")}), farm.ErrInvalid, "k is disabled."},
		{"KMSInvalidStateException", awserrtest.Answer(400, &types.KMSInvalidStateException{Message: aws.String("pending deletion")}), farm.ErrInvalid, "pending deletion"},
		{"InvalidKeyUsageException", awserrtest.Answer(400, awserrtest.Code("InvalidKeyUsageException")), farm.ErrInvalid, ""},
		{"ValidationException", awserrtest.Answer(400, awserrtest.Code("ValidationException")), farm.ErrInvalid, ""},
		{"KMSInternalException", awserrtest.Answer(500, awserrtest.Code("KMSInternalException")), farm.ErrTransient, ""},
		{"KeyUnavailableException", awserrtest.Answer(500, awserrtest.Code("KeyUnavailableException")), farm.ErrTransient, ""},
		{"DependencyTimeoutException", awserrtest.Answer(503, awserrtest.Code("DependencyTimeoutException")), farm.ErrTransient, ""},
		{"ThrottlingException", awserrtest.Answer(400, awserrtest.Code("ThrottlingException")), farm.ErrTransient, ""},
		{"retries exhausted", &retry.MaxAttemptsError{Attempt: 3, Err: awserrtest.Answer(400, awserrtest.Code("ThrottlingException"))}, farm.ErrTransient, ""},
		{"connection refused", awserrtest.NotSent(refused), farm.ErrTransient, ""},
		{"body cut short", fmt.Errorf("read: %w", io.ErrUnexpectedEOF), farm.ErrTransient, ""},
		{"AccessDeniedException", awserrtest.Answer(400, awserrtest.Code("AccessDeniedException")), none, "kms:Sign"},
		{"LimitExceededException", awserrtest.Answer(400, awserrtest.Code("LimitExceededException")), none, ""},
		{"deadline", fmt.Errorf("op: %w", context.DeadlineExceeded), farm.ErrTransient, ""},
		{"canceled", &aws.RequestCanceledError{Err: context.Canceled}, context.Canceled, ""},
	}
	kinds := []error{farm.ErrNotFound, farm.ErrConflict, farm.ErrInvalid, farm.ErrTransient, context.Canceled}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := translate("sign with KMS key alias/x", tt.err)
			for _, k := range kinds {
				if is := errors.Is(got, k); is != (k == tt.want) {
					t.Errorf("errors.Is(%v, %v) = %v", got, k, is)
				}
			}
			if !strings.HasPrefix(got.Error(), "sign with KMS key alias/x: ") || !strings.Contains(got.Error(), tt.say) {
				t.Errorf("error %q does not say what was done and %q", got, tt.say)
			}
			var api smithy.APIError
			var op *smithy.OperationError
			var re *smithyhttp.ResponseError
			if errors.As(got, &api) || errors.As(got, &op) || errors.As(got, &re) {
				t.Errorf("translated error %v still wraps an SDK type", got)
			}
		})
	}
}

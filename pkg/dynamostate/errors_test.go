package dynamostate

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/compilefarm/compilefarm/pkg/awserr/awserrtest"
	"github.com/compilefarm/compilefarm/pkg/farm"
)

func TestTranslate(t *testing.T) {
	var none error // no domain kind
	tests := []struct {
		name string
		err  error
		want error
	}{
		{"ConditionalCheckFailedException", awserrtest.Answer(400, awserrtest.Code("ConditionalCheckFailedException")), errLost},
		{"TransactionConflictException", awserrtest.Answer(400, awserrtest.Code("TransactionConflictException")), errLost},
		{"ResourceNotFoundException", awserrtest.Answer(400, awserrtest.Code("ResourceNotFoundException")), none},
		{"ProvisionedThroughputExceededException", awserrtest.Answer(400, awserrtest.Code("ProvisionedThroughputExceededException")), farm.ErrTransient},
		{"LimitExceededException", awserrtest.Answer(400, awserrtest.Code("LimitExceededException")), farm.ErrTransient},
		{"TransactionInProgressException", awserrtest.Answer(400, awserrtest.Code("TransactionInProgressException")), farm.ErrTransient},
		{"ThrottlingException", awserrtest.Answer(400, awserrtest.Code("ThrottlingException")), farm.ErrTransient},
		{"InternalServerError", awserrtest.Answer(500, awserrtest.Code("InternalServerError")), farm.ErrTransient},
		{"bare 503", awserrtest.Answer(503, nil), farm.ErrTransient},
		{"retries exhausted", &retry.MaxAttemptsError{Attempt: 3, Err: awserrtest.Answer(400, awserrtest.Code("ThrottlingException"))}, farm.ErrTransient},
		{"connection refused", &smithyhttp.RequestSendError{Err: syscall.ECONNREFUSED}, farm.ErrTransient},
		{"ValidationException", awserrtest.Answer(400, awserrtest.Code("ValidationException")), farm.ErrInvalid},
		{"AccessDeniedException", awserrtest.Answer(400, awserrtest.Code("AccessDeniedException")), none},
		{"canceled", fmt.Errorf("op: %w", context.Canceled), context.Canceled},
		{"deadline", fmt.Errorf("op: %w", context.DeadlineExceeded), context.DeadlineExceeded},
	}
	kinds := []error{errLost, farm.ErrTransient, farm.ErrInvalid, farm.ErrNotFound, context.Canceled, context.DeadlineExceeded}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := translate(tt.err, "nodes")
			for _, k := range kinds {
				if is := errors.Is(got, k); is != (k == tt.want) {
					t.Errorf("errors.Is(%v, %v) = %v", got, k, is)
				}
			}
			var api smithy.APIError
			if errors.As(got, &api) {
				t.Errorf("translated error %v still wraps an SDK type", got)
			}
		})
	}
}

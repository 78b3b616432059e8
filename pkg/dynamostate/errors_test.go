package dynamostate

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"syscall"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/compilefarm/compilefarm/pkg/farm"
)

// answer builds the error the DynamoDB client returns for an HTTP answer
// with status and error code (none when code is "").
func answer(status int, code string) error {
	var api error = errors.New("http error")
	if code != "" {
		api = &smithy.GenericAPIError{Code: code, Message: code + " message"}
	}
	return &smithy.OperationError{
		ServiceID:     "DynamoDB",
		OperationName: "UpdateItem",
		Err: &awshttp.ResponseError{
			ResponseError: &smithyhttp.ResponseError{
				Response: &smithyhttp.Response{Response: &http.Response{StatusCode: status}},
				Err:      api,
			},
		},
	}
}

func TestTranslate(t *testing.T) {
	var none error // no domain kind
	tests := []struct {
		name string
		err  error
		want error
	}{
		{"ConditionalCheckFailedException", answer(400, "ConditionalCheckFailedException"), errLost},
		{"TransactionConflictException", answer(400, "TransactionConflictException"), errLost},
		{"ResourceNotFoundException", answer(400, "ResourceNotFoundException"), none},
		{"ProvisionedThroughputExceededException", answer(400, "ProvisionedThroughputExceededException"), farm.ErrTransient},
		{"LimitExceededException", answer(400, "LimitExceededException"), farm.ErrTransient},
		{"TransactionInProgressException", answer(400, "TransactionInProgressException"), farm.ErrTransient},
		{"ThrottlingException", answer(400, "ThrottlingException"), farm.ErrTransient},
		{"InternalServerError", answer(500, "InternalServerError"), farm.ErrTransient},
		{"bare 503", answer(503, ""), farm.ErrTransient},
		{"retries exhausted", &retry.MaxAttemptsError{Attempt: 3, Err: answer(400, "ThrottlingException")}, farm.ErrTransient},
		{"connection refused", &smithyhttp.RequestSendError{Err: syscall.ECONNREFUSED}, farm.ErrTransient},
		{"ValidationException", answer(400, "ValidationException"), farm.ErrInvalid},
		{"AccessDeniedException", answer(400, "AccessDeniedException"), none},
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

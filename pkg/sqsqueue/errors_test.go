package sqsqueue

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

// answer builds the error the SQS client returns for an HTTP answer with
// status and error code (none when code is "").
func answer(status int, code string) error {
	var api error = errors.New("http error")
	if code != "" {
		api = &smithy.GenericAPIError{Code: code, Message: code + " message"}
	}
	return &smithy.OperationError{
		ServiceID:     "SQS",
		OperationName: "DeleteMessage",
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
		name    string
		err     error
		receipt bool
		want    error
	}{
		{"ReceiptHandleIsInvalid", answer(400, "ReceiptHandleIsInvalid"), true, farm.ErrNotFound},
		{"MessageNotInflight, prefixed", answer(400, "AWS.SimpleQueueService.MessageNotInflight"), true, farm.ErrNotFound},
		{"InvalidParameterValue of a receipt", answer(400, "InvalidParameterValue"), true, farm.ErrNotFound},
		{"InvalidParameterValue", answer(400, "InvalidParameterValue"), false, farm.ErrInvalid},
		{"NonExistentQueue, prefixed", answer(400, "AWS.SimpleQueueService.NonExistentQueue"), false, farm.ErrNotFound},
		{"InvalidMessageContents", answer(400, "InvalidMessageContents"), false, farm.ErrInvalid},
		{"KmsThrottled", answer(400, "KmsThrottled"), false, farm.ErrTransient},
		{"OverLimit", answer(403, "OverLimit"), false, farm.ErrTransient},
		{"RequestThrottled", answer(403, "RequestThrottled"), false, farm.ErrTransient},
		{"RequestThrottled, prefixed", answer(403, "AWS.SimpleQueueService.RequestThrottled"), false, farm.ErrTransient},
		{"bare 500", answer(500, ""), false, farm.ErrTransient},
		{"429", answer(429, ""), false, farm.ErrTransient},
		{"retries exhausted", &retry.MaxAttemptsError{Attempt: 3, Err: answer(403, "RequestThrottled")}, false, farm.ErrTransient},
		{"connection refused", &smithyhttp.RequestSendError{Err: syscall.ECONNREFUSED}, false, farm.ErrTransient},
		{"AccessDenied", answer(403, "AccessDenied"), false, none},
		{"canceled", fmt.Errorf("op: %w", context.Canceled), false, context.Canceled},
		{"deadline", fmt.Errorf("op: %w", context.DeadlineExceeded), false, context.DeadlineExceeded},
	}
	kinds := []error{farm.ErrTransient, farm.ErrInvalid, farm.ErrNotFound, context.Canceled, context.DeadlineExceeded}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := translate("delete", tt.err, tt.receipt)
			for _, k := range kinds {
				if is := errors.Is(got, k); is != (k == tt.want) {
					t.Errorf("errors.Is(%v, %v) = %v", got, k, is)
				}
			}
		})
	}
}

package sqsqueue

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws/retry"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/compilefarm/compilefarm/pkg/awserr/awserrtest"
	"github.com/compilefarm/compilefarm/pkg/farm"
)

func TestTranslate(t *testing.T) {
	var none error // no domain kind
	tests := []struct {
		name    string
		err     error
		receipt bool
		want    error
	}{
		{"ReceiptHandleIsInvalid", awserrtest.Answer(400, awserrtest.Code("ReceiptHandleIsInvalid")), true, farm.ErrNotFound},
		{"MessageNotInflight, prefixed", awserrtest.Answer(400, awserrtest.Code("AWS.SimpleQueueService.MessageNotInflight")), true, farm.ErrNotFound},
		{"InvalidParameterValue of a receipt", awserrtest.Answer(400, awserrtest.Code("InvalidParameterValue")), true, farm.ErrNotFound},
		{"InvalidParameterValue", awserrtest.Answer(400, awserrtest.Code("InvalidParameterValue")), false, farm.ErrInvalid},
		{"NonExistentQueue, prefixed", awserrtest.Answer(400, awserrtest.Code("AWS.SimpleQueueService.NonExistentQueue")), false, farm.ErrNotFound},
		{"InvalidMessageContents", awserrtest.Answer(400, awserrtest.Code("InvalidMessageContents")), false, farm.ErrInvalid},
		{"KmsThrottled", awserrtest.Answer(400, awserrtest.Code("KmsThrottled")), false, farm.ErrTransient},
		{"OverLimit", awserrtest.Answer(403, awserrtest.Code("OverLimit")), false, farm.ErrTransient},
		{"RequestThrottled", awserrtest.Answer(403, awserrtest.Code("RequestThrottled")), false, farm.ErrTransient},
		{"RequestThrottled, prefixed", awserrtest.Answer(403, awserrtest.Code("AWS.SimpleQueueService.RequestThrottled")), false, farm.ErrTransient},
		{"bare 500", awserrtest.Answer(500, nil), false, farm.ErrTransient},
		{"429", awserrtest.Answer(429, nil), false, farm.ErrTransient},
		{"retries exhausted", &retry.MaxAttemptsError{Attempt: 3, Err: awserrtest.Answer(403, awserrtest.Code("RequestThrottled"))}, false, farm.ErrTransient},
		{"connection refused", &smithyhttp.RequestSendError{Err: syscall.ECONNREFUSED}, false, farm.ErrTransient},
		{"AccessDenied", awserrtest.Answer(403, awserrtest.Code("AccessDenied")), false, none},
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

package sqsqueue

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/aws/smithy-go"

	"github.com/compilefarm/compilefarm/pkg/awserr"
	"github.com/compilefarm/compilefarm/pkg/farm"
)

// translate turns an SDK error into one of the farm's error kinds, keeping
// the SDK's message as text only (no SDK type can be unwrapped from it).
// receipt says the call addressed a receipt handle: SQS answers a stale or
// unknown one with ReceiptHandleIsInvalid, MessageNotInflight or
// InvalidParameterValue, all farm.ErrNotFound.
func translate(op string, err error, receipt bool) error {
	if err == nil {
		return nil
	}
	switch {
	case errors.Is(err, context.Canceled):
		return fmt.Errorf("sqsqueue: %s: %v: %w", op, err, context.Canceled)
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("sqsqueue: %s: %v: %w", op, err, context.DeadlineExceeded)
	}
	if kind := classify(err, receipt); kind != nil {
		return fmt.Errorf("sqsqueue: %s: %v: %w", op, err, kind)
	}
	return fmt.Errorf("sqsqueue: %s: %v", op, err)
}

func classify(err error, receipt bool) error {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		code := apiCode(ae)
		switch code {
		case "ReceiptHandleIsInvalid", "MessageNotInflight":
			return farm.ErrNotFound
		case "InvalidParameterValue":
			if receipt {
				return farm.ErrNotFound
			}
			return farm.ErrInvalid
		case "QueueDoesNotExist", "NonExistentQueue", "ResourceNotFoundException":
			return farm.ErrNotFound
		case "InvalidMessageContents", "MissingParameter", "InvalidAttributeValue", "InvalidAttributeName", "InvalidIdFormat", "InvalidAddress":
			return farm.ErrInvalid
		case "KmsThrottled", "OverLimit":
			// SQS's own "try again later"; awserr has the codes common to
			// AWS services.
			return farm.ErrTransient
		}
		if awserr.TransientCode(code) {
			return farm.ErrTransient // one with the AWS.SimpleQueueService. prefix
		}
	}
	if awserr.Transient(err) {
		return farm.ErrTransient
	}
	return nil
}

// apiCode returns an SQS error code without the "AWS.SimpleQueueService."
// prefix the query-compatible protocol puts on some codes
// (AWS.SimpleQueueService.NonExistentQueue, ...MessageNotInflight).
func apiCode(ae smithy.APIError) string {
	return strings.TrimPrefix(ae.ErrorCode(), "AWS.SimpleQueueService.")
}

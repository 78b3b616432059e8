package dynamostate

import (
	"context"
	"errors"
	"fmt"
	"net"

	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/compilefarm/compilefarm/pkg/farm"
)

// translate turns an error of the DynamoDB client into the farm's kinds.
// The SDK error is kept as text only, so no SDK type leaks upward.
func translate(err error, table string) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	var api smithy.APIError
	if errors.As(err, &api) {
		switch api.ErrorCode() {
		case "ConditionalCheckFailedException", "TransactionConflictException":
			return errLost
		case "ResourceNotFoundException":
			return fmt.Errorf("dynamodb table %q does not exist or is not active (the infra stack creates it; EnsureTables in development): %s", table, api.ErrorMessage())
		case "ProvisionedThroughputExceededException", "RequestLimitExceeded", "ThrottlingException",
			"Throttling", "LimitExceededException", "InternalServerError", "InternalFailure",
			"ServiceUnavailable", "ServiceUnavailableException", "TransactionInProgressException":
			return fmt.Errorf("dynamodb: %s: %w", msg, farm.ErrTransient)
		case "ValidationException", "ItemCollectionSizeLimitExceededException", "SerializationException":
			return fmt.Errorf("dynamodb refused the request: %s: %w", msg, farm.ErrInvalid)
		}
	}
	for _, c := range []error{context.Canceled, context.DeadlineExceeded} {
		if errors.Is(err, c) {
			return fmt.Errorf("dynamodb: %s: %w", msg, c)
		}
	}
	var status interface{ HTTPStatusCode() int }
	if errors.As(err, &status) && status.HTTPStatusCode() >= 500 {
		return fmt.Errorf("dynamodb: %s: %w", msg, farm.ErrTransient)
	}
	var (
		maxAttempts *retry.MaxAttemptsError
		send        *smithyhttp.RequestSendError
		netErr      net.Error
	)
	if errors.As(err, &maxAttempts) || errors.As(err, &send) || errors.As(err, &netErr) {
		return fmt.Errorf("dynamodb: %s: %w", msg, farm.ErrTransient)
	}
	return fmt.Errorf("dynamodb: %s", msg)
}

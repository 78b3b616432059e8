package dynamostate

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/smithy-go"

	"github.com/compilefarm/compilefarm/pkg/awserr"
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
		case "ProvisionedThroughputExceededException", "LimitExceededException", "TransactionInProgressException":
			// DynamoDB's own "try again later"; awserr.Transient has the
			// codes common to AWS services.
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
	if awserr.Transient(err) {
		return fmt.Errorf("dynamodb: %s: %w", msg, farm.ErrTransient)
	}
	return fmt.Errorf("dynamodb: %s", msg)
}

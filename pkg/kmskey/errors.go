package kmskey

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/smithy-go"

	"github.com/compilefarm/compilefarm/pkg/awserr"
	"github.com/compilefarm/compilefarm/pkg/farm"
)

// kinds are the domain kinds of KMS's own error codes; awserr.Transient
// has the codes common to AWS services (ThrottlingException among them),
// 5xx and 429 answers and transport failures.
var kinds = map[string]error{
	"NotFoundException":      farm.ErrNotFound,
	"AlreadyExistsException": farm.ErrConflict,
	// The key cannot do what was asked: its state, its usage or spec, or the
	// request itself.
	"DisabledException":             farm.ErrInvalid,
	"KMSInvalidStateException":      farm.ErrInvalid,
	"InvalidKeyUsageException":      farm.ErrInvalid,
	"UnsupportedOperationException": farm.ErrInvalid,
	"ValidationException":           farm.ErrInvalid,
	"InvalidArnException":           farm.ErrInvalid,
	// KMS says retrying may succeed.
	"KMSInternalException":       farm.ErrTransient,
	"DependencyTimeoutException": farm.ErrTransient,
	"KeyUnavailableException":    farm.ErrTransient,
}

// translate turns an error of the KMS client into one that carries the
// domain's kind (farm.ErrNotFound, ErrConflict, ErrInvalid, ErrTransient)
// and KMS's message, but no SDK type. what says what was being done
// ("load CA key from KMS key alias/x").
func translate(what string, err error) error {
	switch {
	case errors.Is(err, context.Canceled):
		return fmt.Errorf("%s: %w", what, context.Canceled)
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%s: %w: %w", what, farm.ErrTransient, context.DeadlineExceeded)
	}
	msg := err.Error()
	var api smithy.APIError
	code := ""
	if errors.As(err, &api) {
		code = api.ErrorCode()
		msg = code + ": " + api.ErrorMessage()
	}
	switch {
	case kinds[code] != nil:
		return fmt.Errorf("%s: %s: %w", what, msg, kinds[code])
	case code == "AccessDeniedException":
		return fmt.Errorf("%s: %s (the fleet's role needs kms:DescribeKey, kms:GetPublicKey and kms:Sign on the key; broker ca init also kms:CreateKey, kms:TagResource, kms:CreateAlias and kms:ScheduleKeyDeletion)", what, msg)
	case awserr.Transient(err):
		return fmt.Errorf("%s: %s: %w", what, msg, farm.ErrTransient)
	}
	return fmt.Errorf("%s: %s", what, msg)
}

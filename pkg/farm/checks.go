package farm

import (
	"context"
	"fmt"
	"time"
)

// The checks the methods of the contracts in contracts.go make before they
// reach their backend, one function per method, so that every driver
// refuses the same calls in the same words: an error wrapping ctx's once it
// is done, ErrInvalid for arguments the contract refuses. A driver calls
// the method's check first and returns its error as is; checks of its own
// backend's limits (an item's size) stay in the driver. A check is named
// after its method, with the contract's name in front where the method's
// name alone does not say what it acts on (CheckQueueReceive).

// CheckEnqueue checks a Queue.Enqueue of job (Job.Validate).
func CheckEnqueue(ctx context.Context, job Job) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("enqueue job of %s: %w", job.Certname, err)
	}
	if err := job.Validate(); err != nil {
		return fmt.Errorf("enqueue job: %w", err)
	}
	return nil
}

// CheckQueueReceive checks a Queue.Receive: only its ctx. A Receive that
// waits checks again each time it wakes.
func CheckQueueReceive(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("receive job: %w", err)
	}
	return nil
}

// CheckAck checks a Queue.Ack of d: a delivery as Receive returns it, with
// an ID and one of the two lanes. Whether d is still in flight is the
// driver's to tell.
func CheckAck(ctx context.Context, d Delivery) error {
	return checkDelivery(ctx, "ack", d)
}

// CheckRetry checks a Queue.Retry of d (as CheckAck); any delay is
// accepted, one below zero meaning at once.
func CheckRetry(ctx context.Context, d Delivery, after time.Duration) error {
	return checkDelivery(ctx, "retry", d)
}

func checkDelivery(ctx context.Context, op string, d Delivery) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%s job of %s: %w", op, d.Certname, err)
	}
	if d.ID == "" {
		return fmt.Errorf("%s job of %s: the delivery has no ID: %w", op, d.Certname, ErrInvalid)
	}
	if d.Lane != LaneUrgent && d.Lane != LaneBulk {
		return fmt.Errorf("%s job of %s: the delivery's lane %q is not %q or %q: %w", op, d.Certname, d.Lane, LaneUrgent, LaneBulk, ErrInvalid)
	}
	return nil
}

// CheckQueueStats checks a Queue.Stats: only its ctx.
func CheckQueueStats(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("queue stats: %w", err)
	}
	return nil
}

// CheckContentPut checks a ContentStore.Put in space (Space.Validate).
func CheckContentPut(ctx context.Context, space Space) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("put content in %s: %w", space, err)
	}
	if err := space.Validate(); err != nil {
		return fmt.Errorf("put content: %w", err)
	}
	return nil
}

// CheckContentGet checks a ContentStore.Get of d in space
// (ValidateAddress).
func CheckContentGet(ctx context.Context, space Space, d Digest) error {
	return checkAddress(ctx, "get", space, d)
}

// CheckContentHas checks a ContentStore.Has of d in space
// (ValidateAddress).
func CheckContentHas(ctx context.Context, space Space, d Digest) error {
	return checkAddress(ctx, "has", space, d)
}

func checkAddress(ctx context.Context, op string, space Space, d Digest) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%s content %s/%s: %w", op, space, d, err)
	}
	if err := ValidateAddress(space, d); err != nil {
		return fmt.Errorf("%s content: %w", op, err)
	}
	return nil
}

// CheckPutName checks a NameStore.PutName of name in space, pointing at d
// (ValidateAddress, ValidateName).
func CheckPutName(ctx context.Context, space Space, name string, d Digest) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("put name %s/%s: %w", space, name, err)
	}
	if err := ValidateAddress(space, d); err != nil {
		return fmt.Errorf("put name: %w", err)
	}
	if err := ValidateName(name); err != nil {
		return fmt.Errorf("put name: %w", err)
	}
	return nil
}

// CheckGetName checks a NameStore.GetName of name in space
// (ValidateNameAddress).
func CheckGetName(ctx context.Context, space Space, name string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("get name %s/%s: %w", space, name, err)
	}
	if err := ValidateNameAddress(space, name); err != nil {
		return fmt.Errorf("get name: %w", err)
	}
	return nil
}

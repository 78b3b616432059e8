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

// CheckGetNode checks a NodeStore.GetNode of certname (ValidateCertname).
func CheckGetNode(ctx context.Context, certname string) error {
	return checkCertname(ctx, "get node", certname)
}

// CheckQueryNodes checks a NodeStore.QueryNodes of q (NodeQuery.Validate).
func CheckQueryNodes(ctx context.Context, q NodeQuery) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("query nodes: %w", err)
	}
	if err := q.Validate(); err != nil {
		return fmt.Errorf("query nodes: %w", err)
	}
	return nil
}

// CheckUpdateNode checks a NodeStore.UpdateNode of certname
// (ValidateCertname), before fn runs.
func CheckUpdateNode(ctx context.Context, certname string) error {
	return checkCertname(ctx, "update node", certname)
}

// CheckUpdatedNode checks what UpdateNode's fn left in n, the record of
// certname: fn may not rename it (ErrInvalid). The driver calls it after
// fn and writes nothing when it fails.
func CheckUpdatedNode(certname string, n *Node) error {
	if n.Certname != certname {
		return fmt.Errorf("update node %s: fn renamed it to %q: %w", certname, n.Certname, ErrInvalid)
	}
	return nil
}

// CheckRecordReport checks a NodeStore.RecordReport of sum for certname
// (ValidateCertname, ReportSummary.Validate).
func CheckRecordReport(ctx context.Context, certname string, sum ReportSummary) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("record report of %s: %w", certname, err)
	}
	if err := ValidateCertname(certname); err != nil {
		return fmt.Errorf("record report: %w", err)
	}
	if err := sum.Validate(); err != nil {
		return fmt.Errorf("record report of %s: %w", certname, err)
	}
	return nil
}

func checkCertname(ctx context.Context, op, certname string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%s %s: %w", op, certname, err)
	}
	if err := ValidateCertname(certname); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	return nil
}

// CheckGetEnvironment checks an EnvironmentStore.GetEnvironment of name
// (ValidateEnvironment).
func CheckGetEnvironment(ctx context.Context, name string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("get environment %s: %w", name, err)
	}
	if err := ValidateEnvironment(name); err != nil {
		return fmt.Errorf("get environment: %w", err)
	}
	return nil
}

// CheckListEnvironments checks an EnvironmentStore.ListEnvironments: only
// its ctx.
func CheckListEnvironments(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("list environments: %w", err)
	}
	return nil
}

// CheckPutEnvironment checks an EnvironmentStore.PutEnvironment of env
// (ValidateEnvironment of its name).
func CheckPutEnvironment(ctx context.Context, env *Environment) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("put environment %s: %w", env.Name, err)
	}
	if err := ValidateEnvironment(env.Name); err != nil {
		return fmt.Errorf("put environment: %w", err)
	}
	return nil
}

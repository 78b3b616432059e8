// Package backoff is the wait between two attempts of something retried
// (a conditional write that lost, a poll, a restart): Sleep, time.Sleep
// that ends early when the context does.
package backoff

import (
	"context"
	"time"
)

// Sleep waits for d, or until ctx ends: nil after d, ctx.Err() when ctx
// ends first.
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

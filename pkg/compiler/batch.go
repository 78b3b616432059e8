package compiler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/compilefarm/compilefarm/pkg/farm"
)

// BatchItem is one message of a batch of compile jobs delivered by a queue
// that finishes deliveries itself (an SQS event source mapping deletes the
// messages a Lambda invocation does not report as failed).
type BatchItem struct {
	ID           string // the message id, reported back when it must be delivered again
	Body         []byte // the job, as JSON (farm.Job)
	ReceiveCount int    // deliveries so far, this one included
}

// HandleBatch compiles a batch of jobs and returns the IDs of the items to
// deliver again: those whose compile failed for engine reasons (crash,
// timeout, storage). Compile errors in the code are recorded on the node and
// not retried; malformed jobs are dropped with an error in the log (they
// can never succeed). Redelivery of a job that already succeeded is
// harmless: the node's sequence check skips it. With maxReceives set, a job
// failing on its last delivery also records the error on the node before
// the queue dead-letters it.
func (p *Pool) HandleBatch(ctx context.Context, items []BatchItem, maxReceives int) []string {
	var failed []string
	for i, it := range items {
		if ctx.Err() != nil {
			// Out of time: every item not attempted comes back.
			for _, rest := range items[i:] {
				failed = append(failed, rest.ID)
			}
			break
		}
		var job farm.Job
		if err := json.Unmarshal(it.Body, &job); err != nil || farm.ValidateCertname(job.Certname) != nil {
			p.log().Error("dropping malformed compile job", "message", it.ID, "err", err, "body", truncate(it.Body, 300))
			continue
		}
		d := farm.Delivery{Job: job, ID: it.ID, Attempts: it.ReceiveCount}
		log := p.log().With("node", d.Certname, "seq", d.Seq, "code_id", d.CodeID, "attempt", d.Attempts, "message", it.ID)
		err := p.compile(ctx, d, log)
		var cerr *CompileError
		switch {
		case err == nil, errors.Is(err, errSuperseded):
		case errors.As(err, &cerr), errors.Is(err, farm.ErrInvalid), errors.Is(err, farm.ErrNotFound):
			log.Warn("compile failed", "err", err)
			p.recordFailure(context.WithoutCancel(ctx), d, err, log)
		default:
			if maxReceives > 0 && d.Attempts >= maxReceives {
				log.Error("compile failed on its last delivery; the queue dead-letters it", "err", err)
				p.recordFailure(context.WithoutCancel(ctx), d, fmt.Errorf("gave up after %d deliveries (dead-lettered): %w", d.Attempts, err), log)
			} else {
				log.Warn("compile will be delivered again", "err", err)
			}
			failed = append(failed, it.ID)
		}
	}
	return failed
}

func truncate(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n]) + "..."
	}
	return string(b)
}

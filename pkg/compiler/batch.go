package compiler

import (
	"context"
	"encoding/json"
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
// deliver again: every job that did not end in a stored (or superseded)
// catalog. The queue's redrive policy moves a job that keeps failing to its
// dead-letter queue, where operators find poison jobs (malformed messages,
// code that does not compile). A compile error is recorded on the node at
// once, so the node and its agent show it from the first attempt; an engine
// failure is recorded on the last delivery. Redelivery of a job that
// already succeeded is harmless: the node's sequence check skips it.
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
			p.log().Error("malformed compile job: left for the dead-letter queue", "message", it.ID, "err", err, "body", Excerpt(it.Body, 300))
			failed = append(failed, it.ID)
			continue
		}
		d := farm.Delivery{Job: job, ID: it.ID, Attempts: it.ReceiveCount}
		log := p.log().With("node", d.Certname, "seq", d.Seq, "code_id", d.CodeID, "attempt", d.Attempts, "message", it.ID)
		err := p.compile(ctx, d, log)
		switch {
		case finished(err):
		case permanent(err):
			log.Warn("compile failed; the job goes to the dead-letter queue after its last delivery", "err", err)
			p.recordFailure(context.WithoutCancel(ctx), d, err, log)
			failed = append(failed, it.ID)
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

// Excerpt returns at most the first n bytes of b, for a log line or an
// error that quotes what a peer sent: "..." marks where it was cut.
func Excerpt(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n]) + "..."
	}
	return string(b)
}

package puppetdb

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/compilefarm/compilefarm/internal/backoff"
	"github.com/compilefarm/compilefarm/pkg/farm"
	"github.com/compilefarm/compilefarm/pkg/metrics"
)

// Command is one PuppetDB command, ready to submit.
type Command struct {
	Name     string // "replace facts", "replace catalog", "store report"
	Version  int
	Certname string
	At       time.Time // producer_timestamp
	Payload  []byte
}

// Submitter sends commands to PuppetDB (a Client).
type Submitter interface {
	Submit(ctx context.Context, command string, version int, certname string, at time.Time, payload []byte) error
}

// Builder makes a message's command from what it points at (a Commands).
// An error wrapping farm.ErrInvalid or farm.ErrNotFound means it never
// can (the message is set aside); any other, that it cannot now.
type Builder interface {
	Build(ctx context.Context, m Message) (Command, error)
}

// Drainer delivers the outbox's commands to PuppetDB: several nodes at
// once, each node's in order. A command PuppetDB cannot take now (it is
// unreachable, answers 5xx or is busy) is tried again with a growing wait
// (1 s doubling to MaxBackoff), its node's later commands waiting behind
// it, and the drainer slows down with it rather than hammer a PuppetDB
// that is down: nothing is lost, however long PuppetDB is away. A command
// PuppetDB refuses (4xx: malformed, too large) or that cannot be made is
// logged with its node and set aside in the outbox's dead letters; the
// node's next commands go on.
type Drainer struct {
	Outbox   farm.Outbox
	Client   Submitter
	Commands Builder
	Log      *slog.Logger
	Metrics  *metrics.PuppetDB
	// Workers bounds the nodes delivered to at once (default 8); Batch the
	// messages one Receive asks for (default 10, SQS's most); Wait how
	// long a Receive waits for one (default 20 s, SQS's longest poll).
	Workers, Batch int
	Wait           time.Duration
	// MaxBackoff bounds the wait before a command is tried again
	// (default 5 minutes).
	MaxBackoff time.Duration
	// Delivered, when set, is told of each delivered command (the query
	// refresher schedules a refresh soon after changes).
	Delivered func(Message)
	Now       func() time.Time
}

func (d *Drainer) log() *slog.Logger {
	if d.Log != nil {
		return d.Log
	}
	return slog.Default()
}

func (d *Drainer) now() time.Time {
	if d.Now != nil {
		return d.Now()
	}
	return time.Now()
}

func orDefault[T int | time.Duration](v, def T) T {
	if v <= 0 {
		return def
	}
	return v
}

// backoffFor is the wait before the attempt after attempts.
func (d *Drainer) backoffFor(attempts int) time.Duration {
	max := orDefault(d.MaxBackoff, 5*time.Minute)
	w := time.Second
	for i := 1; i < attempts && w < max; i++ {
		w *= 2
	}
	return min(w, max)
}

// Run delivers until ctx ends; it returns ctx's error.
func (d *Drainer) Run(ctx context.Context) error {
	for {
		pause, err := d.DrainOnce(ctx)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			d.log().Warn("PuppetDB: reading the outbox failed; trying again", "err", err, "wait", pause)
		}
		if pause > 0 {
			if backoff.Sleep(ctx, pause) != nil {
				return ctx.Err()
			}
		}
	}
}

// DrainOnce receives one batch and delivers it; it returns how long to
// wait before the next (PuppetDB could not take a command: its back-off).
func (d *Drainer) DrainOnce(ctx context.Context) (time.Duration, error) {
	got, err := d.Outbox.Receive(ctx, orDefault(d.Batch, 10), orDefault(d.Wait, 20*time.Second))
	if err != nil {
		return time.Second, err
	}
	// Each node's deliveries, in the order received (the outbox's order).
	var order []string
	groups := map[string][]farm.OutboxDelivery{}
	for _, g := range got {
		if _, ok := groups[g.Group]; !ok {
			order = append(order, g.Group)
		}
		groups[g.Group] = append(groups[g.Group], g)
	}
	var (
		mu    sync.Mutex
		pause time.Duration
		wg    sync.WaitGroup
		slots = make(chan struct{}, orDefault(d.Workers, 8))
	)
	for _, node := range order {
		wg.Add(1)
		slots <- struct{}{}
		go func(ds []farm.OutboxDelivery) {
			defer func() { <-slots; wg.Done() }()
			if w := d.deliverGroup(ctx, ds); w > 0 {
				mu.Lock()
				pause = max(pause, w)
				mu.Unlock()
			}
		}(groups[node])
	}
	wg.Wait()
	return pause, nil
}

// deliverGroup delivers one node's deliveries in order; when one cannot be
// delivered now, it and the rest go back to wait, and the wait is returned.
func (d *Drainer) deliverGroup(ctx context.Context, ds []farm.OutboxDelivery) time.Duration {
	for i, del := range ds {
		wait := d.deliver(ctx, del)
		if wait == 0 {
			continue
		}
		for _, rest := range ds[i:] {
			if err := d.Outbox.Retry(ctx, rest.ID, wait); err != nil && !errors.Is(err, farm.ErrNotFound) {
				// It comes back after the outbox's visibility timeout.
				d.log().Warn("PuppetDB: could not put a command back to wait", "node", rest.Group, "err", err)
			}
		}
		return wait
	}
	return 0
}

// deliver sends one command; 0 when it is finished (delivered or set
// aside), else how long to wait before trying again.
func (d *Drainer) deliver(ctx context.Context, del farm.OutboxDelivery) time.Duration {
	m, err := Decode(del.Body)
	if err != nil {
		d.deadLetter(ctx, del, "unknown", err)
		return 0
	}
	kind := string(m.Kind)
	cmd, err := d.Commands.Build(ctx, m)
	if errors.Is(err, ErrNothingToSend) {
		d.log().Info("PuppetDB: nothing to send", "node", m.Node, "command", kind, "why", err)
		if err := d.Outbox.Ack(ctx, del.ID); err != nil && !errors.Is(err, farm.ErrNotFound) {
			d.log().Warn("PuppetDB: command not removed from the outbox", "node", m.Node, "command", kind, "err", err)
		}
		return 0
	}
	if errors.Is(err, farm.ErrInvalid) || errors.Is(err, farm.ErrNotFound) {
		d.deadLetter(ctx, del, kind, err)
		return 0
	}
	if err == nil {
		err = d.Client.Submit(ctx, cmd.Name, cmd.Version, cmd.Certname, cmd.At, cmd.Payload)
	}
	switch {
	case err == nil:
		if err := d.Outbox.Ack(ctx, del.ID); err != nil && !errors.Is(err, farm.ErrNotFound) {
			// Delivered again later: PuppetDB takes a repeated command.
			d.log().Warn("PuppetDB: delivered command not removed from the outbox", "node", m.Node, "command", kind, "err", err)
		}
		d.Metrics.Delivered(kind, d.now().Sub(del.SentAt))
		if d.Delivered != nil {
			d.Delivered(m)
		}
		return 0
	case errors.Is(err, ErrRefused):
		d.deadLetter(ctx, del, kind, err)
		return 0
	case ctx.Err() != nil:
		return time.Millisecond // back to wait; the caller is stopping
	}
	wait := d.backoffFor(del.Attempts)
	d.Metrics.Command(kind, metrics.PuppetDBRetried)
	d.log().Warn("PuppetDB: command not delivered; trying again", "node", m.Node, "command", kind,
		"attempts", del.Attempts, "waiting", d.now().Sub(del.SentAt).Round(time.Second), "retry_in", wait, "err", err)
	return wait
}

func (d *Drainer) deadLetter(ctx context.Context, del farm.OutboxDelivery, kind string, cause error) {
	d.Metrics.Command(kind, metrics.PuppetDBRefused)
	d.log().Error("PuppetDB: command refused; set aside in the dead letters (fix the cause, then resend them)",
		"node", del.Group, "command", kind, "err", cause)
	if err := d.Outbox.DeadLetter(ctx, del.ID, cause.Error()); err != nil && !errors.Is(err, farm.ErrNotFound) {
		d.log().Error("PuppetDB: could not set a refused command aside; it will be tried again", "node", del.Group, "command", kind, "err", err)
	}
}

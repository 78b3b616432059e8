// Package outboxqueue is the scheduling core of the farm's in-process
// outboxes (farm.Outbox's embedded and in-memory drivers): messages in
// order per group, a group held back while one of its messages is in
// flight or its first waits out a Retry, visibility timeouts and dead
// letters. A driver wraps a Core and gives it a Backend that keeps the
// bodies and makes each change durable; the Core keeps the rest in memory.
package outboxqueue

import (
	"container/heap"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/compilefarm/compilefarm/pkg/farm"
)

// DefaultVisibilityTimeout is how long a delivery stays in flight before
// its message is received again, when a handle is asked for none.
const DefaultVisibilityTimeout = 2 * time.Minute

// ErrClosed is what a Core returns after Close when Options.Closed is nil.
var ErrClosed = errors.New("outbox closed")

// Stored is what a Backend keeps of one message besides its body.
type Stored struct {
	ID          uint64    `json:"id"` // the order of sending, across groups
	Group       string    `json:"group"`
	SentAt      time.Time `json:"sent_at"`
	Attempts    int       `json:"attempts"`     // deliveries so far
	AvailableAt time.Time `json:"available_at"` // not received before (a Retry's delay)
}

// Backend keeps the bodies and makes the Core's changes durable. Each call
// makes its whole change or none (and then returns an error); the Core
// calls one at a time, under its lock, and applies the change in memory
// only once the call succeeded.
type Backend interface {
	// Add stores new messages with their bodies (Send).
	Add(msgs []Stored, bodies [][]byte) error
	// Deliver stores the new Attempts of msgs and returns their bodies,
	// copies the caller may change (Receive).
	Deliver(msgs []Stored) ([][]byte, error)
	// Update stores msg's new AvailableAt (Retry).
	Update(msg Stored) error
	// Remove deletes a delivered message (Ack).
	Remove(id uint64) error
	// DeadLetter moves msg to the dead letters, with reason (as
	// farm.OutboxReason keeps it), set aside at at.
	DeadLetter(msg Stored, reason string, at time.Time) error
}

// Options configures a Core.
type Options struct {
	// Logger receives timed-out deliveries; discarded when nil.
	Logger *slog.Logger
	// Closed is the error calls return after Close (the driver's own,
	// wrapped); ErrClosed when nil.
	Closed error
}

// message is one unfinished message in memory.
type message struct {
	Stored
	receipt  string    // the delivery's ID while in flight
	deadline time.Time // its visibility deadline
	index    int       // in Core.flying while in flight, else -1
}

// group is one group's unfinished messages. It sits in the ready heap when
// none of its messages is in flight and its first is available, in the
// delayed heap when none is in flight and its first waits out a Retry, in
// neither while one is in flight.
type group struct {
	name     string
	msgs     []*message // in ID order
	inflight int
	heap     *groupHeap
	index    int
}

func (g *group) head() *message { return g.msgs[0] }

type groupHeap struct {
	items []*group
	less  func(a, b *group) bool
}

func (h *groupHeap) Len() int           { return len(h.items) }
func (h *groupHeap) Less(i, j int) bool { return h.less(h.items[i], h.items[j]) }
func (h *groupHeap) Swap(i, j int) {
	h.items[i], h.items[j] = h.items[j], h.items[i]
	h.items[i].index, h.items[j].index = i, j
}
func (h *groupHeap) Push(x any) {
	g := x.(*group)
	g.heap, g.index = h, len(h.items)
	h.items = append(h.items, g)
}
func (h *groupHeap) Pop() any {
	n := len(h.items) - 1
	g := h.items[n]
	h.items[n] = nil
	h.items = h.items[:n]
	g.heap, g.index = nil, -1
	return g
}
func (h *groupHeap) peek() *group { return h.items[0] }

// byHead serves the group whose first message was sent first.
func byHead(a, b *group) bool { return a.head().ID < b.head().ID }

// byAvailable wakes the group whose first message's delay ends first.
func byAvailable(a, b *group) bool {
	x, y := a.head(), b.head()
	if !x.AvailableAt.Equal(y.AvailableAt) {
		return x.AvailableAt.Before(y.AvailableAt)
	}
	return x.ID < y.ID
}

// flyingHeap holds the messages in flight, by visibility deadline.
type flyingHeap []*message

func (h flyingHeap) Len() int           { return len(h) }
func (h flyingHeap) Less(i, j int) bool { return h[i].deadline.Before(h[j].deadline) }
func (h flyingHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *flyingHeap) Push(x any) {
	m := x.(*message)
	m.index = len(*h)
	*h = append(*h, m)
}
func (h *flyingHeap) Pop() any {
	old := *h
	n := len(old) - 1
	m := old[n]
	old[n] = nil
	*h = old[:n]
	m.index = -1
	return m
}

// Core is an outbox's scheduler. Drivers hand out Outbox handles on it.
type Core struct {
	mu      sync.Mutex
	backend Backend
	log     *slog.Logger
	closedE error
	nonce   string // makes delivery IDs unique across restarts

	lastID     uint64
	deliveries uint64
	groups     map[string]*group
	receipts   map[string]*message // delivery ID → message in flight
	ready      *groupHeap
	delayed    *groupHeap
	flying     flyingHeap
	backlog    int
	dead       int
	changed    chan struct{} // closed and replaced on every change
	closed     bool
}

// New returns an empty Core on backend.
func New(backend Backend, opts Options) *Core {
	var nonce [6]byte
	_, _ = rand.Read(nonce[:])
	c := &Core{
		backend:  backend,
		log:      opts.Logger,
		closedE:  opts.Closed,
		nonce:    hex.EncodeToString(nonce[:]),
		groups:   map[string]*group{},
		receipts: map[string]*message{},
		ready:    &groupHeap{less: byHead},
		delayed:  &groupHeap{less: byAvailable},
		changed:  make(chan struct{}),
	}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	if c.closedE == nil {
		c.closedE = ErrClosed
	}
	return c
}

// Load adds the messages and the count of dead letters read back from the
// backend at start: none of them in flight (a delivery in flight when the
// process stopped is received again at once), each waiting out its
// AvailableAt.
func (c *Core) Load(msgs []Stored, deadLetters int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	msgs = slices.Clone(msgs)
	slices.SortFunc(msgs, func(a, b Stored) int {
		switch {
		case a.ID < b.ID:
			return -1
		case a.ID > b.ID:
			return 1
		}
		return 0
	})
	now := time.Now()
	for _, s := range msgs {
		c.add(s)
		c.lastID = max(c.lastID, s.ID)
	}
	for _, g := range c.groups {
		c.place(g, now)
	}
	c.dead += deadLetters
}

// add appends s to its group (made if needed), unplaced.
func (c *Core) add(s Stored) *group {
	g := c.groups[s.Group]
	if g == nil {
		g = &group{name: s.Group, index: -1}
		c.groups[s.Group] = g
	}
	g.msgs = append(g.msgs, &message{Stored: s, index: -1})
	c.backlog++
	return g
}

// Close makes every call, and every waiting Receive, return the closed
// error.
func (c *Core) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.closed {
		c.closed = true
		c.broadcast()
	}
}

func (c *Core) broadcast() {
	close(c.changed)
	c.changed = make(chan struct{})
}

// place puts g where its state says (see group); a group with no message
// left is forgotten.
func (c *Core) place(g *group, now time.Time) {
	if g.heap != nil {
		heap.Remove(g.heap, g.index)
	}
	switch {
	case len(g.msgs) == 0:
		delete(c.groups, g.name)
	case g.inflight > 0:
	case g.head().AvailableAt.After(now):
		heap.Push(c.delayed, g)
	default:
		heap.Push(c.ready, g)
	}
}

// tick makes groups whose delay ended ready and hands timed-out deliveries
// back to their groups (their Attempts were stored when they were
// received, so nothing is written).
func (c *Core) tick(now time.Time) {
	for c.delayed.Len() > 0 && !c.delayed.peek().head().AvailableAt.After(now) {
		c.place(c.delayed.peek(), now)
	}
	for c.flying.Len() > 0 && !c.flying[0].deadline.After(now) {
		m := c.flying[0]
		c.log.Warn("outbox: delivery timed out, message waiting again", "group", m.Group, "attempts", m.Attempts)
		c.land(m)
		c.place(c.groups[m.Group], now)
	}
}

// land ends m's delivery in memory.
func (c *Core) land(m *message) {
	if m.index >= 0 {
		heap.Remove(&c.flying, m.index)
	}
	delete(c.receipts, m.receipt)
	m.receipt, m.deadline = "", time.Time{}
	c.groups[m.Group].inflight--
}

// drop removes finished m from its group.
func (c *Core) drop(m *message) {
	g := c.groups[m.Group]
	g.msgs = slices.DeleteFunc(g.msgs, func(x *message) bool { return x == m })
	c.backlog--
}

// nextEvent is when a delayed group becomes ready or a delivery times out.
func (c *Core) nextEvent() time.Time {
	var t time.Time
	if c.delayed.Len() > 0 {
		t = c.delayed.peek().head().AvailableAt
	}
	if c.flying.Len() > 0 {
		if d := c.flying[0].deadline; t.IsZero() || d.Before(t) {
			t = d
		}
	}
	return t
}

func (c *Core) closedErr(op string) error {
	return fmt.Errorf("%s: %w", op, c.closedE)
}

// Send stores msgs, all or none, each in its group after those sent
// before.
func (c *Core) Send(ctx context.Context, msgs []farm.OutboxMessage) error {
	if err := farm.CheckOutboxSend(ctx, msgs); err != nil {
		return err
	}
	if len(msgs) == 0 {
		return nil
	}
	op := fmt.Sprintf("send %d outbox messages", len(msgs))
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return c.closedErr(op)
	}
	now := time.Now()
	recs := make([]Stored, len(msgs))
	bodies := make([][]byte, len(msgs))
	for i, m := range msgs {
		recs[i] = Stored{ID: c.lastID + uint64(i) + 1, Group: m.Group, SentAt: now.UTC(), AvailableAt: now.UTC()}
		bodies[i] = m.Body
	}
	if err := c.backend.Add(recs, bodies); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	c.lastID += uint64(len(recs))
	for _, s := range recs {
		g := c.add(s)
		if len(g.msgs) == 1 {
			c.place(g, now)
		}
	}
	c.broadcast()
	return nil
}

// Receive waits up to wait for ready groups and hands out up to max of
// their messages, each group's in order, oldest group first.
func (c *Core) Receive(ctx context.Context, max int, wait, visibility time.Duration) ([]farm.OutboxDelivery, error) {
	deadline := time.Now().Add(wait)
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		c.mu.Lock()
		if err := farm.CheckOutboxReceive(ctx, max); err != nil {
			c.mu.Unlock()
			return nil, err
		}
		if c.closed {
			c.mu.Unlock()
			return nil, c.closedErr("receive outbox messages")
		}
		now := time.Now()
		c.tick(now)
		if c.ready.Len() > 0 {
			ds, err := c.deliver(max, now, visibility)
			c.mu.Unlock()
			return ds, err
		}
		if !now.Before(deadline) {
			c.mu.Unlock()
			return nil, nil
		}
		wake, until := c.changed, c.nextEvent()
		c.mu.Unlock()

		if until.IsZero() || until.After(deadline) {
			until = deadline
		}
		d := until.Sub(now)
		if timer == nil {
			timer = time.NewTimer(d)
		} else {
			timer.Reset(d)
		}
		select {
		case <-ctx.Done():
		case <-wake:
		case <-timer.C:
		}
	}
}

// deliver hands out up to max messages of ready groups.
func (c *Core) deliver(max int, now time.Time, visibility time.Duration) ([]farm.OutboxDelivery, error) {
	var (
		picked []*message
		taken  []*group
	)
	for len(picked) < max && c.ready.Len() > 0 {
		g := heap.Pop(c.ready).(*group)
		taken = append(taken, g)
		for _, m := range g.msgs {
			if len(picked) == max || m.AvailableAt.After(now) {
				break
			}
			picked = append(picked, m)
		}
	}
	recs := make([]Stored, len(picked))
	for i, m := range picked {
		recs[i] = m.Stored
		recs[i].Attempts++
	}
	bodies, err := c.backend.Deliver(recs)
	if err != nil {
		for _, g := range taken {
			c.place(g, now)
		}
		return nil, fmt.Errorf("receive outbox messages: %w", err)
	}
	out := make([]farm.OutboxDelivery, len(picked))
	for i, m := range picked {
		m.Stored = recs[i]
		c.deliveries++
		m.receipt = fmt.Sprintf("%s-%d-%d", c.nonce, m.ID, c.deliveries)
		m.deadline = now.Add(visibility)
		heap.Push(&c.flying, m)
		c.receipts[m.receipt] = m
		c.groups[m.Group].inflight++
		out[i] = farm.OutboxDelivery{
			OutboxMessage: farm.OutboxMessage{Group: m.Group, Body: bodies[i]},
			ID:            m.receipt,
			SentAt:        m.SentAt,
			Attempts:      m.Attempts,
		}
	}
	return out, nil
}

// inFlight returns the message delivery id hands out, after handing back
// timed-out deliveries.
func (c *Core) inFlight(op, id string, now time.Time) (*message, error) {
	if c.closed {
		return nil, c.closedErr(op)
	}
	c.tick(now)
	m := c.receipts[id]
	if m == nil {
		return nil, fmt.Errorf("%s: it is not in flight (finished, timed out or unknown): %w", op, farm.ErrNotFound)
	}
	return m, nil
}

// Ack removes a delivered message for good.
func (c *Core) Ack(ctx context.Context, id string) error {
	if err := farm.CheckOutboxAck(ctx, id); err != nil {
		return err
	}
	return c.finish("ack outbox delivery "+id, id, func(m *message, _ time.Time) error {
		return c.backend.Remove(m.ID)
	}, true)
}

// Retry makes a delivered message its group's first again, received no
// sooner than after from now.
func (c *Core) Retry(ctx context.Context, id string, after time.Duration) error {
	if err := farm.CheckOutboxRetry(ctx, id, after); err != nil {
		return err
	}
	return c.finish("retry outbox delivery "+id, id, func(m *message, now time.Time) error {
		rec := m.Stored
		rec.AvailableAt = now.Add(max(after, 0)).UTC()
		if err := c.backend.Update(rec); err != nil {
			return err
		}
		m.Stored = rec
		return nil
	}, false)
}

// DeadLetter sets a delivered message aside with reason.
func (c *Core) DeadLetter(ctx context.Context, id, reason string) error {
	if err := farm.CheckOutboxDeadLetter(ctx, id, reason); err != nil {
		return err
	}
	return c.finish("dead-letter outbox delivery "+id, id, func(m *message, now time.Time) error {
		if err := c.backend.DeadLetter(m.Stored, farm.OutboxReason(reason), now.UTC()); err != nil {
			return err
		}
		c.dead++
		return nil
	}, true)
}

// finish ends the unfinished delivery id the way store says (the
// backend's change; on its error nothing changes), then lands it, drops
// the message when gone, and schedules its group again.
func (c *Core) finish(op, id string, store func(m *message, now time.Time) error, gone bool) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	m, err := c.inFlight(op, id, now)
	if err != nil {
		return err
	}
	if err := store(m, now); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	c.land(m)
	if gone {
		c.drop(m)
	}
	c.place(c.groups[m.Group], now)
	c.broadcast()
	return nil
}

// Stats counts the backlog and the dead letters; OldestAge is the age of
// the first message of the group sent to longest ago.
func (c *Core) Stats(ctx context.Context) (farm.OutboxStats, error) {
	if err := farm.CheckOutboxStats(ctx); err != nil {
		return farm.OutboxStats{}, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return farm.OutboxStats{}, c.closedErr("outbox stats")
	}
	now := time.Now()
	c.tick(now)
	st := farm.OutboxStats{Backlog: c.backlog, DeadLetters: c.dead}
	var oldest time.Time
	for _, g := range c.groups {
		if at := g.head().SentAt; oldest.IsZero() || at.Before(oldest) {
			oldest = at
		}
	}
	if !oldest.IsZero() {
		st.OldestAge = max(now.Sub(oldest), 0)
	}
	return st, nil
}

// Outbox is a farm.Outbox on a Core: the handle a driver returns. Handles
// on one Core share its messages; a delivery received through a handle
// stays in flight for that handle's visibility timeout. Safe for
// concurrent use.
type Outbox struct {
	c          *Core
	visibility time.Duration
}

var _ farm.Outbox = (*Outbox)(nil)

// Outbox returns a handle whose deliveries time out after visibility
// (DefaultVisibilityTimeout when not positive).
func (c *Core) Outbox(visibility time.Duration) *Outbox {
	if visibility <= 0 {
		visibility = DefaultVisibilityTimeout
	}
	return &Outbox{c: c, visibility: visibility}
}

// VisibilityTimeout returns how long a delivery received through o stays
// in flight.
func (o *Outbox) VisibilityTimeout() time.Duration { return o.visibility }

// Send stores msgs, all or none, in order.
func (o *Outbox) Send(ctx context.Context, msgs ...farm.OutboxMessage) error {
	return o.c.Send(ctx, msgs)
}

// Receive waits up to wait, without polling, for messages and returns up
// to max, each group's in order.
func (o *Outbox) Receive(ctx context.Context, max int, wait time.Duration) ([]farm.OutboxDelivery, error) {
	return o.c.Receive(ctx, max, wait, o.visibility)
}

// Ack finishes a delivery for good.
func (o *Outbox) Ack(ctx context.Context, id string) error { return o.c.Ack(ctx, id) }

// Retry finishes a delivery; its message is received again after the
// delay, before the rest of its group.
func (o *Outbox) Retry(ctx context.Context, id string, after time.Duration) error {
	return o.c.Retry(ctx, id, after)
}

// DeadLetter finishes a delivery by setting its message aside with reason.
func (o *Outbox) DeadLetter(ctx context.Context, id, reason string) error {
	return o.c.DeadLetter(ctx, id, reason)
}

// Stats counts the backlog and the dead letters.
func (o *Outbox) Stats(ctx context.Context) (farm.OutboxStats, error) { return o.c.Stats(ctx) }

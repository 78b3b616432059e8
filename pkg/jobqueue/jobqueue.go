// Package jobqueue is the scheduling core of the farm's in-process compile
// queues (the embedded and in-memory drivers): lanes served urgent first,
// newer jobs of a node collapsing into its waiting one, one job per node in
// flight, delayed retries and visibility timeouts. A driver wraps a Core and
// gives it a function that persists its changes.
package jobqueue

import (
	"container/heap"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/compilefarm/compilefarm/pkg/farm"
)

// ErrClosed is returned by a Core after Close.
var ErrClosed = errors.New("store closed")

// DefaultVisibilityTimeout is how long a delivery stays in flight before its
// job is handed out again when QueueOptions leave it unset.
const DefaultVisibilityTimeout = 10 * time.Minute

// lanes in the order Receive serves them.
var lanes = [...]farm.Lane{farm.LaneUrgent, farm.LaneBulk}

func laneRank(l farm.Lane) (int, bool) {
	for i, x := range lanes {
		if x == l {
			return i, true
		}
	}
	return 0, false
}

// Stored is what a driver keeps of one queued job.
type Stored struct {
	ID          uint64    `json:"id"`
	Job         farm.Job  `json:"job"`
	Attempts    int       `json:"attempts"`     // deliveries so far
	AvailableAt time.Time `json:"available_at"` // not handed out before
}

// merge folds job x into the waiting job w of the same node: the content
// (and so the attempt count and availability) of the higher Seq wins, ties
// going to x when xWinsTie; the lane is the more urgent and EnqueuedAt the
// older of the two. The result keeps w's ID.
func merge(w, x Stored, xWinsTie bool) Stored {
	out := w
	if x.Job.Seq > w.Job.Seq || (x.Job.Seq == w.Job.Seq && xWinsTie) {
		out = x
		out.ID = w.ID
	}
	wr, _ := laneRank(w.Job.Lane)
	xr, _ := laneRank(x.Job.Lane)
	if wr < xr {
		out.Job.Lane = w.Job.Lane
	} else {
		out.Job.Lane = x.Job.Lane
	}
	out.Job.EnqueuedAt = w.Job.EnqueuedAt
	if x.Job.EnqueuedAt.Before(out.Job.EnqueuedAt) {
		out.Job.EnqueuedAt = x.Job.EnqueuedAt
	}
	return out
}

// entry is one job in memory. It sits in at most one heap: a lane's ready
// heap, the delayed heap, or the in-flight heap; a waiting job whose node is
// in flight sits in none (it is only in core.waiting).
type entry struct {
	Stored
	receipt  string    // current delivery ID while in flight
	deadline time.Time // visibility deadline while in flight
	heap     *entryHeap
	index    int
}

type entryHeap struct {
	items []*entry
	less  func(a, b *entry) bool
}

func (h *entryHeap) Len() int           { return len(h.items) }
func (h *entryHeap) Less(i, j int) bool { return h.less(h.items[i], h.items[j]) }
func (h *entryHeap) Swap(i, j int) {
	h.items[i], h.items[j] = h.items[j], h.items[i]
	h.items[i].index, h.items[j].index = i, j
}
func (h *entryHeap) Push(x any) {
	e := x.(*entry)
	e.heap, e.index = h, len(h.items)
	h.items = append(h.items, e)
}
func (h *entryHeap) Pop() any {
	n := len(h.items) - 1
	e := h.items[n]
	h.items[n] = nil
	h.items = h.items[:n]
	e.heap, e.index = nil, -1
	return e
}
func (h *entryHeap) peek() *entry { return h.items[0] }

func byEnqueued(a, b *entry) bool {
	if !a.Job.EnqueuedAt.Equal(b.Job.EnqueuedAt) {
		return a.Job.EnqueuedAt.Before(b.Job.EnqueuedAt)
	}
	return a.ID < b.ID
}

func byAvailable(a, b *entry) bool {
	if !a.AvailableAt.Equal(b.AvailableAt) {
		return a.AvailableAt.Before(b.AvailableAt)
	}
	return a.ID < b.ID
}

func byDeadline(a, b *entry) bool {
	if !a.deadline.Equal(b.deadline) {
		return a.deadline.Before(b.deadline)
	}
	return a.ID < b.ID
}

// Core is the embedded queue's scheduler: at most one waiting job per node
// (newer jobs collapse into it), at most one job per node in flight, the
// urgent lane before the bulk lane, oldest EnqueuedAt first within a lane.
// persist, when set, makes each change durable before it is applied in
// memory; when it fails nothing changes. Drivers hand out Queue handles on
// it.
type Core struct {
	mu      sync.Mutex
	persist func(puts []Stored, dels []uint64) error
	log     *slog.Logger
	nonce   string // makes delivery IDs unique across restarts

	lastID     uint64
	deliveries uint64
	waiting    map[string]*entry // certname → its waiting job
	inflight   map[string]*entry // certname → its job in flight
	receipts   map[string]*entry // delivery ID → job in flight
	ready      [len(lanes)]*entryHeap
	delayed    *entryHeap
	flying     *entryHeap
	changed    chan struct{} // closed and replaced on every change
	closed     bool
}

// New returns an empty Core that logs to log and, when persist is not nil,
// makes every change durable through it before applying it.
func New(log *slog.Logger, persist func(puts []Stored, dels []uint64) error) *Core {
	var nonce [6]byte
	_, _ = rand.Read(nonce[:])
	c := &Core{
		persist:  persist,
		log:      log,
		nonce:    hex.EncodeToString(nonce[:]),
		waiting:  map[string]*entry{},
		inflight: map[string]*entry{},
		receipts: map[string]*entry{},
		delayed:  &entryHeap{less: byAvailable},
		flying:   &entryHeap{less: byDeadline},
		changed:  make(chan struct{}),
	}
	for i := range c.ready {
		c.ready[i] = &entryHeap{less: byEnqueued}
	}
	return c
}

// Load adds jobs read back from storage (none of them in flight), in ID
// order, collapsing jobs of one node. It returns the records to rewrite and
// delete so storage holds one job per node again.
func (c *Core) Load(jobs []Stored) (puts []Stored, dels []uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	rewrite := map[uint64]*entry{}
	for _, j := range jobs {
		c.lastID = max(c.lastID, j.ID)
		if w := c.waiting[j.Job.Key()]; w != nil {
			w.Stored = merge(w.Stored, j, true)
			rewrite[w.ID] = w
			dels = append(dels, j.ID)
			continue
		}
		c.waiting[j.Job.Key()] = &entry{Stored: j, index: -1}
	}
	for _, e := range rewrite {
		puts = append(puts, e.Stored)
	}
	for _, e := range c.waiting {
		c.place(e, now)
	}
	return puts, dels
}

func (c *Core) save(puts []Stored, dels []uint64) error {
	if c.persist == nil {
		return nil
	}
	return c.persist(puts, dels)
}

func (c *Core) broadcast() {
	close(c.changed)
	c.changed = make(chan struct{})
}

func (c *Core) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.closed {
		c.closed = true
		c.broadcast()
	}
}

// place puts a waiting job where it belongs: nowhere while its node is in
// flight, the delayed heap until it is available, else its lane's heap.
func (c *Core) place(e *entry, now time.Time) {
	if c.inflight[e.Job.Key()] != nil {
		return
	}
	if e.AvailableAt.After(now) {
		heap.Push(c.delayed, e)
		return
	}
	r, _ := laneRank(e.Job.Lane)
	heap.Push(c.ready[r], e)
}

func (c *Core) unplace(e *entry) {
	if e.heap != nil {
		heap.Remove(e.heap, e.index)
	}
}

// tick makes delayed jobs ready and hands timed-out deliveries back.
func (c *Core) tick(now time.Time) {
	for c.delayed.Len() > 0 && !c.delayed.peek().AvailableAt.After(now) {
		e := heap.Pop(c.delayed).(*entry)
		c.place(e, now)
	}
	for c.flying.Len() > 0 && !c.flying.peek().deadline.After(now) {
		e := c.flying.peek()
		rec := e.Stored
		rec.AvailableAt = now
		if err := c.requeue(e, rec, now); err != nil {
			c.log.Error("queue: hand back timed-out delivery", "certname", e.Job.Certname, "delivery", e.receipt, "err", err)
			e.deadline = now.Add(time.Second) // try again soon, without spinning
			heap.Fix(c.flying, e.index)
			break
		}
		c.log.Warn("queue: delivery timed out, job waiting again", "certname", e.Job.Certname, "seq", e.Job.Seq, "attempts", e.Attempts)
	}
}

// requeue turns in-flight e back into a waiting job with record rec,
// collapsing it with a newer waiting job of its node if there is one.
func (c *Core) requeue(e *entry, rec Stored, now time.Time) error {
	key := e.Job.Key()
	if w := c.waiting[key]; w != nil {
		m := merge(w.Stored, rec, false)
		if err := c.save([]Stored{m}, []uint64{e.ID}); err != nil {
			return err
		}
		c.land(e)
		c.unplace(w)
		w.Stored = m
		c.place(w, now)
		return nil
	}
	if err := c.save([]Stored{rec}, nil); err != nil {
		return err
	}
	c.land(e)
	e.Stored = rec
	c.waiting[key] = e
	c.place(e, now)
	return nil
}

// land ends e's delivery in memory.
func (c *Core) land(e *entry) {
	c.unplace(e)
	delete(c.inflight, e.Job.Key())
	delete(c.receipts, e.receipt)
	e.receipt, e.deadline = "", time.Time{}
}

// nextEvent is when a delayed job becomes ready or a delivery times out.
func (c *Core) nextEvent() time.Time {
	var t time.Time
	if c.delayed.Len() > 0 {
		t = c.delayed.peek().AvailableAt
	}
	if c.flying.Len() > 0 {
		if d := c.flying.peek().deadline; t.IsZero() || d.Before(t) {
			t = d
		}
	}
	return t
}

func (c *Core) Enqueue(ctx context.Context, job farm.Job) error {
	if err := farm.CheckEnqueue(ctx, job); err != nil {
		return err
	}
	now := time.Now()
	if job.EnqueuedAt.IsZero() {
		job.EnqueuedAt = now.UTC()
	}
	in := Stored{Job: job, AvailableAt: now}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return fmt.Errorf("enqueue job of %s: %w", job.Certname, ErrClosed)
	}
	if w := c.waiting[job.Key()]; w != nil {
		m := merge(w.Stored, in, true)
		if err := c.save([]Stored{m}, nil); err != nil {
			return fmt.Errorf("enqueue job of %s: %w", job.Certname, err)
		}
		c.unplace(w)
		w.Stored = m
		c.place(w, now)
	} else {
		in.ID = c.lastID + 1
		if err := c.save([]Stored{in}, nil); err != nil {
			return fmt.Errorf("enqueue job of %s: %w", job.Certname, err)
		}
		c.lastID = in.ID
		e := &entry{Stored: in, index: -1}
		c.waiting[job.Key()] = e
		c.place(e, now)
	}
	c.broadcast()
	return nil
}

func (c *Core) Receive(ctx context.Context, visibility time.Duration) (farm.Delivery, error) {
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		c.mu.Lock()
		if err := farm.CheckQueueReceive(ctx); err != nil {
			c.mu.Unlock()
			return farm.Delivery{}, err
		}
		if c.closed {
			c.mu.Unlock()
			return farm.Delivery{}, fmt.Errorf("receive job: %w", ErrClosed)
		}
		now := time.Now()
		c.tick(now)
		var e *entry
		for _, h := range c.ready {
			if h.Len() > 0 {
				e = h.peek()
				break
			}
		}
		if e != nil {
			d, err := c.deliver(e, now, visibility)
			c.mu.Unlock()
			return d, err
		}
		wake, next := c.changed, c.nextEvent()
		c.mu.Unlock()

		var timeout <-chan time.Time
		if !next.IsZero() {
			wait := max(next.Sub(now), time.Millisecond)
			if timer == nil {
				timer = time.NewTimer(wait)
			} else {
				timer.Reset(wait)
			}
			timeout = timer.C
		}
		select {
		case <-ctx.Done():
		case <-wake:
		case <-timeout:
		}
	}
}

// deliver hands out ready job e.
func (c *Core) deliver(e *entry, now time.Time, visibility time.Duration) (farm.Delivery, error) {
	rec := e.Stored
	rec.Attempts++
	if err := c.save([]Stored{rec}, nil); err != nil {
		return farm.Delivery{}, fmt.Errorf("receive job of %s: %w", rec.Job.Certname, err)
	}
	c.unplace(e)
	delete(c.waiting, rec.Job.Key())
	e.Stored = rec
	c.deliveries++
	e.receipt = fmt.Sprintf("%s-%d-%d", c.nonce, e.ID, c.deliveries)
	e.deadline = now.Add(visibility)
	c.inflight[rec.Job.Key()] = e
	c.receipts[e.receipt] = e
	heap.Push(c.flying, e)
	return farm.Delivery{Job: rec.Job, ID: e.receipt, Attempts: rec.Attempts}, nil
}

// inFlight returns the job behind delivery d, or an ErrNotFound error when d
// is not in flight any more (acked, retried or timed out).
func (c *Core) inFlight(d farm.Delivery) (*entry, error) {
	if c.closed {
		return nil, ErrClosed
	}
	e := c.receipts[d.ID]
	if e == nil {
		return nil, fmt.Errorf("delivery %s is not in flight (finished or timed out): %w", d.ID, farm.ErrNotFound)
	}
	return e, nil
}

func (c *Core) Ack(ctx context.Context, d farm.Delivery) error {
	if err := farm.CheckAck(ctx, d); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e, err := c.inFlight(d)
	if err != nil {
		return fmt.Errorf("ack job of %s: %w", d.Certname, err)
	}
	if err := c.save(nil, []uint64{e.ID}); err != nil {
		return fmt.Errorf("ack job of %s: %w", d.Certname, err)
	}
	c.land(e)
	if w := c.waiting[e.Job.Key()]; w != nil {
		c.place(w, time.Now())
	}
	c.broadcast()
	return nil
}

func (c *Core) Retry(ctx context.Context, d farm.Delivery, after time.Duration) error {
	if err := farm.CheckRetry(ctx, d, after); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e, err := c.inFlight(d)
	if err != nil {
		return fmt.Errorf("retry job of %s: %w", d.Certname, err)
	}
	now := time.Now()
	rec := e.Stored
	rec.AvailableAt = now.Add(max(after, 0))
	if err := c.requeue(e, rec, now); err != nil {
		return fmt.Errorf("retry job of %s: %w", d.Certname, err)
	}
	c.broadcast()
	return nil
}

func (c *Core) Stats(ctx context.Context) ([]farm.QueueStats, error) {
	if err := farm.CheckQueueStats(ctx); err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, fmt.Errorf("queue stats: %w", ErrClosed)
	}
	now := time.Now()
	c.tick(now)
	out := make([]farm.QueueStats, len(lanes))
	oldest := make([]time.Time, len(lanes))
	for i, l := range lanes {
		out[i].Lane = l
	}
	for _, e := range c.waiting {
		r, _ := laneRank(e.Job.Lane)
		out[r].Depth++
		if oldest[r].IsZero() || e.Job.EnqueuedAt.Before(oldest[r]) {
			oldest[r] = e.Job.EnqueuedAt
		}
	}
	for _, e := range c.inflight {
		r, _ := laneRank(e.Job.Lane)
		out[r].InFlight++
	}
	for i := range out {
		if out[i].Depth > 0 {
			out[i].OldestAge = max(now.Sub(oldest[i]), 0)
		}
	}
	return out, nil
}

// Queue is a farm.Queue on a Core: the handle a driver returns. Handles on
// one Core share its jobs; a delivery received through a handle stays in
// flight for that handle's visibility timeout.
type Queue struct {
	c          *Core
	visibility time.Duration
}

var _ farm.Queue = Queue{}

// Queue returns a handle whose deliveries time out after visibility
// (DefaultVisibilityTimeout when not positive).
func (c *Core) Queue(visibility time.Duration) Queue {
	if visibility <= 0 {
		visibility = DefaultVisibilityTimeout
	}
	return Queue{c: c, visibility: visibility}
}

// Enqueue adds job, collapsing it with a waiting job of the same node and
// slot. A zero EnqueuedAt is set to now. A job with an invalid certname or
// an unknown lane is refused with farm.ErrInvalid.
func (q Queue) Enqueue(ctx context.Context, job farm.Job) error { return q.c.Enqueue(ctx, job) }

// Receive blocks until a job is ready or ctx ends (or the Core closes).
func (q Queue) Receive(ctx context.Context) (farm.Delivery, error) {
	return q.c.Receive(ctx, q.visibility)
}

// Ack finishes d for good. A delivery no longer in flight (finished
// already, or timed out) gives farm.ErrNotFound.
func (q Queue) Ack(ctx context.Context, d farm.Delivery) error { return q.c.Ack(ctx, d) }

// Retry hands d's job out again after the delay, collapsing it with a newer
// waiting job of its node. A delivery no longer in flight gives
// farm.ErrNotFound.
func (q Queue) Retry(ctx context.Context, d farm.Delivery, after time.Duration) error {
	return q.c.Retry(ctx, d, after)
}

// Stats returns one entry per lane, urgent first.
func (q Queue) Stats(ctx context.Context) ([]farm.QueueStats, error) { return q.c.Stats(ctx) }

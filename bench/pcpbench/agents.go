package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"

	"github.com/compilefarm/compilefarm/pkg/pcp/message"
)

// pxp-agent's reconnection (cpp-pcp-client 1.7.8, Connection::connect and
// ConnectorBase's monitor task): when its connection closes it waits
// 200 ms and tries once; after a failed try it sleeps 2 s, then 4 s, 8 s,
// 16 s, 32 s and 32 s from then on, each ±0.5 s at random (uniform), and
// tries again. A try is one websocket open (bounded by connectionTimeout)
// and, here, the association (associationTimeout); pxp-agent treats a
// failed association a little differently (it waits for its next
// connection check), which the bench does not model.
const (
	reconnectDelay = 200 * time.Millisecond
	backoffStart   = 2 * time.Second
	backoffLimit   = 32 * time.Second
	backoffJitter  = 500 * time.Millisecond
)

// fleet is the bench's agents: a goroutine each that connects, answers
// echo requests and reconnects as pxp-agent does.
type fleet struct {
	d   *dialer
	ids []identity
	// ramp bounds the dials of the first connections (not reconnections,
	// which pxp-agent's backoff spreads).
	ramp chan struct{}

	associated atomic.Int64   // connections open and associated now
	assocAt    []atomic.Int64 // per agent: unix ns of its last association
	attempts   atomic.Int64   // connection tries
	failures   atomic.Int64   // tries that failed
	badFrames  atomic.Int64   // frames that did not decode
	others     atomic.Int64   // messages neither echo requests nor expected

	errs   counter // why tries failed
	closes counter // how open connections ended (close code and reason)
	wg     sync.WaitGroup
}

func newFleet(d *dialer, ids []identity, ramp int) *fleet {
	return &fleet{d: d, ids: ids, ramp: make(chan struct{}, ramp), assocAt: make([]atomic.Int64, len(ids))}
}

// start starts every agent; they run until ctx ends. wait waits for them.
func (f *fleet) start(ctx context.Context) {
	for i := range f.ids {
		f.wg.Add(1)
		go func() { defer f.wg.Done(); f.agent(ctx, i) }()
	}
}

func (f *fleet) wait() { f.wg.Wait() }

// associatedSince counts the agents whose last association is after t.
func (f *fleet) associatedSince(t time.Time) int {
	n, ns := 0, t.UnixNano()
	for i := range f.assocAt {
		if f.assocAt[i].Load() > ns {
			n++
		}
	}
	return n
}

// associatedAfter lists, for the agents whose last association is after
// t, how long after t it was, in increasing order.
func (f *fleet) associatedAfter(t time.Time) []time.Duration {
	var d []time.Duration
	ns := t.UnixNano()
	for i := range f.assocAt {
		if at := f.assocAt[i].Load(); at > ns {
			d = append(d, time.Duration(at-ns))
		}
	}
	slices.Sort(d)
	return d
}

// agent is agent i's life: connect (through the ramp until it first
// succeeds), serve, reconnect with pxp-agent's backoff.
func (f *fleet) agent(ctx context.Context, i int) {
	id := f.ids[i]
	first := true
	var delay time.Duration
	backoff := backoffStart
	for {
		if !sleep(ctx, delay) {
			return
		}
		if first {
			select {
			case f.ramp <- struct{}{}:
			case <-ctx.Done():
				return
			}
		}
		f.attempts.Add(1)
		ws, err := f.d.connect(ctx, id)
		if first {
			<-f.ramp
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			f.failures.Add(1)
			f.errs.add(errorKind(err))
			delay = backoff - backoffJitter + rand.N(2*backoffJitter+1)
			backoff = min(2*backoff, backoffLimit)
			continue
		}
		first, backoff = false, backoffStart
		f.assocAt[i].Store(time.Now().UnixNano())
		f.associated.Add(1)
		err = f.serve(ctx, ws, id)
		f.associated.Add(-1)
		ws.Close()
		if ctx.Err() != nil {
			return
		}
		f.closes.add(closeKind(err))
		delay = reconnectDelay
	}
}

// serve answers echo requests on ws until it closes or ctx ends.
func (f *fleet) serve(ctx context.Context, ws *websocket.Conn, id identity) error {
	defer context.AfterFunc(ctx, func() { ws.Close() })()
	for {
		_, frame, err := ws.ReadMessage()
		if err != nil {
			return err
		}
		m, err := f.d.codec.DecodeV1(frame)
		if err != nil {
			f.badFrames.Add(1)
			continue
		}
		if m.MessageType != typeBlockingRequest {
			f.others.Add(1)
			continue
		}
		resp, err := echoResponse(m, id.uri)
		if err != nil {
			f.badFrames.Add(1)
			continue
		}
		if err := f.d.send(ws, resp); err != nil {
			return err
		}
	}
}

// echoResponse is pxp-agent's answer to an echo module's blocking request:
// an rpc_blocking_response to the sender (no in-reply-to, as pxp-agent),
// expiring in 5 s, whose results' outcome is the request's argument.
func echoResponse(req *message.Message, sender string) (*message.Message, error) {
	var in struct {
		TransactionID string `json:"transaction_id"`
		Params        struct {
			Argument json.RawMessage `json:"argument"`
		} `json:"params"`
	}
	if err := json.Unmarshal(req.Data, &in); err != nil {
		return nil, err
	}
	if in.Params.Argument == nil {
		in.Params.Argument = json.RawMessage("null")
	}
	var out struct {
		TransactionID string `json:"transaction_id"`
		Results       struct {
			Outcome json.RawMessage `json:"outcome"`
		} `json:"results"`
	}
	out.TransactionID = in.TransactionID
	out.Results.Outcome = in.Params.Argument
	data, err := json.Marshal(out)
	if err != nil {
		return nil, err
	}
	return &message.Message{
		ID:          newID(),
		MessageType: typeBlockingResponse,
		Sender:      sender,
		Targets:     []string{req.Sender},
		Expires:     time.Now().Add(5 * time.Second),
		Data:        data,
	}, nil
}

// sleep waits d or until ctx ends; it reports whether ctx is still live.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// errorKind names an error without what varies between connections (the
// client's port).
func errorKind(err error) string {
	s := err.Error()
	// "read tcp 127.0.0.1:PORT->127.0.0.1:PORT: ..." and the like.
	f := strings.Fields(s)
	for i, w := range f {
		if strings.Contains(w, "->") || (strings.Count(w, ":") == 1 && strings.HasPrefix(w, "127.")) {
			f[i] = "ADDR"
		}
	}
	return strings.Join(f, " ")
}

// closeKind names how a connection ended: its close code and reason when
// the broker closed it with a close frame.
func closeKind(err error) string {
	var ce *websocket.CloseError
	if errors.As(err, &ce) {
		return fmt.Sprintf("close %d %q", ce.Code, ce.Text)
	}
	if err == nil {
		return "closed"
	}
	return errorKind(err)
}

// counter counts strings, keeping at most 32 distinct ones.
type counter struct {
	mu sync.Mutex
	n  map[string]int64
}

func (c *counter) add(s string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int64{}
	}
	if _, ok := c.n[s]; !ok && len(c.n) >= 32 {
		s = "(others)"
	}
	c.n[s]++
}

// top lists the k most frequent strings with their counts.
func (c *counter) top(k int) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	keys := make([]string, 0, len(c.n))
	for s := range c.n {
		keys = append(keys, s)
	}
	sort.Slice(keys, func(i, j int) bool {
		if c.n[keys[i]] != c.n[keys[j]] {
			return c.n[keys[i]] > c.n[keys[j]]
		}
		return keys[i] < keys[j]
	})
	var out []string
	for _, s := range keys[:min(k, len(keys))] {
		out = append(out, fmt.Sprintf("%d× %s", c.n[s], s))
	}
	return out
}

// reset forgets what was counted.
func (c *counter) reset() {
	c.mu.Lock()
	c.n = nil
	c.mu.Unlock()
}

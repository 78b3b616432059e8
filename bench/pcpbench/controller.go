package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"

	"github.com/compilefarm/compilefarm/pkg/pcp/message"
)

// echoArgument is what the controllers ask agents to echo (as
// third_party/pcp-client's capture: pxp-agent's echo module).
const echoArgument = "hello"

// requestTTL is the expiry of the controllers' requests, and how long one
// may stay unanswered before it counts as lost.
const requestTTL = 10 * time.Second

// controller is a PXP controller (ruby-pcp-client's part): one v1
// connection of type controller that keeps a window of echo requests in
// flight to random agents and times each round trip, from writing the
// request to reading the agent's rpc_blocking_response.
type controller struct {
	d  *dialer
	id identity
	ws *websocket.Conn

	wmu sync.Mutex // serialises writes

	mu      sync.Mutex
	pending map[string]time.Time // request id (= transaction id) → sent at
	rtts    []time.Duration
	// errTypes counts the broker's answers other than the agent's
	// (error_message, ttl_expired, ...), by message type.
	errTypes map[string]int64

	tokens chan struct{} // the window: one token per request in flight

	sent, answered, inWindow, lost atomic.Int64
}

// dialController connects and associates a controller.
func dialController(ctx context.Context, d *dialer, id identity, inflight int) (*controller, error) {
	ws, err := d.connect(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("controller %s: %w", id.uri, err)
	}
	c := &controller{
		d: d, id: id, ws: ws,
		pending:  map[string]time.Time{},
		errTypes: map[string]int64{},
		tokens:   make(chan struct{}, inflight),
	}
	for range inflight {
		c.tokens <- struct{}{}
	}
	return c, nil
}

// run sends echo requests to random targets until end, then waits up to
// requestTTL for the answers still in flight, and closes the connection.
// Answers read before end count in inWindow.
func (c *controller) run(ctx context.Context, targets []string, end time.Time) {
	readDone := make(chan struct{})
	go func() { defer close(readDone); c.read(end) }()
	sweepCtx, stopSweep := context.WithCancel(ctx)
	defer stopSweep()
	go c.sweep(sweepCtx)

	endTimer := time.NewTimer(time.Until(end))
	defer endTimer.Stop()
send:
	for {
		select {
		case <-c.tokens:
		case <-endTimer.C:
			break send
		case <-ctx.Done():
			break send
		}
		if err := c.request(targets[rand.IntN(len(targets))]); err != nil {
			break
		}
	}
	// Drain: the answers still in flight, bounded.
	deadline := time.Now().Add(requestTTL)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		c.mu.Lock()
		n := len(c.pending)
		c.mu.Unlock()
		if n == 0 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	c.mu.Lock()
	c.lost.Add(int64(len(c.pending)))
	clear(c.pending)
	c.mu.Unlock()
	c.wmu.Lock()
	c.ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(time.Second))
	c.wmu.Unlock()
	c.ws.Close()
	<-readDone
}

// request sends one echo request to target.
func (c *controller) request(target string) error {
	id := newID()
	data, _ := json.Marshal(map[string]any{
		"transaction_id": id,
		"module":         "echo",
		"action":         "echo",
		"params":         map[string]string{"argument": echoArgument},
	})
	m := &message.Message{
		ID:          id,
		MessageType: typeBlockingRequest,
		Sender:      c.id.uri,
		Targets:     []string{target},
		Expires:     time.Now().Add(requestTTL),
		Data:        data,
	}
	c.mu.Lock()
	c.pending[id] = time.Now()
	c.mu.Unlock()
	c.wmu.Lock()
	err := c.d.send(c.ws, m)
	c.wmu.Unlock()
	if err != nil {
		return err
	}
	c.sent.Add(1)
	return nil
}

// read matches answers to requests until the connection closes.
func (c *controller) read(end time.Time) {
	for {
		_, frame, err := c.ws.ReadMessage()
		if err != nil {
			return
		}
		now := time.Now()
		m, err := c.d.codec.DecodeV1(frame)
		if err != nil {
			c.countError("(undecodable frame)")
			continue
		}
		var data struct {
			TransactionID string `json:"transaction_id"`
			ID            string `json:"id"`
		}
		json.Unmarshal(m.Data, &data)
		key := data.TransactionID
		if m.MessageType != typeBlockingResponse {
			// error_message and ttl_expired name the request in their
			// data's id (and in in_reply_to).
			key = data.ID
			if key == "" {
				key = m.InReplyTo
			}
			c.countError(m.MessageType)
		}
		c.mu.Lock()
		sentAt, ok := c.pending[key]
		if ok {
			delete(c.pending, key)
			if m.MessageType == typeBlockingResponse {
				c.rtts = append(c.rtts, now.Sub(sentAt))
			}
		}
		c.mu.Unlock()
		if !ok {
			continue
		}
		if m.MessageType == typeBlockingResponse {
			c.answered.Add(1)
			if now.Before(end) {
				c.inWindow.Add(1)
			}
		}
		c.tokens <- struct{}{}
	}
}

// sweep counts requests unanswered after requestTTL as lost and gives
// their places in the window back.
func (c *controller) sweep(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			c.mu.Lock()
			var n int
			for id, at := range c.pending {
				if now.Sub(at) > requestTTL {
					delete(c.pending, id)
					n++
				}
			}
			c.mu.Unlock()
			c.lost.Add(int64(n))
			for range n {
				c.tokens <- struct{}{}
			}
		}
	}
}

func (c *controller) countError(kind string) {
	c.mu.Lock()
	c.errTypes[kind]++
	c.mu.Unlock()
}

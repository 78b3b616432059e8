package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/compilefarm/compilefarm/internal/backoff"
	"github.com/compilefarm/compilefarm/pkg/farm"
	"github.com/compilefarm/compilefarm/pkg/pcp/message"
)

// storeTimeout bounds one call to the presence store or an inbox.
const storeTimeout = 10 * time.Second

// errGone: the task that held the target has closed its inbox.
var errGone = errors.New("the target's task is gone")

// relayed is what one task posts to another's inbox: a message for one
// target it holds, in the v1 encoding (which keeps every field), or the
// notice that Target associated with the posting task (Superseded, no
// Msg).
type relayed struct {
	Target     string `json:"target"`
	From       string `json:"from"` // the posting task
	Msg        []byte `json:"msg,omitempty"`
	Superseded bool   `json:"superseded,omitempty"`
}

// relay posts m for d.uri to the inbox of d.task.
func (b *Broker) relay(m *message.Message, d destination) error {
	out := *m
	out.Debug = nil
	if out.Expires.IsZero() {
		out.Expires = time.Now().Add(defaultExpiry).UTC()
	}
	enc, err := b.codec.EncodeV1(&out)
	if err != nil {
		return err
	}
	body, err := json.Marshal(relayed{Target: d.uri, From: b.o.Name, Msg: enc})
	if err != nil {
		return err
	}
	if len(body) > farm.MaxInboxMessage {
		return fmt.Errorf("the message is too large (%d bytes) to relay to the task holding the target", len(body))
	}
	ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
	defer cancel()
	err = b.o.Inbox.Post(ctx, d.task, body)
	if errors.Is(err, farm.ErrNotFound) {
		return errGone
	}
	return err
}

// receiveInbox delivers what other tasks post to this task's inbox until
// ctx ends.
func (b *Broker) receiveInbox(ctx context.Context) {
	for ctx.Err() == nil {
		msgs, err := b.o.Inbox.Receive(ctx, b.o.Name)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			b.st.errors.Add(1)
			b.log.Warn("pcp: receiving from this task's inbox failed; retrying in 1s", "task", b.o.Name, "err", err)
			_ = backoff.Sleep(ctx, time.Second) // the loop ends with ctx
			continue
		}
		for _, raw := range msgs {
			b.receiveRelayed(raw)
		}
	}
}

// receiveRelayed delivers one message another task posted.
func (b *Broker) receiveRelayed(raw []byte) {
	var r relayed
	if err := json.Unmarshal(raw, &r); err != nil {
		b.st.errors.Add(1)
		b.log.Warn("pcp: dropping an inbox message that does not decode", "err", err)
		return
	}
	if r.Superseded {
		b.supersededElsewhere(r.Target, r.From)
		return
	}
	m, err := b.codec.DecodeV1(r.Msg)
	if err != nil {
		b.st.errors.Add(1)
		b.log.Warn("pcp: dropping an inbox message that does not decode", "from_task", r.From, "err", err)
		return
	}
	if b.relayedBefore(r.Target + " " + m.ID) {
		b.log.Debug("pcp: dropping a message the inbox delivered twice", "uri", r.Target, "id", m.ID)
		return
	}
	b.st.fromInbox.Add(1)
	if m.Expires.Before(time.Now()) {
		b.st.expired.Add(1)
		if m.Sender != ServerURI {
			b.route(nil, serverMessage(msgTTLExpired, m.Sender, m.ID, map[string]string{"id": m.ID}))
		}
		return
	}
	c := b.local(r.Target)
	if c == nil {
		b.undeliverable(nil, m, r.Target, "not connected: "+r.Target)
		return
	}
	if err := c.deliver(m); err != nil {
		b.undeliverable(nil, m, r.Target, "not delivered to "+r.Target+": "+err.Error())
		return
	}
	b.st.routed.Add(1)
}

// relayedRemembered is how many relayed deliveries (target and message id)
// a task remembers to drop the inbox's duplicates.
const relayedRemembered = 4096

// relayedBefore reports whether key was received from the inbox recently,
// and remembers it. Only receiveInbox's goroutine calls it.
func (b *Broker) relayedBefore(key string) bool {
	if _, ok := b.seen[key]; ok {
		return true
	}
	if b.seen == nil {
		b.seen = make(map[string]struct{}, relayedRemembered)
		b.seenRing = make([]string, relayedRemembered)
	}
	if old := b.seenRing[b.seenNext]; old != "" {
		delete(b.seen, old)
	}
	b.seenRing[b.seenNext] = key
	b.seenNext = (b.seenNext + 1) % relayedRemembered
	b.seen[key] = struct{}{}
	return false
}

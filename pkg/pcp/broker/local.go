package broker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/compilefarm/compilefarm/pkg/pcp/message"
)

// Local is an in-process PCP client, pcp://<Options.Name>/<type>: the
// farm's job runner uses one as its controller. It is registered and
// present like a websocket client, so agents' answers reach it from any
// task.
type Local struct {
	b       *Broker
	uri     string
	fn      func(*message.Message)
	in      chan *message.Message
	done    chan struct{}
	once    sync.Once
	stopped chan struct{}
}

// localQueue is the least queue of a Local: a controller such as the job
// runner receives the answers of many agents at once.
const localQueue = 4096

// ErrLocalClosed is returned by Send after Close, or once the broker
// shut down.
var ErrLocalClosed = errors.New("pcp broker: the local client is closed")

// Attach registers an in-process client of type clientType. deliver is
// called with each message for it, one at a time, on a goroutine of the
// Local's own (a queue of 4096 messages, or Options.WriteQueue if larger;
// messages beyond it are refused: their senders get an error_message, and
// the drop is logged). Attaching a type already attached supersedes
// the older Local, as for any client.
func (b *Broker) Attach(ctx context.Context, clientType string, deliver func(*message.Message)) (*Local, error) {
	if !validType(clientType) || reservedType(clientType) {
		return nil, fmt.Errorf("pcp broker: %q cannot be a client type", clientType)
	}
	if deliver == nil {
		return nil, errors.New("pcp broker: Attach needs a deliver function")
	}
	if b.stopping.Load() {
		return nil, ErrLocalClosed
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	l := &Local{
		b:       b,
		uri:     "pcp://" + b.o.Name + "/" + clientType,
		fn:      deliver,
		in:      make(chan *message.Message, max(b.o.WriteQueue, localQueue)),
		done:    make(chan struct{}),
		stopped: make(chan struct{}),
	}
	b.wg.Add(1)
	go l.loop()
	b.register(l)
	b.log.Info("pcp: in-process client attached", "uri", l.uri)
	return l, nil
}

func (l *Local) loop() {
	defer l.b.wg.Done()
	defer close(l.stopped)
	for {
		select {
		case <-l.done:
			return
		case m := <-l.in:
			l.fn(m)
		}
	}
}

// URI returns the client's PCP URI.
func (l *Local) URI() string { return l.uri }

func (l *Local) node() string { return l.b.o.Name }

func (l *Local) deliver(m *message.Message) error {
	select {
	case <-l.done:
		return errClosed
	default:
	}
	cp := *m
	select {
	case l.in <- &cp:
		return nil
	default:
		l.b.st.errors.Add(1)
		l.b.log.Warn("pcp: an in-process client's queue is full; message dropped", "uri", l.uri, "type", m.MessageType, "id", m.ID)
		return errQueueFull
	}
}

func (l *Local) kick(code int, reason string) {
	l.b.log.Info("pcp: in-process client closed", "uri", l.uri, "code", code, "reason", reason)
	l.close()
	l.b.unregister(l)
}

// Send routes m as a message from this client: its sender is forced to
// URI, an empty ID is generated, a zero Expires becomes a minute from now.
// Errors about delivery (target not connected, expired, not authorized)
// come back to the deliver function as error_message or ttl_expired, as
// for any client; Send itself fails only for an invalid message or a
// closed client.
func (l *Local) Send(ctx context.Context, m *message.Message) error {
	select {
	case <-l.done:
		return ErrLocalClosed
	default:
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	out := *m
	out.Sender = l.uri
	if out.ID == "" {
		out.ID = newID()
	}
	if out.Expires.IsZero() {
		out.Expires = time.Now().Add(defaultExpiry).UTC()
	}
	if out.MessageType == "" || len(out.Targets) == 0 {
		return errors.New("pcp broker: a message needs a message type and targets")
	}
	for _, t := range out.Targets {
		if _, err := message.ParseURI(t); err != nil {
			return fmt.Errorf("pcp broker: target %q: %w", t, err)
		}
	}
	if out.Data != nil && len(out.Data) > l.b.o.MaxMessageSize {
		return fmt.Errorf("pcp broker: the message's data is larger than the limit of %d bytes", l.b.o.MaxMessageSize)
	}
	l.b.st.received.Add(1)
	l.b.accept(l, &out)
	return nil
}

// Close unregisters the client. A call of deliver that had begun may
// still be running; no other begins.
func (l *Local) Close() {
	l.close()
	l.b.unregister(l)
}

func (l *Local) close() {
	l.once.Do(func() { close(l.done) })
}

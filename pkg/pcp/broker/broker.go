package broker

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"sync"
	"sync/atomic"
	"time"

	"github.com/compilefarm/compilefarm/pkg/farm"
	"github.com/compilefarm/compilefarm/pkg/pcp/message"
)

// Revocations answers whether a client certificate was revoked (pkg/ca's
// *CA has this method).
type Revocations interface {
	IsRevoked(serial *big.Int) bool
}

// Options configure a Broker. Only Name is required.
type Options struct {
	// Name is this task's name: its inbox, the task of its presence
	// records, and the common name of its in-process clients
	// (pcp://<Name>/<type>).
	Name string
	// Presence records which task holds each client, and which tasks are
	// alive (each task's heartbeat record); nil means one process that
	// delivers locally only. Inbox is required with it.
	Presence farm.PresenceStore
	// Inbox carries messages to the tasks holding their targets.
	Inbox farm.Inbox
	// TaskTTL is how long this task's heartbeat record
	// (pcp://<Name>/compilefarm-task) lasts; it is rewritten every third of
	// it while Run runs (default 90 s). Other tasks count this task's
	// client records only while it is unexpired, so a task that dies
	// without clearing its records loses its clients after at most TaskTTL
	// (and the liveness cache's few seconds).
	TaskTTL time.Duration
	// ClientTTL is how long a client's presence record lasts (default 24
	// h). A record is written when the client associates (v2: connects)
	// and cleared when it disconnects; while it stays connected it is
	// rewritten about every third of ClientTTL, each client at its own
	// time, a bounded batch at a time. It only bounds how long the record
	// of a client whose disconnection was never cleared can outlive a
	// live task; a dead task's records are ignored at once (TaskTTL).
	ClientTTL time.Duration
	// VerifyPeer, when set, checks a client's certificates (leaf first)
	// before the upgrade, for TLS configurations that only request client
	// certificates (pkg/ca's ServerTLSConfig: give it (*ca.CA).VerifyPeer).
	// When nil, a connection whose certificate crypto/tls did not verify
	// (no VerifiedChains: RequireAndVerifyClientCert was not asked for) is
	// refused.
	VerifyPeer func(certs []*x509.Certificate) error
	// Revocations, when set, is asked about every open connection's
	// certificate every RevocationCheck (default 10 s); revoked ones are
	// closed.
	Revocations     Revocations
	RevocationCheck time.Duration
	// IdleTimeout closes a connection that sent nothing (no message, ping
	// or pong) for this long (default 6 minutes, as pcp-broker).
	IdleTimeout time.Duration
	// MaxConnections caps open websocket connections (default 20000);
	// upgrades over it get HTTP 503.
	MaxConnections int
	// MaxMessageSize caps a received message (default
	// message.DefaultMaxMessageSize); a larger one closes the connection
	// with 1009.
	MaxMessageSize int
	// WriteQueue is how many messages may wait for a slow client before it
	// is disconnected (default 128).
	WriteQueue int
	// Log receives connection and routing events (default slog.Default()).
	Log *slog.Logger
}

// Defaults of Options.
const (
	DefaultTaskTTL         = 90 * time.Second
	DefaultClientTTL       = 24 * time.Hour
	DefaultRevocationCheck = 10 * time.Second
	DefaultIdleTimeout     = 6 * time.Minute
	DefaultMaxConnections  = 20000
	DefaultWriteQueue      = 128
)

// ServerURI is the broker's own PCP URI.
const ServerURI = "pcp:///server"

// Broker routes PCP messages between the clients connected to it, and
// through the inboxes of other tasks to theirs. Safe for concurrent use.
type Broker struct {
	o     Options
	log   *slog.Logger
	codec message.Codec

	mu      sync.RWMutex
	conns   map[*conn]struct{} // open websocket connections, associated or not
	clients map[string]client  // associated clients by URI
	subs    map[client][]pattern
	due     map[string]time.Time // when each held client's presence record is next refreshed

	liveMu sync.Mutex
	live   map[string]*liveness // other tasks' liveness, for a few seconds (liveness.go)

	open     atomic.Int64 // websocket connections counted against MaxConnections
	stopping atomic.Bool
	wg       sync.WaitGroup // connection goroutines

	st counters

	// The inbox deliveries seen last (relayedBefore), to drop duplicates.
	seen     map[string]struct{}
	seenRing []string
	seenNext int
}

// client is a PCP client the broker delivers to: a websocket connection or
// an in-process Local.
type client interface {
	URI() string
	// deliver queues m for the client without blocking; it reports false
	// when the client cannot take it (closed, queue full, not encodable).
	deliver(m *message.Message) error
	// kick closes the client with a websocket close code and reason.
	kick(code int, reason string)
	// node is the client's certificate common name, for logs.
	node() string
}

// New returns a broker; call Run for its background work.
func New(o Options) (*Broker, error) {
	if o.Name == "" {
		return nil, errors.New("pcp broker: Options.Name is required")
	}
	if (o.Presence == nil) != (o.Inbox == nil) {
		return nil, errors.New("pcp broker: Options.Presence and Options.Inbox go together")
	}
	if err := farm.ValidatePCPURI("pcp://" + o.Name + "/x"); err != nil {
		return nil, fmt.Errorf("pcp broker: Options.Name %q cannot be a PCP common name", o.Name)
	}
	if o.TaskTTL <= 0 {
		o.TaskTTL = DefaultTaskTTL
	}
	if o.ClientTTL <= 0 {
		o.ClientTTL = DefaultClientTTL
	}
	if o.RevocationCheck <= 0 {
		o.RevocationCheck = DefaultRevocationCheck
	}
	if o.IdleTimeout <= 0 {
		o.IdleTimeout = DefaultIdleTimeout
	}
	if o.MaxConnections <= 0 {
		o.MaxConnections = DefaultMaxConnections
	}
	if o.MaxMessageSize <= 0 {
		o.MaxMessageSize = message.DefaultMaxMessageSize
	}
	if o.WriteQueue <= 0 {
		o.WriteQueue = DefaultWriteQueue
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	return &Broker{
		o:       o,
		log:     o.Log,
		codec:   message.Codec{MaxMessageSize: o.MaxMessageSize},
		conns:   map[*conn]struct{}{},
		clients: map[string]client{},
		subs:    map[client][]pattern{},
		due:     map[string]time.Time{},
		live:    map[string]*liveness{},
	}, nil
}

// register makes c the holder of its URI, closing the client that held it
// before (4000 superseded) here or on another task (claimPresence), records
// its presence and tells inventory subscribers.
func (b *Broker) register(c client) {
	uri := c.URI()
	b.mu.Lock()
	old := b.clients[uri]
	b.clients[uri] = c
	b.due[uri] = b.firstRefresh(time.Now())
	b.mu.Unlock()
	if old != nil && old != c {
		b.log.Info("pcp: a new connection superseded the old one", "uri", uri, "node", c.node())
		b.unsubscribe(old)
		old.kick(CloseSuperseded, "superseded")
	} else {
		b.inventoryChanged(uri, 1)
	}
	b.st.associated.Add(1)
	if old != nil && old != c {
		b.st.associated.Add(-1)
	}
	b.claimPresence(uri)
}

// unregister forgets c if it still holds its URI.
func (b *Broker) unregister(c client) {
	uri := c.URI()
	if uri == "" {
		return
	}
	b.mu.Lock()
	held := b.clients[uri] == c
	if held {
		delete(b.clients, uri)
		delete(b.due, uri)
	}
	b.mu.Unlock()
	b.unsubscribe(c)
	if !held {
		return
	}
	b.st.associated.Add(-1)
	b.inventoryChanged(uri, -1)
	b.clearPresence(uri)
}

// local returns the client holding uri here, or nil.
func (b *Broker) local(uri string) client {
	b.mu.RLock()
	defer b.mu.RUnlock()
	return b.clients[uri]
}

// Connected reports whether a client holds uri here or, with a presence
// store, on another task (an unexpired record of a live task).
func (b *Broker) Connected(ctx context.Context, uri string) (bool, error) {
	if b.local(uri) != nil {
		return true, nil
	}
	if b.o.Presence == nil || isTaskURI(uri) {
		return false, nil
	}
	p, err := b.o.Presence.LookupPresence(ctx, uri)
	if errors.Is(err, farm.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("pcp broker: presence of %s: %w", uri, err)
	}
	if p.Task == b.o.Name {
		return false, nil
	}
	return b.taskAlive(ctx, p.Task), nil
}

// Run does the broker's background work until ctx ends: it writes this
// task's heartbeat record first and keeps it fresh, receives the messages
// other tasks post to this task's inbox, refreshes its clients' presence
// records when they fall due, and closes idle connections and those whose
// certificate was revoked. When ctx ends it clears the heartbeat, closes
// every connection (1001 going away), clears this task's presence records
// and inbox, and returns nil.
func (b *Broker) Run(ctx context.Context) error {
	if b.o.Presence != nil {
		// Before the inbox, so that the clients that associate from now on
		// are reachable from other tasks at once.
		b.beat(ctx)
	}
	if b.o.Inbox != nil {
		if err := b.o.Inbox.Open(ctx, b.o.Name); err != nil {
			if ctx.Err() != nil { // stopped as it started
				b.shutdown()
				return nil
			}
			b.clearHeartbeat()
			return fmt.Errorf("pcp broker: opening inbox %s: %w", b.o.Name, err)
		}
	}
	var bg sync.WaitGroup
	if b.o.Inbox != nil {
		bg.Add(1)
		go func() { defer bg.Done(); b.receiveInbox(ctx) }()
	}
	if b.o.Presence != nil {
		bg.Add(1)
		go func() { defer bg.Done(); b.heartbeat(ctx) }()
	}
	bg.Add(1)
	go func() { defer bg.Done(); b.sweep(ctx) }()
	<-ctx.Done()
	bg.Wait() // no presence refresh or heartbeat may follow shutdown's clearing
	b.shutdown()
	return nil
}

// shutdown closes every client and forgets this task's presence.
func (b *Broker) shutdown() {
	b.stopping.Store(true)
	// The heartbeat first: other tasks stop relaying to clients that are
	// about to go.
	b.clearHeartbeat()
	b.mu.RLock()
	var all []client
	for c := range b.conns {
		all = append(all, c)
	}
	for _, c := range b.clients {
		if _, ok := c.(*Local); ok {
			all = append(all, c)
		}
	}
	b.mu.RUnlock()
	for _, c := range all {
		c.kick(CloseGoingAway, "broker shutting down")
	}
	done := make(chan struct{})
	go func() { b.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		b.log.Warn("pcp: connections still open 5s after shutdown began")
	}
	if b.o.Inbox != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := b.o.Inbox.Close(ctx, b.o.Name); err != nil {
			b.log.Warn("pcp: closing this task's inbox", "task", b.o.Name, "err", err)
		}
	}
}

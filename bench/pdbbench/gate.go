package main

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// gate stands between the farm and PuppetDB on a loopback port and can
// hold what the farm sends: while held, the bytes of the requests the
// broker writes wait in the gate (on new and open connections alike), so
// the deliveries under way stall and the commands after them stay in the
// outbox, untouched; released, everything flows again at once. The
// broker's --puppetdb points at the gate, so a backlog can be built and
// then timed to zero without the drainer's back-off (which a refused
// connection or a timed-out handshake starts) in the measurement.
//
// With a TLS configuration the gate is PuppetDB's https port as the farm
// sees it: it completes every handshake at once, held or not, with
// PuppetDB's own certificate and client certificates checked against its
// CA, and forwards the requests to PuppetDB's plain-http port. It also
// times, per connection, each request's first bytes reaching PuppetDB to
// its answer's first bytes (Answers).
type gate struct {
	ln     net.Listener
	target string
	tls    *tls.Config // nil: TCP passes through as it is

	mu      sync.Mutex
	open    chan struct{} // closed while traffic flows; a new one while held
	conns   map[net.Conn]struct{}
	closed  bool
	answers []time.Duration // since the last ResetAnswers
}

// newGate listens on a free loopback port and forwards to target
// (host:port), open; conf, when not nil, terminates TLS there.
func newGate(target string, conf *tls.Config) (*gate, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	g := &gate{ln: ln, target: target, tls: conf, open: make(chan struct{}), conns: map[net.Conn]struct{}{}}
	close(g.open)
	go g.serve()
	return g, nil
}

// Addr is the gate's host:port.
func (g *gate) Addr() string { return g.ln.Addr().String() }

// Hold stops forwarding what clients send until Release.
func (g *gate) Hold() {
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-g.open:
		g.open = make(chan struct{})
	default: // held already
	}
}

// Release forwards again, held bytes first.
func (g *gate) Release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-g.open:
	default:
		close(g.open)
	}
}

// ResetAnswers forgets the answer times so far.
func (g *gate) ResetAnswers() {
	g.mu.Lock()
	g.answers = nil
	g.mu.Unlock()
}

// Answers are the answer times since the last ResetAnswers.
func (g *gate) Answers() []time.Duration {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]time.Duration(nil), g.answers...)
}

func (g *gate) answered(d time.Duration) {
	g.mu.Lock()
	g.answers = append(g.answers, d)
	g.mu.Unlock()
}

// wait returns once the gate is open, or false when ctx ends first.
func (g *gate) wait(ctx context.Context) bool {
	g.mu.Lock()
	open := g.open
	g.mu.Unlock()
	select {
	case <-open:
		return true
	case <-ctx.Done():
		return false
	}
}

// Close stops listening and closes every forwarded connection.
func (g *gate) Close() {
	g.mu.Lock()
	g.closed = true
	for c := range g.conns {
		c.Close()
	}
	g.mu.Unlock()
	g.ln.Close()
	g.Release()
}

// track adds or removes a connection Close must close; false once closed.
func (g *gate) track(c net.Conn, add bool) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !add {
		delete(g.conns, c)
		return true
	}
	if g.closed {
		return false
	}
	g.conns[c] = struct{}{}
	return true
}

func (g *gate) serve() {
	for {
		c, err := g.ln.Accept()
		if err != nil {
			return
		}
		go g.forward(c)
	}
}

// forward pipes one client connection to the target: requests through
// the gate, answers freely.
func (g *gate) forward(c net.Conn) {
	defer c.Close()
	if !g.track(c, true) {
		return
	}
	defer g.track(c, false)
	if g.tls != nil {
		tc := tls.Server(c, g.tls)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := tc.HandshakeContext(ctx)
		cancel()
		if err != nil {
			return
		}
		c = tc
	}
	u, err := net.Dial("tcp", g.target)
	if err != nil {
		return
	}
	defer u.Close()
	if !g.track(u, true) {
		return
	}
	defer g.track(u, false)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var sent atomic.Int64 // when the pending request's first bytes went on (unix ns); 0: none pending
	done := make(chan struct{})
	go func() {
		defer close(done)
		g.downstream(c, u, &sent)
		cancel() // the target closed: stop waiting on the client side
		c.Close()
	}()
	if g.upstream(ctx, c, u, &sent) {
		// The client finished sending: let the target finish answering.
		if tc, ok := u.(*net.TCPConn); ok {
			tc.CloseWrite()
		}
	} else {
		u.Close()
	}
	<-done
}

// upstream copies what the client c sends to u, each chunk once the gate
// is open, marking when a request starts; true when the client ended its
// side cleanly (EOF).
func (g *gate) upstream(ctx context.Context, c, u net.Conn, sent *atomic.Int64) bool {
	buf := make([]byte, 32<<10)
	for {
		n, err := c.Read(buf)
		if n > 0 {
			if !g.wait(ctx) {
				return false
			}
			sent.CompareAndSwap(0, time.Now().UnixNano())
			if _, werr := u.Write(buf[:n]); werr != nil {
				return false
			}
		}
		if err != nil {
			return errors.Is(err, io.EOF)
		}
	}
}

// downstream copies the target's answers to the client, timing each
// answer's first bytes from its request's.
func (g *gate) downstream(c, u net.Conn, sent *atomic.Int64) {
	buf := make([]byte, 32<<10)
	for {
		n, err := u.Read(buf)
		if n > 0 {
			if t := sent.Swap(0); t != 0 {
				g.answered(time.Since(time.Unix(0, t)))
			}
			if _, werr := c.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

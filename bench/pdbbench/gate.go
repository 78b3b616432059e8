package main

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
)

// gate forwards TCP connections from a loopback port to PuppetDB and can
// hold what the farm sends: while held, the bytes the broker writes wait
// in the gate (new and open connections alike), so the deliveries under
// way stall and the commands after them stay in the outbox, untouched;
// released, everything flows again at once. The broker's --puppetdb
// points at the gate, so a backlog can be built and then timed to zero
// without the drainer's back-off (which a refused connection starts) in
// the measurement. TLS passes through: the broker still checks PuppetDB's
// certificate (its SAN 127.0.0.1 covers the gate's address too).
type gate struct {
	ln     net.Listener
	target string

	mu     sync.Mutex
	open   chan struct{} // closed while traffic flows; a new one while held
	conns  map[net.Conn]struct{}
	closed bool
}

// newGate listens on a free loopback port and forwards to target
// (host:port), open.
func newGate(target string) (*gate, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	g := &gate{ln: ln, target: target, open: make(chan struct{}), conns: map[net.Conn]struct{}{}}
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

// forward pipes one client connection to the target: upstream through the
// gate, downstream freely.
func (g *gate) forward(c net.Conn) {
	defer c.Close()
	if !g.track(c, true) {
		return
	}
	defer g.track(c, false)
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
	done := make(chan struct{})
	go func() {
		defer close(done)
		io.Copy(c, u)
		cancel() // the target closed: stop waiting on the client side
		c.Close()
	}()
	if g.upstream(ctx, c, u) {
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
// is open; true when the client ended its side cleanly (EOF).
func (g *gate) upstream(ctx context.Context, c, u net.Conn) bool {
	buf := make([]byte, 32<<10)
	for {
		n, err := c.Read(buf)
		if n > 0 {
			if !g.wait(ctx) {
				return false
			}
			if _, werr := u.Write(buf[:n]); werr != nil {
				return false
			}
		}
		if err != nil {
			return errors.Is(err, io.EOF)
		}
	}
}

package main

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"sync"
	"time"
)

// handshakeListener is an experiment `broker serve` does not do (serve
// --handshakes N): it performs the TLS handshakes of the connections it
// accepts itself, at most N at once, and gives the HTTP server only
// connections whose handshake finished. Connections beyond N wait in the
// kernel's accept queue instead of all progressing slowly together, so
// that after a restart the broker's CPU goes to handshakes that finish
// within the clients' connection timeout.
type handshakeListener struct {
	net.Listener
	conf      *tls.Config
	ready     chan net.Conn
	done      chan struct{}
	closeOnce sync.Once
}

// handshakeTimeout bounds one handshake in a handshakeListener.
const handshakeTimeout = 10 * time.Second

func limitHandshakes(ln net.Listener, conf *tls.Config, n int) net.Listener {
	h := &handshakeListener{Listener: ln, conf: conf, ready: make(chan net.Conn), done: make(chan struct{})}
	for range n {
		go h.worker()
	}
	return h
}

func (h *handshakeListener) worker() {
	for {
		c, err := h.Listener.Accept()
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil { // EMFILE and the like: wait for it to pass
			select {
			case <-h.done:
				return
			case <-time.After(50 * time.Millisecond):
			}
			continue
		}
		tc := tls.Server(c, h.conf)
		ctx, cancel := context.WithTimeout(context.Background(), handshakeTimeout)
		err = tc.HandshakeContext(ctx)
		cancel()
		if err != nil {
			c.Close()
			continue
		}
		select {
		case h.ready <- tc:
		case <-h.done:
			tc.Close()
			return
		}
	}
}

// Accept returns the next connection whose handshake finished.
func (h *handshakeListener) Accept() (net.Conn, error) {
	select {
	case c := <-h.ready:
		return c, nil
	case <-h.done:
		return nil, net.ErrClosed
	}
}

func (h *handshakeListener) Close() error {
	h.closeOnce.Do(func() { close(h.done) })
	return h.Listener.Close()
}

package main

import (
	"flag"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/compilefarm/compilefarm/pkg/frontdoor"
)

// admissionFlags are the front door's back-pressure settings, on dev and
// serve: its admission limits (frontdoor.Admission), a cap on open
// connections and the memory its caches may hold.
type admissionFlags struct {
	limits   frontdoor.Admission
	maxConns int
	cacheMiB int64
}

func (a *admissionFlags) register(fs *flag.FlagSet) {
	d := frontdoor.DefaultAdmission()
	fs.IntVar(&a.limits.MaxInFlight, "max-in-flight", d.MaxInFlight,
		"catalog, fact, report, node, certificate-request and filebucket-upload requests the front door works on at once (16 per CPU); "+
			"more wait (--max-queued, --queue-wait), then get 503 + Retry-After, which Puppet's agent honours. "+
			"Only these requests read a body, so this also bounds the request bodies in memory")
	fs.IntVar(&a.limits.MaxInFlightLight, "max-in-flight-light", d.MaxInFlightLight,
		"the other requests (CA certificate, CRL, file metadata and content, environments) the front door works on at once (64 per CPU): "+
			"a budget of their own, so a herd of check-ins does not starve the runs under way. The health check, /status/v1/simple, is never refused")
	fs.IntVar(&a.limits.MaxQueued, "max-queued", d.MaxQueued,
		"requests of each of the two budgets that may wait for a slot; beyond, 503 + Retry-After at once (0: none wait)")
	fs.DurationVar(&a.limits.QueueWait, "queue-wait", d.QueueWait,
		"how long a request waits for a slot before 503 + Retry-After (a waiting request holds no body; --max-queued bounds the waits)")
	fs.DurationVar(&a.limits.RetryAfter, "retry-after", d.RetryAfter,
		"the Retry-After of a refused request, in whole seconds (at least 1): Puppet's agent sleeps that long, at most its runinterval, "+
			"then sends the request again, up to 100 times (agents before PUP-11853, such as Debian 12's 7.23, sleep and then fail the request)")
	fs.DurationVar(&a.limits.RetryAfterJitter, "retry-after-jitter", d.RetryAfterJitter,
		"up to this much is added at random to --retry-after, so a refused herd comes back spread out")
	fs.IntVar(&a.maxConns, "max-conns", 0,
		"cap on open front door connections (0: none): beyond it, new connections wait in the kernel's accept queue, holding no memory "+
			"here, until one closes. The admission limits already answer excess requests cheaply; behind a load balancer whose health check "+
			"is an HTTPS request, a task at the cap fails that check")
	fs.Int64Var(&a.cacheMiB, "cache-mib", frontdoor.DefaultCacheBytes>>20,
		"MiB the front door may keep between requests: served catalogs (8/10), the facts of runs under way and file metadata answers "+
			"(1/10 each). Once full, memory stays flat; a smaller cache reads the store more often")
}

func (a *admissionFlags) validate() error {
	switch {
	case a.limits.MaxInFlight < 1:
		return fmt.Errorf("--max-in-flight must be at least 1")
	case a.limits.MaxInFlightLight < 1:
		return fmt.Errorf("--max-in-flight-light must be at least 1")
	case a.limits.MaxQueued < 0:
		return fmt.Errorf("--max-queued must not be negative")
	case a.limits.QueueWait < 0:
		return fmt.Errorf("--queue-wait must not be negative")
	case a.limits.RetryAfter < time.Second:
		return fmt.Errorf("--retry-after must be at least 1s: Puppet's agent retries at once after 0")
	case a.limits.RetryAfterJitter < 0:
		return fmt.Errorf("--retry-after-jitter must not be negative")
	case a.maxConns < 0:
		return fmt.Errorf("--max-conns must not be negative (0: no cap)")
	case a.cacheMiB < 10:
		return fmt.Errorf("--cache-mib must be at least 10")
	}
	return nil
}

// limitListener caps the connections open at once: while n are open,
// Accept waits, so further connections stay in the kernel's accept queue.
type limitListener struct {
	net.Listener
	slots     chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

// limitConns returns ln capped at n open connections, or ln when n is 0.
func limitConns(ln net.Listener, n int) net.Listener {
	if n <= 0 {
		return ln
	}
	return &limitListener{Listener: ln, slots: make(chan struct{}, n), done: make(chan struct{})}
}

func (l *limitListener) Accept() (net.Conn, error) {
	select {
	case l.slots <- struct{}{}:
	case <-l.done:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.slots
		return nil, err
	}
	return &limitedConn{Conn: c, release: sync.OnceFunc(func() { <-l.slots })}, nil
}

func (l *limitListener) Close() error {
	l.closeOnce.Do(func() { close(l.done) })
	return l.Listener.Close()
}

// limitedConn gives its slot back when closed.
type limitedConn struct {
	net.Conn
	release func()
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.release()
	return err
}

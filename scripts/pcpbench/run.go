package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/compilefarm/compilefarm/internal/latency"
)

// runOptions are `pcpbench run`'s flags.
type runOptions struct {
	conns, controllers, inflight, dialConcurrency int
	duration                                      time.Duration
	connectTimeout, reassociateTimeout            time.Duration
	progressEvery                                 time.Duration
	logLevel                                      string
	keepLog                                       string
	restart                                       string // term or kill
	profileDir                                    string
}

// cpuMark is the CPU time of the broker, of this process and of the whole
// machine at one moment.
type cpuMark struct {
	at                      time.Time
	broker, self, machineCP float64
}

// phaseCPU is what a phase cost: wall time and CPU seconds of the broker,
// of the driver (this process: agents and controllers) and of everything
// else on the machine.
type phaseCPU struct {
	Wall   time.Duration
	Broker float64
	Driver float64
	Others float64
}

func mark(brokerPID int) cpuMark {
	m := cpuMark{at: time.Now(), machineCP: machineBusy()}
	m.self, _ = cpuSeconds(0)
	if brokerPID != 0 {
		m.broker, _ = cpuSeconds(brokerPID)
	}
	return m
}

// since is the cost from a to b; brokerCPU overrides b's broker CPU when
// the broker exited in between (its CPU at exit), or adds a second broker.
func (a cpuMark) to(b cpuMark) phaseCPU {
	p := phaseCPU{Wall: b.at.Sub(a.at), Broker: b.broker - a.broker, Driver: b.self - a.self}
	p.Others = max(0, (b.machineCP-a.machineCP)-p.Broker-p.Driver)
	return p
}

// result is what a run measured; zero values were not measured.
type result struct {
	Command, Machine      string
	LoadBefore, LoadAfter string
	Conns, Controllers    int
	Inflight, DialAtOnce  int
	Duration              time.Duration
	FileLimit             uint64
	Certs                 time.Duration
	TLSVersion            string
	Associate             phaseCPU
	Associated            int
	AssocAttempts         int64
	AssocFailures         int64
	Before, After         procSample
	Routing               phaseCPU
	RoundTrips            int64 // answered within the window
	RouteSent, RouteLost  int64
	RouteErrors           map[string]int64
	BrokerRouted          float64 // the broker's count of routed messages in the window; -1 when it has none
	RTT                   latency.Summary
	Restart               phaseCPU
	RestartGraceful       bool
	Shutdown              time.Duration // SIGTERM to exit
	Listening             time.Duration // SIGTERM to the new broker listening
	Reassociated          int
	RestartSignal         string
	// ReassocCurve is when 50%, 90%, 99% and all of the agents had
	// associated again, after the signal; 0 when not reached.
	ReassocCurve     [4]time.Duration
	ReassocAttempts  int64
	ReassocFailures  int64
	AfterRestart     procSample
	Closes, Errors   []string
	ReassocErrors    []string
	Failed           string // why the run stopped early
	BrokerStatsAfter map[string]any
}

// procSample is a look at the broker process.
type procSample struct {
	RSS        int64
	FDs        int
	Goroutines int
	Heap       uint64 // Go heap in use after a collection
	Stacks     uint64 // goroutine stacks in use
}

func sampleBroker(ctx context.Context, p *brokerProc) (procSample, error) {
	var s procSample
	var err error
	if s.RSS, err = residentBytes(p.pid); err != nil {
		return s, err
	}
	s.FDs, _ = openFDs(p.pid)
	st, err := p.stats(ctx, true)
	if err != nil {
		return s, err
	}
	s.Goroutines, s.Heap, s.Stacks = st.Goroutines, st.HeapInuse, st.StackInuse
	return s, nil
}

// run measures: the certificates, the first associations, memory, routing,
// and a restart. It returns what it measured even when it fails.
func run(ctx context.Context, o runOptions, progress func(string)) (*result, error) {
	res := &result{Conns: o.conns, Controllers: o.controllers, Inflight: o.inflight, DialAtOnce: o.dialConcurrency,
		Duration: o.duration, Machine: machine(), LoadBefore: loadAverage(), BrokerRouted: -1}
	defer func() { res.LoadAfter = loadAverage() }()
	var err error
	if res.FileLimit, err = raiseFileLimit(uint64(o.conns + o.controllers + 512)); err != nil {
		return res, err
	}
	exe, err := os.Executable()
	if err != nil {
		return res, err
	}
	dir, err := os.MkdirTemp("", "pcpbench-")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(dir)

	// 1. A CA and a certificate per client.
	t := time.Now()
	ca, err := newBenchCA()
	if err != nil {
		return res, err
	}
	names := make([]string, 0, o.conns+o.controllers)
	for i := range o.conns {
		names = append(names, fmt.Sprintf("agent-%05d.pcpbench.test", i))
	}
	for i := range o.controllers {
		names = append(names, fmt.Sprintf("controller-%02d.pcpbench.test", i))
	}
	certs, err := ca.issueAll(names)
	if err != nil {
		return res, err
	}
	if err := ca.writeServerFiles(dir); err != nil {
		return res, err
	}
	res.Certs = time.Since(t)
	ids := make([]identity, len(names))
	for i := range names {
		typ := "agent"
		if i >= o.conns {
			typ = "controller"
		}
		ids[i] = identity{uri: "pcp://" + names[i] + "/" + typ, cert: certs[i]}
	}
	progress(fmt.Sprintf("%d client certificates signed in %s", len(names), round(res.Certs)))

	// 2. The broker, in its own process.
	logPath := filepath.Join(dir, "broker.log")
	serveArgs := func(listen string) []string {
		return []string{"--listen", listen, "--status", "127.0.0.1:0", "--certs", dir,
			"--max-connections", strconv.Itoa(o.conns + o.controllers + 100), "--log-level", o.logLevel}
	}
	b, err := startBroker(ctx, exe, serveArgs("127.0.0.1:0"), logPath)
	if err != nil {
		return res, err
	}
	defer func() {
		b.stop(10 * time.Second)
		if o.keepLog != "" {
			if data, err := os.ReadFile(logPath); err == nil {
				os.WriteFile(o.keepLog, data, 0o644)
			}
		}
	}()
	progress(fmt.Sprintf("broker up: pid %d, wss://%s/pcp/", b.pid, b.pcpAddr))
	var profiles sync.WaitGroup
	defer profiles.Wait()
	// profile saves one of the broker's profiles into --profile DIR, in the
	// background for a CPU profile.
	profile := func(b *brokerProc, name string, seconds int, file string) {
		if o.profileDir == "" {
			return
		}
		path := filepath.Join(o.profileDir, file)
		get := func() {
			if err := b.profile(ctx, name, seconds, path); err != nil {
				progress(fmt.Sprintf("profile %s: %v", file, err))
			}
		}
		if name != "profile" {
			get()
			return
		}
		profiles.Add(1)
		go func() { defer profiles.Done(); get() }()
	}
	if !sleep(ctx, time.Second) {
		return res, ctx.Err()
	}
	if res.Before, err = sampleBroker(ctx, b); err != nil {
		return res, err
	}

	// 3. Every agent connects and associates, dialConcurrency at a time.
	d := newDialer(b.pcpAddr, ca.pool())
	f := newFleet(d, ids[:o.conns], o.dialConcurrency)
	fctx, stopFleet := context.WithCancel(ctx)
	defer func() { stopFleet(); f.wait() }()
	m0 := mark(b.pid)
	profile(b, "profile", 20, "broker-cpu-associate.pprof")
	f.start(fctx)
	n, err := waitFor(ctx, o.connectTimeout, o.progressEvery, o.conns, func() int { return int(f.associated.Load()) },
		func(n int) string {
			return fmt.Sprintf("associating: %d/%d associated, %d failed tries", n, o.conns, f.failures.Load())
		}, progress)
	res.Associate = m0.to(mark(b.pid))
	res.Associated, res.AssocAttempts, res.AssocFailures = n, f.attempts.Load(), f.failures.Load()
	res.Errors = f.errs.top(5)
	if err != nil {
		return res, fmt.Errorf("associating: %w: %d of %d in %s", err, n, o.conns, round(o.connectTimeout))
	}
	res.TLSVersion = tls.VersionName(uint16(d.tlsVersion.Load()))
	progress(fmt.Sprintf("all %d associated in %s", o.conns, round(res.Associate.Wall)))
	if !sleep(ctx, 2*time.Second) {
		return res, ctx.Err()
	}
	if res.After, err = sampleBroker(ctx, b); err != nil {
		return res, err
	}
	progress(fmt.Sprintf("broker RSS %s before, %s with %d connections", mib(res.Before.RSS), mib(res.After.RSS), o.conns))
	profile(b, "heap", 0, "broker-heap.pprof")
	profile(b, "goroutine", 0, "broker-goroutine.pprof")
	profile(b, "profile", max(1, int(o.duration.Seconds())), "broker-cpu-routing.pprof")

	// 4. Routing: controllers send echo requests to random agents.
	if err := route(ctx, o, d, ids[o.conns:], ids[:o.conns], b, res, progress); err != nil {
		return res, err
	}

	// 5. A restart: SIGTERM, a new broker on the same address, and every
	// agent back with pxp-agent's backoff.
	res.RestartSignal = map[string]string{"term": "SIGTERM", "kill": "SIGKILL"}[o.restart]
	progress(fmt.Sprintf("restarting the broker (%s, then a new one on %s)", res.RestartSignal, b.pcpAddr))
	f.errs.reset()
	attempts0, failures0 := f.attempts.Load(), f.failures.Load()
	m1 := mark(b.pid)
	kill := time.Now()
	if o.restart == "kill" {
		b.kill()
		res.RestartGraceful = true
	} else {
		res.RestartGraceful = b.stop(10 * time.Second)
	}
	res.Shutdown = time.Since(kill)
	oldCPU := b.cpuAtExit - m1.broker
	nb, err := startBroker(ctx, exe, serveArgs(b.pcpAddr), logPath)
	if err != nil {
		return res, fmt.Errorf("restarting: %w", err)
	}
	b = nb
	res.Listening = time.Since(kill)
	profile(b, "profile", 20, "broker-cpu-reassociate.pprof")
	n, err = waitFor(ctx, o.reassociateTimeout, o.progressEvery, o.conns, func() int {
		if int(f.associated.Load()) < o.conns {
			return min(f.associatedSince(kill), int(f.associated.Load()))
		}
		return f.associatedSince(kill)
	}, func(n int) string {
		return fmt.Sprintf("re-associating: %d/%d associated again, %d failed tries", n, o.conns, f.failures.Load()-failures0)
	}, progress)
	end := mark(b.pid)
	res.Restart = m1.to(end)
	// The old broker's CPU until it exited, plus the new one's from its start.
	res.Restart.Broker = oldCPU + end.broker
	res.Restart.Others = max(0, (end.machineCP-m1.machineCP)-res.Restart.Broker-res.Restart.Driver)
	res.Reassociated = n
	res.ReassocAttempts, res.ReassocFailures = f.attempts.Load()-attempts0, f.failures.Load()-failures0
	res.Closes, res.ReassocErrors = f.closes.top(5), f.errs.top(5)
	if after := f.associatedAfter(kill); len(after) > 0 {
		for i, q := range []float64{0.5, 0.9, 0.99, 1} {
			if k := int(math.Ceil(q*float64(o.conns))) - 1; k < len(after) {
				res.ReassocCurve[i] = after[k]
			}
		}
	}
	if err != nil {
		return res, fmt.Errorf("re-associating: %w: %d of %d in %s", err, n, o.conns, round(o.reassociateTimeout))
	}
	progress(fmt.Sprintf("all %d associated again %s after %s", o.conns, round(res.Restart.Wall), res.RestartSignal))
	if !sleep(ctx, 2*time.Second) {
		return res, ctx.Err()
	}
	if res.AfterRestart, err = sampleBroker(ctx, b); err != nil {
		return res, err
	}
	if st, err := b.stats(ctx, false); err == nil {
		res.BrokerStatsAfter = st.Broker
	}
	if f.badFrames.Load() > 0 || f.others.Load() > 0 {
		res.Errors = append(res.Errors, fmt.Sprintf("agents received %d undecodable frames and %d unexpected messages",
			f.badFrames.Load(), f.others.Load()))
	}
	return res, nil
}

// route runs the routing phase: controllers connect, then each keeps
// o.inflight echo requests in flight to random agents for o.duration.
func route(ctx context.Context, o runOptions, d *dialer, cids, agents []identity, b *brokerProc, res *result, progress func(string)) error {
	targets := make([]string, len(agents))
	for i, a := range agents {
		targets[i] = a.uri
	}
	var cs []*controller
	for _, id := range cids {
		c, err := dialController(ctx, d, id, o.inflight)
		if err != nil {
			return err
		}
		cs = append(cs, c)
	}
	st0, err := b.stats(ctx, false)
	if err != nil {
		return err
	}
	progress(fmt.Sprintf("routing: %d controllers × %d requests in flight, for %s", len(cs), o.inflight, o.duration))
	m0 := mark(b.pid)
	end := time.Now().Add(o.duration)
	done := make(chan struct{})
	for _, c := range cs {
		go func() { c.run(ctx, targets, end); done <- struct{}{} }()
	}
	tick := time.NewTicker(o.progressEvery)
	defer tick.Stop()
	endTimer := time.NewTimer(time.Until(end))
	defer endTimer.Stop()
	endC := endTimer.C
	var m1 cpuMark
	var st1 brokerStats
	for waiting := len(cs); waiting > 0; {
		select {
		case <-done:
			waiting--
		case <-tick.C:
			var n int64
			for _, c := range cs {
				n += c.answered.Load()
			}
			progress(fmt.Sprintf("routing: %d round trips", n))
		case <-endC:
			endC = nil
			m1 = mark(b.pid)
			st1, _ = b.stats(ctx, false)
		}
	}
	if m1.at.IsZero() {
		m1 = mark(b.pid)
	}
	res.Routing = m0.to(m1)
	var rtts []time.Duration
	res.RouteErrors = map[string]int64{}
	for _, c := range cs {
		res.RoundTrips += c.inWindow.Load()
		res.RouteSent += c.sent.Load()
		res.RouteLost += c.lost.Load()
		rtts = append(rtts, c.rtts...)
		for k, v := range c.errTypes {
			res.RouteErrors[k] += v
		}
	}
	res.RTT = latency.Summarize(rtts)
	names := []string{"messages_routed", "MessagesRouted", "routed", "Routed", "delivered", "Delivered"}
	if a, ok := brokerNumber(st0.Broker, names...); ok {
		if z, ok := brokerNumber(st1.Broker, names...); ok {
			res.BrokerRouted = z - a
		}
	}
	progress(fmt.Sprintf("routing: %d round trips in %s (%.0f/s), p50 %.2f ms, p99 %.2f ms, %d lost",
		res.RoundTrips, round(res.Routing.Wall), float64(res.RoundTrips)/res.Routing.Wall.Seconds(), res.RTT.P50, res.RTT.P99, res.RouteLost))
	return nil
}

// waitFor polls count until it reaches want, printing describe(count)
// every progressEvery, for at most timeout. It returns the last count.
func waitFor(ctx context.Context, timeout, progressEvery time.Duration, want int, count func() int,
	describe func(int) string, progress func(string)) (int, error) {
	deadline := time.Now().Add(timeout)
	next := time.Now().Add(progressEvery)
	for {
		n := count()
		if n >= want {
			return n, nil
		}
		if time.Now().After(deadline) {
			progress(describe(n))
			return n, errNotAll
		}
		if time.Now().After(next) {
			progress(describe(n))
			next = next.Add(progressEvery)
		}
		if !sleep(ctx, 20*time.Millisecond) {
			return count(), errors.Join(errNotAll, ctx.Err())
		}
	}
}

func round(d time.Duration) time.Duration {
	if d > 10*time.Second {
		return d.Round(100 * time.Millisecond)
	}
	return d.Round(time.Millisecond)
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

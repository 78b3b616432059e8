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
	"time"

	"github.com/compilefarm/compilefarm/bench/internal/latency"
	"github.com/compilefarm/compilefarm/bench/internal/procstat"
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
	at                 time.Time
	broker, self, busy float64
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

// mark is the CPU times now; one /proc cannot give is 0.
func mark(brokerPID int) cpuMark {
	m := cpuMark{at: time.Now()}
	m.busy, _ = procstat.MachineBusy()
	if st, err := procstat.ReadStat(0); err == nil {
		m.self = st.CPU
	}
	if brokerPID != 0 {
		if st, err := procstat.ReadStat(brokerPID); err == nil {
			m.broker = st.CPU
		}
	}
	return m
}

// to is the cost of the phase from a to b (one broker process throughout).
func (a cpuMark) to(b cpuMark) phaseCPU {
	p := phaseCPU{Wall: b.at.Sub(a.at), Broker: b.broker - a.broker, Driver: b.self - a.self}
	p.Others = max(0, (b.busy-a.busy)-p.Broker-p.Driver)
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
	if s.RSS, err = procstat.ResidentBytes(p.pid); err != nil {
		return s, err
	}
	s.FDs, _ = procstat.OpenFDs(p.pid)
	st, err := p.stats(ctx, true)
	if err != nil {
		return s, err
	}
	s.Goroutines, s.Heap, s.Stacks = st.Goroutines, st.HeapInuse, st.StackInuse
	return s, nil
}

// bench is one run's shared state: its options, what it measured so far,
// the broker process and the agents.
type bench struct {
	o        runOptions
	res      *result
	progress func(string)
	exe, dir string
	logPath  string
	ca       *benchCA
	ids      []identity // the agents', then the controllers'
	b        *brokerProc
	d        *dialer
	f        *fleet
}

// run measures, in named steps: the certificates, the first associations,
// memory, routing, and a restart. It returns what it measured even when it
// fails.
func run(ctx context.Context, o runOptions, progress func(string)) (*result, error) {
	res := &result{Conns: o.conns, Controllers: o.controllers, Inflight: o.inflight, DialAtOnce: o.dialConcurrency,
		Duration: o.duration, Machine: machine(), LoadBefore: loadAverage(), BrokerRouted: -1}
	defer func() { res.LoadAfter = loadAverage() }()
	bn := &bench{o: o, res: res, progress: progress}
	var err error
	if res.FileLimit, err = raiseFileLimit(uint64(o.conns + o.controllers + 512)); err != nil {
		return res, err
	}
	if bn.exe, err = os.Executable(); err != nil {
		return res, err
	}
	if bn.dir, err = os.MkdirTemp("", "pcpbench-"); err != nil {
		return res, err
	}
	defer os.RemoveAll(bn.dir)
	bn.logPath = filepath.Join(bn.dir, "broker.log")
	if err := bn.makeIdentities(); err != nil {
		return res, err
	}
	if bn.b, err = bn.startBroker(ctx, "127.0.0.1:0"); err != nil {
		return res, err
	}
	defer bn.stop()
	progress(fmt.Sprintf("broker up: pid %d, wss://%s/pcp/", bn.b.pid, bn.b.pcpAddr))
	bn.d = newDialer(bn.b.pcpAddr, bn.ca.pool())
	bn.f = newFleet(bn.d, bn.ids[:o.conns], o.dialConcurrency)
	fctx, stopFleet := context.WithCancel(ctx)
	defer func() { stopFleet(); bn.f.wait() }()
	for _, step := range []func(context.Context) error{
		func(ctx context.Context) error { return bn.associate(ctx, fctx) },
		bn.route,
		bn.restart,
		bn.finish,
	} {
		if err := step(ctx); err != nil {
			return res, err
		}
	}
	return res, nil
}

// makeIdentities makes the CA, a certificate for every agent and
// controller, and the broker's certificate files.
func (bn *bench) makeIdentities() error {
	o := bn.o
	t := time.Now()
	ca, err := newBenchCA()
	if err != nil {
		return err
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
		return err
	}
	if err := ca.writeServerFiles(bn.dir); err != nil {
		return err
	}
	bn.res.Certs = time.Since(t)
	bn.ca, bn.ids = ca, make([]identity, len(names))
	for i := range names {
		typ := "agent"
		if i >= o.conns {
			typ = "controller"
		}
		bn.ids[i] = identity{uri: "pcp://" + names[i] + "/" + typ, cert: certs[i]}
	}
	bn.progress(fmt.Sprintf("%d client certificates signed in %s", len(names), round(bn.res.Certs)))
	return nil
}

// startBroker starts a broker process listening on listen.
func (bn *bench) startBroker(ctx context.Context, listen string) (*brokerProc, error) {
	o := bn.o
	args := []string{"--listen", listen, "--status", "127.0.0.1:0", "--certs", bn.dir,
		"--max-connections", strconv.Itoa(o.conns + o.controllers + 100), "--log-level", o.logLevel}
	if o.profileDir != "" {
		args = append(args, "--profile-dir", o.profileDir)
	}
	return startBroker(ctx, bn.exe, args, bn.logPath)
}

// stop stops the broker and keeps its log when asked to.
func (bn *bench) stop() {
	bn.b.stop(10 * time.Second)
	if bn.o.keepLog != "" {
		if data, err := os.ReadFile(bn.logPath); err == nil {
			os.WriteFile(bn.o.keepLog, data, 0o644)
		}
	}
}

// profile saves one of the broker's profiles (heap, goroutine) into
// --profile DIR.
func (bn *bench) profile(ctx context.Context, name, file string) {
	if bn.o.profileDir == "" {
		return
	}
	if err := bn.b.profile(ctx, name, filepath.Join(bn.o.profileDir, file)); err != nil {
		bn.progress(fmt.Sprintf("profile %s: %v", file, err))
	}
}

// cpuProfile starts the broker's CPU profile into --profile DIR (file
// set) or stops it (file empty).
func (bn *bench) cpuProfile(ctx context.Context, file string) {
	if bn.o.profileDir == "" {
		return
	}
	if err := bn.b.cpuProfile(ctx, file != "", file); err != nil {
		bn.progress(fmt.Sprintf("the broker's CPU profile %s: %v", file, err))
	}
}

// associate starts every agent (they live on fctx), dialConcurrency dials
// at a time, waits until all are associated, and samples the broker before
// and after.
func (bn *bench) associate(ctx, fctx context.Context) error {
	o, res, b, f := bn.o, bn.res, bn.b, bn.f
	if !sleep(ctx, time.Second) {
		return ctx.Err()
	}
	var err error
	if res.Before, err = sampleBroker(ctx, b); err != nil {
		return err
	}
	m0 := mark(b.pid)
	bn.cpuProfile(ctx, "broker-cpu-associate.pprof")
	f.start(fctx)
	n, err := waitFor(ctx, o.connectTimeout, o.progressEvery, o.conns, func() int { return int(f.associated.Load()) },
		func(n int) string {
			return fmt.Sprintf("associating: %d/%d associated, %d failed tries", n, o.conns, f.failures.Load())
		}, bn.progress)
	res.Associate = m0.to(mark(b.pid))
	bn.cpuProfile(ctx, "")
	res.Associated, res.AssocAttempts, res.AssocFailures = n, f.attempts.Load(), f.failures.Load()
	res.Errors = f.errs.top(5)
	if err != nil {
		return fmt.Errorf("associating: %w: %d of %d in %s", err, n, o.conns, round(o.connectTimeout))
	}
	res.TLSVersion = tls.VersionName(uint16(bn.d.tlsVersion.Load()))
	bn.progress(fmt.Sprintf("all %d associated in %s", o.conns, round(res.Associate.Wall)))
	if !sleep(ctx, 2*time.Second) {
		return ctx.Err()
	}
	if res.After, err = sampleBroker(ctx, b); err != nil {
		return err
	}
	bn.progress(fmt.Sprintf("broker RSS %s before, %s with %d connections", mib(res.Before.RSS), mib(res.After.RSS), o.conns))
	bn.profile(ctx, "heap", "broker-heap.pprof")
	bn.profile(ctx, "goroutine", "broker-goroutine.pprof")
	return nil
}

// restart stops the broker (SIGTERM or SIGKILL), starts a new one on the
// same address once the old one is gone, and waits until every agent has
// associated again, each with pxp-agent's backoff.
func (bn *bench) restart(ctx context.Context) error {
	o, res, f := bn.o, bn.res, bn.f
	res.RestartSignal = map[string]string{"term": "SIGTERM", "kill": "SIGKILL"}[o.restart]
	bn.progress(fmt.Sprintf("restarting the broker (%s, then a new one on %s)", res.RestartSignal, bn.b.pcpAddr))
	f.errs.reset()
	attempts0, failures0 := f.attempts.Load(), f.failures.Load()
	m1 := mark(bn.b.pid)
	kill := time.Now()
	if o.restart == "kill" {
		bn.b.kill()
		res.RestartGraceful = true
	} else {
		res.RestartGraceful = bn.b.stop(10 * time.Second)
	}
	res.Shutdown = time.Since(kill)
	oldCPU := bn.b.cpuAtExit - m1.broker
	nb, err := bn.startBroker(ctx, bn.b.pcpAddr)
	if err != nil {
		return fmt.Errorf("restarting: %w", err)
	}
	bn.b = nb
	res.Listening = time.Since(kill)
	bn.cpuProfile(ctx, "broker-cpu-reassociate.pprof")
	n, err := waitFor(ctx, o.reassociateTimeout, o.progressEvery, o.conns, func() int {
		return min(f.associatedSince(kill), int(f.associated.Load()))
	}, func(n int) string {
		return fmt.Sprintf("re-associating: %d/%d associated again, %d failed tries", n, o.conns, f.failures.Load()-failures0)
	}, bn.progress)
	end := mark(nb.pid)
	bn.cpuProfile(ctx, "")
	res.Restart = m1.to(end)
	// The old broker's CPU until it exited, plus the new one's from its start.
	res.Restart.Broker = oldCPU + end.broker
	res.Restart.Others = max(0, (end.busy-m1.busy)-res.Restart.Broker-res.Restart.Driver)
	res.Reassociated = n
	res.ReassocAttempts, res.ReassocFailures = f.attempts.Load()-attempts0, f.failures.Load()-failures0
	res.Closes, res.ReassocErrors = f.closes.top(5), f.errs.top(5)
	after := f.associatedAfter(kill)
	for i, q := range []float64{0.5, 0.9, 0.99, 1} {
		if k := int(math.Ceil(q*float64(o.conns))) - 1; k < len(after) {
			res.ReassocCurve[i] = after[k]
		}
	}
	if err != nil {
		return fmt.Errorf("re-associating: %w: %d of %d in %s", err, n, o.conns, round(o.reassociateTimeout))
	}
	bn.progress(fmt.Sprintf("all %d associated again %s after %s", o.conns, round(res.Restart.Wall), res.RestartSignal))
	return nil
}

// finish samples the new broker with every agent back, and its counters.
func (bn *bench) finish(ctx context.Context) error {
	res, f := bn.res, bn.f
	if !sleep(ctx, 2*time.Second) {
		return ctx.Err()
	}
	var err error
	if res.AfterRestart, err = sampleBroker(ctx, bn.b); err != nil {
		return err
	}
	if st, err := bn.b.stats(ctx, false); err == nil {
		res.BrokerStatsAfter = st.Broker
	}
	if f.badFrames.Load() > 0 || f.others.Load() > 0 {
		res.Errors = append(res.Errors, fmt.Sprintf("agents received %d undecodable frames and %d unexpected messages",
			f.badFrames.Load(), f.others.Load()))
	}
	return nil
}

var errNotAll = errors.New("not every connection associated")

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

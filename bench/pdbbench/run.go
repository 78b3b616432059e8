package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/compilefarm/compilefarm/bench/internal/agentcert"
	"github.com/compilefarm/compilefarm/bench/internal/procstat"
	"github.com/compilefarm/compilefarm/pkg/admin"
	"github.com/compilefarm/compilefarm/pkg/querywatch"
)

// options are pdbbench's flags.
type options struct {
	brokerBin, agentsimBin string
	puppetDBDir            string
	benchDir               string
	work                   string
	workers                int
	prefix                 string

	agents        int           // bench/agentsim's herd
	steadyRounds  int           // herds of steady runs measured
	window        time.Duration // each steady herd's window
	backlogRounds int           // herds run while deliveries are held
	backlogWindow time.Duration

	factRounds    int   // fact changes timed to the dependent node's recompile
	querySizes    []int // distinct queries recorded, ascending
	nodesPerGroup int   // nodes making each query
	refreshRounds int   // refresh rounds timed per size
	progressEvery time.Duration
	phaseTimeout  time.Duration // bound on each wait
	concurrency   int           // agentsim's runs at once
}

// The environment and certname domain of every node.
const (
	environment = "production"
	domain      = "pdbbench.test"
)

// runner is one pdbbench run: the PuppetDB, the gate in front of it, the
// broker and the nodes.
type runner struct {
	o        options
	progress func(string)
	pdb      *pdbClient
	gate     *gate
	b        *broker
	admin    *admin.Client
	fleet    *fleet
	herd     *herd
	watched  *node // node A: its facts change; it ticks refresh rounds
	res      *Results
}

// run measures every phase against the PuppetDB in o.puppetDBDir; it
// returns what it measured, with the first phase error. A phase that
// fails is recorded in the results and the next one still runs.
func run(ctx context.Context, o options, progress func(string)) (*Results, error) {
	res := &Results{Started: time.Now().UTC(), Machine: machine()}
	p, err := readPuppetDBEnv(o.puppetDBDir)
	if err != nil {
		return res, err
	}
	r := &runner{o: o, progress: progress, pdb: newPDBClient(p), res: res}
	if res.PuppetDB.Version, err = r.pdb.version(ctx); err != nil {
		return res, fmt.Errorf("PuppetDB at %s: %w", p.URL, err)
	}
	if err := r.start(ctx, p); err != nil {
		return res, err
	}
	defer r.stop()
	phases := []struct {
		name string
		fn   func(context.Context) error
	}{
		{"refresh", r.refreshCost},
		{"fact change", r.factChange},
		{"steady", r.steady},
		{"backlog", r.backlog},
	}
	var first error
	for _, ph := range phases {
		if ctx.Err() != nil {
			break
		}
		load, _ := procstat.LoadAverage()
		res.Machine.PhaseLoad = append(res.Machine.PhaseLoad, PhaseLoad{Phase: ph.name, Load: load})
		progress(fmt.Sprintf("phase: %s (load average %s)", ph.name, load))
		if err := ph.fn(ctx); err != nil {
			err = fmt.Errorf("%s: %w", ph.name, err)
			progress("FAILED " + err.Error())
			res.Errors = append(res.Errors, err.Error())
			first = errors.Join(first, err)
		}
	}
	res.Machine.LoadAfter, _ = procstat.LoadAverage()
	if n, err := r.pdb.count(ctx, "nodes[count()] {}"); err == nil {
		res.PuppetDB.Nodes = n
	}
	if first == nil {
		first = ctx.Err()
	}
	return res, first
}

// start assembles the environment, starts the gate and the broker, and
// makes node A.
func (r *runner) start(ctx context.Context, p puppetDB) error {
	envs, err := assembleEnvironments(r.o.benchDir, filepath.Join(r.o.work, "environments"))
	if err != nil {
		return err
	}
	data := filepath.Join(r.o.work, "data")
	if err := copyCA(p, data); err != nil {
		return err
	}
	conf, err := p.gateTLS()
	if err != nil {
		return err
	}
	if r.gate, err = newGate(p.httpHostPort(), conf); err != nil {
		return err
	}
	args := []string{"--environments", envs, "--data", data, "--workers", strconv.Itoa(r.o.workers), "--autosign",
		"--puppetdb", "https://" + r.gate.Addr(), "--puppetdb-query-refresh", "1h"}
	r.progress("starting broker dev " + strings.Join(args, " "))
	if r.b, err = startBroker(ctx, r.o.brokerBin, filepath.Join(r.o.work, "broker.log"), args); err != nil {
		return err
	}
	r.res.Broker = "broker " + strings.Join(r.b.args, " ")
	r.progress(fmt.Sprintf("broker up (pid %d): front door https://%s, metrics %s; PuppetDB %s behind the gate https://%s",
		r.b.pid, r.b.addr, r.b.metrics, p.URL, r.gate.Addr()))
	r.admin = &admin.Client{Base: r.b.admin, HTTP: &http.Client{Timeout: time.Minute}}
	farm, err := agentcert.FetchCA(ctx, r.b.addr)
	if err != nil {
		return err
	}
	if r.fleet, err = newFleet(farm, environment, domain); err != nil {
		return err
	}
	r.herd = &herd{bin: r.o.agentsimBin, state: filepath.Join(r.o.work, "agentsim-state"), prefix: r.o.prefix, domain: domain,
		agents: r.o.agents, work: r.o.work, progressEvery: r.o.progressEvery}
	nodes, err := r.fleet.enrol(ctx, []string{r.o.prefix + "-watched." + domain})
	if err != nil {
		return err
	}
	r.watched = nodes[0]
	r.watched.extra["pdbbench_value"] = "0"
	r.watched.extra["pdbbench_tick"] = 0
	return r.fleet.uploadAll(ctx, nodes)
}

func (r *runner) stop() {
	if r.b != nil {
		r.b.stop()
	}
	if r.gate != nil {
		r.gate.Close()
	}
}

// waitFor polls cond every `every` until it holds, at most limit, with a
// progress line every progressEvery; the error names what.
func (r *runner) waitFor(ctx context.Context, what string, limit, every time.Duration, cond func() (bool, string, error)) error {
	start := time.Now()
	lastSaid := start
	for {
		ok, state, err := cond()
		if err != nil {
			return fmt.Errorf("waiting for %s: %w", what, err)
		}
		if ok {
			return nil
		}
		if time.Since(start) > limit {
			return fmt.Errorf("%s: not within %s (%s)", what, limit, state)
		}
		if time.Since(lastSaid) >= r.o.progressEvery {
			r.progress(fmt.Sprintf("waiting for %s: %s, %.0fs", what, state, time.Since(start).Seconds()))
			lastSaid = time.Now()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(every):
		}
	}
}

// waitSettled waits until the compile queue is empty and the outbox has
// delivered everything.
func (r *runner) waitSettled(ctx context.Context) error {
	return r.waitFor(ctx, "the compile queue and the outbox to drain", r.o.phaseTimeout, 200*time.Millisecond, func() (bool, string, error) {
		s, err := r.b.scrape(ctx)
		if err != nil {
			return false, "", err
		}
		busy, backlog := s.QueueBusy(), s[mBacklog]
		return busy == 0 && backlog == 0, fmt.Sprintf("%.0f compiles queued or running, %.0f commands in the outbox", busy, backlog), nil
	})
}

// quietFor is how long no refresh round may start for the refresher to be
// idle: a delivered command starts one querywatch.DefaultDebounce later.
const quietFor = querywatch.DefaultDebounce + 3*time.Second

// waitQuiet waits until everything is delivered and compiled and no
// refresh round is due: none has started or finished for quietFor.
func (r *runner) waitQuiet(ctx context.Context) error {
	if err := r.waitSettled(ctx); err != nil {
		return err
	}
	var last float64 = -1
	since := time.Now()
	return r.waitFor(ctx, "the query refresher to be idle", r.o.phaseTimeout, 500*time.Millisecond, func() (bool, string, error) {
		s, err := r.b.scrape(ctx)
		if err != nil {
			return false, "", err
		}
		if n := s[mRoundsCount]; n != last || s[mBacklog] != 0 {
			last, since = n, time.Now()
		}
		return time.Since(since) >= quietFor, fmt.Sprintf("%.0f rounds so far", last), nil
	})
}

// brokerCPU is the broker's CPU seconds (its process, not its workers).
func (r *runner) brokerCPU() float64 {
	st, err := procstat.ReadStat(r.b.pid)
	if err != nil {
		return 0
	}
	return st.CPU
}

// machine describes this machine for the report.
func machine() Machine {
	m := Machine{CPUs: runtime.NumCPU(), Go: runtime.Version()}
	m.CPU, _ = procstat.CPUModel()
	if b, err := procstat.MemTotal(); err == nil {
		m.MemGiB = float64(b) / (1 << 30)
	}
	m.Kernel, _ = procstat.KernelRelease()
	m.LoadBefore, _ = procstat.LoadAverage()
	return m
}

// workDir makes o.work when it is empty: a temporary directory the caller
// removes.
func workDir(o *options) (cleanup func(), err error) {
	if o.work != "" {
		return func() {}, os.MkdirAll(o.work, 0o755)
	}
	if o.work, err = os.MkdirTemp("", "pdbbench-"); err != nil {
		return nil, err
	}
	dir := o.work
	return func() { os.RemoveAll(dir) }, nil
}

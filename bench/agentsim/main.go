// Command agentsim simulates a fleet of Puppet 7 agents against a
// compilefarm front door, on loopback only, doing in each run what the real
// agent does (puppet agent 7.23.0, recorded in /work/shared/puppet-protocol):
//
//  1. a new TLS connection with the agent's own certificate (mTLS, full
//     handshake), kept alive for the run's requests;
//  2. GET /puppet/v3/node/NAME, on an agent's first run (--node-request:
//     agents skip it while their last-run summary exists);
//  3. pluginsync: GET file_metadatas/plugins (no recursion), pluginfacts,
//     plugins (recursive), and locales with --locales;
//  4. POST /puppet/v3/catalog/NAME with the recorded agent's ~120 facts,
//     form-encoded as the agent does (facts encoded twice), where only what
//     facter measures at each run changes: the document's timestamp and
//     expiration, uptime, memory and filesystem usage, load averages
//     (internal/corpus.Churn);
//  5. GET file_metadata (file_metadatas for a recursive directory) for the
//     catalog's puppet:/// sources, at most --max-file-requests: those
//     whose metadata a static catalog inlines only with --file-metadata
//     always (the agent, its files in place, asks nothing for them);
//  6. PUT /puppet/v3/report/NAME: the recorded report's fields, status
//     unchanged, a resource status per resource of the served catalog.
//
// A 429 or 503 with Retry-After is retried as Puppet 7 does: after sleeping
// Retry-After, at most runinterval, up to 100 times a request. Retries are
// counted apart; a run fails when one of its requests fails for good.
//
// Agents enrol through the Puppet CA API first (ECDSA P-256 keys, which the
// CA signs; the broker must autosign); --state DIR keeps their identities so
// later invocations against the same CA reuse them, and their run numbers
// (runs.json), so that a later invocation's runs send the facts of later
// runs (uptime grown, memory and load moved), not an earlier one's again.
//
// Modes:
//
//   - herd: every agent runs once, the start times spread evenly over
//     --window, at most --concurrency runs at once; --rounds herds in a row.
//   - steady: each agent runs every --runinterval after a random --splay,
//     like the puppet agent daemon, for --duration.
//
// Before them, --warmup runs every agent once and waits for the broker's
// compile queue to drain, so that the measured rounds see a farm whose
// nodes have catalogs (a fresh farm compiles every node at its first run).
//
// Per round it reports runs, runs/s, failed runs with the first errors,
// retries, p50/p99/max per request type and per run; with --metrics, the
// compiles the round caused (after the queue drained) and the broker's
// counters; with --broker-pid, the broker's CPU (and its compile workers')
// per run and per catalog request, its RSS and open descriptors before,
// at peak (sampled every second) and after. As text on stdout, --json and
// --markdown.
//
//	agentsim --target 127.0.0.1:8140 --metrics http://127.0.0.1:9140/metrics --broker-pid PID \
//	  --mode herd --agents 10000 --window 60s --state /tmp/agentsim-state
//	agentsim --target 127.0.0.1:8140 --metrics http://127.0.0.1:9140/metrics --broker-pid PID \
//	  --mode steady --agents 2000 --runinterval 5m --duration 15m --state /tmp/agentsim-state
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/compilefarm/compilefarm/bench/internal/agentcert"
	"github.com/compilefarm/compilefarm/bench/internal/loopback"
)

// options are agentsim's flags.
type options struct {
	target, metricsURL string
	brokerPID          int
	mode               string // herd or steady
	agents             int
	window             time.Duration // herd
	rounds             int           // herd
	duration, splay    time.Duration // steady
	warmup             bool
	prefix, domain     string
	state              string
	key                string
	enrolParallel      int
	fileMetadata       string // static or always
	sim                simConfig
	progressEvery      time.Duration
}

func main() {
	o, jsonPath, mdPath, timeout, err := parseFlags(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "agentsim:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	progress := func(s string) { fmt.Fprintf(os.Stderr, "agentsim: %s\n", s) }
	// The simulator's heap is small and short-lived (a run's catalog and
	// report): collecting less often halves its CPU, which it shares with
	// the broker it measures.
	debug.SetGCPercent(400)
	res, err := simulate(ctx, o, progress)
	if res != nil {
		res.Command = strings.Join(os.Args, " ")
		res.writeText(os.Stdout)
		err = errors.Join(err, writeTo(jsonPath, res.writeJSON), writeTo(mdPath, res.writeMarkdown))
		if n := res.failures(); n > 0 && err == nil {
			err = fmt.Errorf("%d runs failed", n)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "agentsim:", err)
		os.Exit(1)
	}
}

// parseFlags reads and checks the command line.
func parseFlags(args []string) (o options, jsonPath, mdPath string, timeout time.Duration, err error) {
	fs := flag.NewFlagSet("agentsim", flag.ContinueOnError)
	fs.StringVar(&o.target, "target", "127.0.0.1:8140", "front door host:port (loopback only: 127.0.0.0/8, ::1 or localhost)")
	fs.StringVar(&o.metricsURL, "metrics", "", "the broker's /metrics URL (loopback): compiles per round, its counters, its CPU when no --broker-pid")
	fs.IntVar(&o.brokerPID, "broker-pid", 0, "the broker's process id: its CPU (and its compile workers') from /proc, RSS and open descriptors")
	fs.StringVar(&o.mode, "mode", "herd", "herd (every agent once within --window) or steady (every --runinterval, for --duration)")
	fs.IntVar(&o.agents, "agents", 100, "simulated agents, each with its own certificate")
	fs.DurationVar(&o.window, "window", 10*time.Second, "herd: the runs' start times spread evenly over this")
	fs.IntVar(&o.rounds, "rounds", 1, "herd: herds in a row, each measured")
	fs.DurationVar(&o.sim.runinterval, "runinterval", 30*time.Minute, "the agents' runinterval: steady's period, the longest Retry-After sleep, the facts' expiration")
	fs.DurationVar(&o.splay, "splay", -1, "steady: the longest random wait before an agent's first run (Puppet's splaylimit; default --runinterval)")
	fs.DurationVar(&o.duration, "duration", 10*time.Minute, "steady: runs start within this")
	fs.IntVar(&o.sim.concurrency, "concurrency", 256, "runs at once, at most")
	fs.BoolVar(&o.warmup, "warmup", true, "run every agent once first (not measured as a round of the mode) and wait for the compile queue to drain (needs --metrics to wait)")
	fs.StringVar(&o.sim.env, "environment", "production", "the agents' environment")
	fs.StringVar(&o.prefix, "prefix", "", "certname prefix: certnames are PREFIX-NNNNN.DOMAIN (default: agentsim with --state, else as-<time>)")
	fs.StringVar(&o.domain, "domain", "agentsim.test", "certname domain")
	fs.StringVar(&o.state, "state", "", "directory keeping the agents' keys and certificates, and their run numbers, for later invocations against the same CA")
	fs.StringVar(&o.key, "key", agentcert.KeyECDSA, "agent key type: ecdsa (P-256) or rsa (2048)")
	fs.IntVar(&o.enrolParallel, "enrol-concurrency", 16, "enrolments at once")
	fs.StringVar(&o.sim.nodeRequest, "node-request", "first", "when a run asks for its node: first (an agent's first run in this invocation, as an agent without a last-run summary), always, never")
	fs.BoolVar(&o.sim.locales, "locales", false, "pluginsync the locales mount too (agents with disable_i18n=false)")
	fs.StringVar(&o.fileMetadata, "file-metadata", "static", "static: no file_metadata for sources a static catalog inlines, as the agent; always: ask for every puppet:/// source")
	fs.IntVar(&o.sim.maxFiles, "max-file-requests", 20, "file metadata requests per run, at most")
	fs.DurationVar(&o.sim.requestTimeout, "request-timeout", 5*time.Minute, "bound on one HTTP request (the broker may hold a first catalog request for --first-compile-wait)")
	fs.DurationVar(&o.progressEvery, "progress", 5*time.Second, "progress lines on stderr this often")
	fs.StringVar(&jsonPath, "json", "", "write the results as JSON to FILE (- for stdout)")
	fs.StringVar(&mdPath, "markdown", "", "write the results as Markdown tables to FILE (- for stdout)")
	fs.DurationVar(&timeout, "timeout", 3*time.Hour, "bound on the whole invocation")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: agentsim --target 127.0.0.1:PORT [--metrics URL] [--broker-pid PID] [flags]\n\n"+
			"Simulates Puppet 7 agents' runs against a compilefarm front door (loopback only).\n\n")
		fs.PrintDefaults()
	}
	if err = fs.Parse(args); err != nil {
		return
	}
	if fs.NArg() > 0 {
		err = fmt.Errorf("unexpected arguments %q", fs.Args())
		return
	}
	if o.splay < 0 {
		o.splay = o.sim.runinterval
	}
	if o.prefix == "" {
		o.prefix = "agentsim"
		if o.state == "" {
			// Without --state a certname is used once: the CA refuses a
			// second CSR for a name it signed.
			o.prefix = "as-" + strconv.FormatInt(time.Now().Unix(), 36)
		}
	}
	o.sim.askInlined = o.fileMetadata == "always"
	err = o.check()
	return
}

// check refuses options out of their bounds.
func (o *options) check() error {
	if err := loopback.Check("--target", o.target); err != nil {
		return err
	}
	if o.metricsURL != "" {
		if err := loopback.CheckURL("--metrics", o.metricsURL); err != nil {
			return err
		}
	}
	switch {
	case o.mode != "herd" && o.mode != "steady":
		return fmt.Errorf("--mode %q: want herd or steady", o.mode)
	case o.agents < 1 || o.agents > 100_000:
		return fmt.Errorf("--agents must be between 1 and 100000")
	case o.window < 0 || o.window > 24*time.Hour:
		return fmt.Errorf("--window must be between 0 and 24h")
	case o.rounds < 1 || o.rounds > 100:
		return fmt.Errorf("--rounds must be between 1 and 100")
	case o.sim.runinterval < time.Second || o.sim.runinterval > 24*time.Hour:
		return fmt.Errorf("--runinterval must be between 1s and 24h")
	case o.splay > 24*time.Hour:
		return fmt.Errorf("--splay must be at most 24h")
	case o.duration <= 0 || o.duration > 7*24*time.Hour:
		return fmt.Errorf("--duration must be between 0 and 168h")
	case o.sim.concurrency < 1 || o.sim.concurrency > 10_000:
		return fmt.Errorf("--concurrency must be between 1 and 10000")
	case o.key != agentcert.KeyECDSA && o.key != agentcert.KeyRSA:
		return fmt.Errorf("--key %q: want ecdsa or rsa", o.key)
	case o.enrolParallel < 1 || o.enrolParallel > 256:
		return fmt.Errorf("--enrol-concurrency must be between 1 and 256")
	case o.sim.nodeRequest != "first" && o.sim.nodeRequest != "always" && o.sim.nodeRequest != "never":
		return fmt.Errorf("--node-request %q: want first, always or never", o.sim.nodeRequest)
	case o.fileMetadata != "static" && o.fileMetadata != "always":
		return fmt.Errorf("--file-metadata %q: want static or always", o.fileMetadata)
	case o.sim.maxFiles < 0 || o.sim.maxFiles > 10_000:
		return fmt.Errorf("--max-file-requests must be between 0 and 10000")
	case o.sim.requestTimeout < time.Second:
		return fmt.Errorf("--request-timeout must be at least 1s")
	case o.progressEvery < time.Second:
		return fmt.Errorf("--progress must be at least 1s")
	case strings.ContainsAny(o.prefix+o.domain, "/\\ "):
		return fmt.Errorf("--prefix and --domain make certnames: no slashes or spaces")
	}
	return nil
}

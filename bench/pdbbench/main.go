// Command pdbbench measures what feeding a site's PuppetDB costs the farm,
// against a real PuppetDB on loopback (scripts/puppetdb.sh start DIR;
// --puppetdb-dir DIR): it starts `broker dev --puppetdb` with PuppetDB's CA
// as the farm's, reaching PuppetDB over https through a TCP gate of its
// own, and measures, in this order:
//
//  1. the query refresh's cost: nodes in --query-sizes groups (for each
//     size, the groups added to the last), each listing its group's
//     members with puppetdb_query(); rounds started by a delivered
//     command, their time and queries from the broker's metrics, and
//     PuppetDB's own time for each distinct query;
//  2. a fact change to the dependent node's recompile: node A's fact
//     changes, its replace facts is delivered, the refresher's round finds
//     node B's query answering otherwise, B recompiles; --fact-rounds
//     times, each split into its steps;
//  3. the commands sent per 1,000 steady agent runs: bench/agentsim's
//     agents (--agentsim: its executable) run once, then --steady-rounds
//     herds of them; the commands queued, by command, from the broker's
//     metrics;
//  4. commands delivered per second: the gate holds the farm's traffic to
//     PuppetDB during --backlog-rounds more herds, then lets it through;
//     the time until the outbox is empty, and until PuppetDB holds every
//     report.
//
// Every wait is bounded (--phase-timeout) and so is the whole run
// (--timeout); a phase that fails is reported and the next one runs. The
// results go to --markdown (docs/benchmarks.md's section), --json and,
// summarised, stderr, with progress lines; pdbbench exits non-zero when a
// phase failed, after writing them. Everything stays on loopback.
//
//	go build -o agentsim ./bench/agentsim
//	pdbbench --puppetdb-dir DIR --broker bin/broker --agentsim ./agentsim --markdown pdb.md
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	o, jsonPath, mdPath, timeout, err := parseFlags(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "pdbbench:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cleanup, err := workDir(&o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "pdbbench: work directory:", err)
		os.Exit(1)
	}
	defer cleanup()
	progress := func(s string) { fmt.Fprintf(os.Stderr, "pdbbench: %s\n", s) }
	res, err := run(ctx, o, progress)
	res.Command = commandLine(os.Args)
	if err != nil && len(res.Errors) == 0 {
		// Not a phase's (those are in the results): the run stopped.
		res.Errors = append(res.Errors, err.Error())
	}
	res.writeText(os.Stderr)
	if werr := errors.Join(writeFile(mdPath, res.writeMarkdown), writeFile(jsonPath, res.writeJSON)); werr != nil {
		fmt.Fprintln(os.Stderr, "pdbbench:", werr)
		err = werr
	}
	if err != nil {
		cleanup()
		os.Exit(1)
	}
}

// parseFlags reads and checks the command line.
func parseFlags(args []string) (o options, jsonPath, mdPath string, timeout time.Duration, err error) {
	fs := flag.NewFlagSet("pdbbench", flag.ContinueOnError)
	fs.StringVar(&o.puppetDBDir, "puppetdb-dir", os.Getenv("COMPILEFARM_PUPPETDB_DIR"), "the PuppetDB's directory (scripts/puppetdb.sh start DIR): its env file says where it is")
	fs.StringVar(&o.brokerBin, "broker", "bin/broker", "the broker executable")
	fs.StringVar(&o.agentsimBin, "agentsim", "", "bench/agentsim's executable (go build -o agentsim ./bench/agentsim)")
	fs.StringVar(&o.benchDir, "bench-dir", "bench", "the checkout's bench directory: the benchmark environment and the herd's counts")
	fs.StringVar(&o.work, "work", "", "directory for the broker's data, environment and log, and the agents' state (default: a temporary one, removed)")
	fs.IntVar(&o.workers, "workers", runtime.NumCPU(), "the broker's compile workers")
	fs.StringVar(&o.prefix, "prefix", "", "certname prefix, unique per run: PuppetDB keeps earlier runs' nodes (default pdb<time>)")
	fs.IntVar(&o.agents, "agents", 100, "agents in bench/agentsim's herds")
	fs.IntVar(&o.steadyRounds, "steady-rounds", 10, "herds of steady runs counted (--agents × this runs)")
	fs.DurationVar(&o.window, "window", 5*time.Second, "each steady herd's runs start within this")
	fs.IntVar(&o.backlogRounds, "backlog-rounds", 5, "herds run while PuppetDB is held, building the backlog")
	fs.DurationVar(&o.backlogWindow, "backlog-window", 3*time.Second, "each backlog herd's runs start within this")
	fs.IntVar(&o.concurrency, "concurrency", 32, "agent runs at once, at most")
	fs.IntVar(&o.factRounds, "fact-rounds", 5, "fact changes timed to the dependent node's recompile")
	sizes := fs.String("query-sizes", "10,100", "distinct queries recorded for the refresh's cost, ascending (comma separated)")
	fs.IntVar(&o.nodesPerGroup, "nodes-per-group", 2, "nodes making each distinct query")
	fs.IntVar(&o.refreshRounds, "refresh-rounds", 3, "refresh rounds timed per size")
	fs.DurationVar(&o.progressEvery, "progress", 10*time.Second, "progress lines on stderr this often while waiting")
	fs.DurationVar(&o.phaseTimeout, "phase-timeout", 10*time.Minute, "bound on each wait (a drain, a recompile)")
	fs.StringVar(&jsonPath, "json", "", "write the results as JSON to FILE (- for stdout)")
	fs.StringVar(&mdPath, "markdown", "", "write docs/benchmarks.md's section to FILE (- for stdout)")
	fs.DurationVar(&timeout, "timeout", 30*time.Minute, "bound on the whole run")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: pdbbench --puppetdb-dir DIR --agentsim PATH [flags]\n\n"+
			"Measures the farm's PuppetDB sink and query refresh against a real PuppetDB (loopback only).\n\n")
		fs.PrintDefaults()
	}
	if err = fs.Parse(args); err != nil {
		return
	}
	if fs.NArg() > 0 {
		err = fmt.Errorf("unexpected arguments %q", fs.Args())
		return
	}
	if o.querySizes, err = parseSizes(*sizes); err != nil {
		return
	}
	if o.prefix == "" {
		o.prefix = "pdb" + strconv.FormatInt(time.Now().Unix(), 36)
	}
	err = o.check()
	return
}

// parseSizes reads --query-sizes: positive, ascending, at most 10,000.
func parseSizes(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > 10_000 {
			return nil, fmt.Errorf("--query-sizes %q: want numbers from 1 to 10000", s)
		}
		if len(out) > 0 && n <= out[len(out)-1] {
			return nil, fmt.Errorf("--query-sizes %q: want them ascending", s)
		}
		out = append(out, n)
	}
	return out, nil
}

// check refuses options out of their bounds.
func (o *options) check() error {
	switch {
	case o.puppetDBDir == "":
		return fmt.Errorf("--puppetdb-dir (or COMPILEFARM_PUPPETDB_DIR) is required: start a PuppetDB with scripts/puppetdb.sh start DIR")
	case o.agentsimBin == "":
		return fmt.Errorf("--agentsim is required: go build -o agentsim ./bench/agentsim")
	case o.workers < 1 || o.workers > 64:
		return fmt.Errorf("--workers must be between 1 and 64")
	case o.agents < 1 || o.agents > 10_000:
		return fmt.Errorf("--agents must be between 1 and 10000")
	case o.steadyRounds < 1 || o.steadyRounds > 100, o.backlogRounds < 1 || o.backlogRounds > 100:
		return fmt.Errorf("--steady-rounds and --backlog-rounds must be between 1 and 100")
	case o.window < 0 || o.window > time.Hour, o.backlogWindow < 0 || o.backlogWindow > time.Minute:
		return fmt.Errorf("--window must be at most 1h, --backlog-window at most 1m (the gate must not hold longer than PuppetDB's client waits)")
	case o.concurrency < 1 || o.concurrency > 1000:
		return fmt.Errorf("--concurrency must be between 1 and 1000")
	case o.factRounds < 1 || o.factRounds > 100, o.refreshRounds < 1 || o.refreshRounds > 100:
		return fmt.Errorf("--fact-rounds and --refresh-rounds must be between 1 and 100")
	case o.nodesPerGroup < 1 || o.nodesPerGroup > 100:
		return fmt.Errorf("--nodes-per-group must be between 1 and 100")
	case o.progressEvery < time.Second, o.phaseTimeout < time.Minute:
		return fmt.Errorf("--progress must be at least 1s and --phase-timeout at least 1m")
	case strings.ContainsAny(o.prefix, "/\\ .'\""):
		return fmt.Errorf("--prefix makes certnames and query values: no slashes, dots, quotes or spaces")
	}
	return nil
}

// commandLine is the command as the report shows it: the executable's
// base name and the flags.
func commandLine(args []string) string {
	out := []string{"pdbbench"}
	for _, a := range args[1:] {
		if strings.ContainsAny(a, " '\"") {
			a = "'" + a + "'"
		}
		out = append(out, a)
	}
	return strings.Join(out, " ")
}

// writeFile writes with fn to path ("-" for stdout); nothing for "".
func writeFile(path string, fn func(io.Writer) error) error {
	switch path {
	case "":
		return nil
	case "-":
		return fn(os.Stdout)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := fn(f); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	return f.Close()
}

// Command pcpbench measures compilefarm's PCP broker (pkg/pcp/broker)
// holding many concurrent PCP connections on loopback: the memory each
// connection costs the broker, the messages it routes per second, and the
// time every client takes to associate again after a broker restart.
//
//	pcpbench run --conns 10000 [--duration 10s] [--out FILE]
//
// run (the driver) makes a throwaway CA and a client certificate per
// connection, starts `pcpbench serve` (its own executable) as the broker
// process, and then:
//
//  1. opens --conns PCP v1 connections as pxp-agent does (wss://ADDR/pcp/,
//     TLS with the client's certificate, an associate_request), at most
//     --dial-concurrency dials at a time, and times until all are
//     associated; the broker's RSS (/proc/PID/status), open descriptors and
//     goroutines, and its Go heap and stacks after a collection, before and
//     after, give the memory per connection;
//  2. connects --controllers PXP controllers, each keeping --inflight echo
//     requests (rpc_blocking_request) in flight to random agents for
//     --duration; the agents answer with rpc_blocking_response: messages
//     routed per second and the round trips' p50/p99;
//  3. stops the broker with SIGTERM (--restart kill: SIGKILL), starts a new
//     one on the same address once it is gone, and times until every agent
//     has associated again, each reconnecting with pxp-agent's backoff;
//
// with the broker's CPU time (/proc/PID/stat), the driver's and the rest of
// the machine's per phase. Progress goes to stderr; the result, a Markdown
// section of docs/benchmarks.md, to stdout or --out; --profile DIR keeps
// the broker's CPU profile of each phase and its heap. Every phase has a
// timeout and the whole run --timeout (3m; 10,000 connections take one to
// two minutes on 2 cores); run exits non-zero when a phase does not
// complete, after writing what it measured. It raises its open-files soft
// limit to the hard limit and refuses to start when that is too low for
// --conns.
//
//	pcpbench serve --listen 127.0.0.1:0 --certs DIR
//
// serve runs the broker alone in its process, so that its RSS and CPU are
// its own: TLS 1.2 or later with client certificates required and verified
// against DIR/ca.pem, and a plain-HTTP status endpoint on loopback (GET
// /stats: the broker's Stats, goroutines, heap). It prints "pcpbench
// serve: pcp=ADDR status=ADDR pid=PID" once listening and runs until
// SIGTERM. `make bench` runs pcpbench through bench/run.sh
// (PCPBENCH_CONNS, default 10000).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		usage()
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "run":
		err = runMain(os.Args[2:])
	case "serve":
		err = serveMain(os.Args[2:])
	case "-h", "-help", "--help", "help":
		usage()
		return
	default:
		usage()
		os.Exit(2)
	}
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "pcpbench:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprint(os.Stderr, "usage: pcpbench run --conns N [--duration D] [--out FILE] [flags]\n"+
		"       pcpbench serve --listen 127.0.0.1:0 --certs DIR [flags]\n"+
		"`pcpbench run -h` and `pcpbench serve -h` list the flags.\n")
}

// runMain is `pcpbench run`.
func runMain(args []string) error {
	var o runOptions
	var out string
	var timeout time.Duration
	fs := flag.NewFlagSet("pcpbench run", flag.ContinueOnError)
	fs.IntVar(&o.conns, "conns", 10000, "agent connections to hold, each with its own certificate")
	fs.IntVar(&o.dialConcurrency, "dial-concurrency", 200, "first connections dialled at once, at most")
	fs.IntVar(&o.controllers, "controllers", 4, "PXP controllers sending echo requests in the routing phase")
	fs.IntVar(&o.inflight, "inflight", 32, "echo requests each controller keeps in flight")
	fs.DurationVar(&o.duration, "duration", 10*time.Second, "the routing phase's length")
	fs.DurationVar(&o.connectTimeout, "connect-timeout", 60*time.Second, "bound on associating every connection")
	fs.DurationVar(&o.reassociateTimeout, "reassociate-timeout", 60*time.Second, "bound on every connection associating again after the restart")
	fs.DurationVar(&timeout, "timeout", 3*time.Minute, "bound on the whole run")
	fs.DurationVar(&o.progressEvery, "progress", 2*time.Second, "progress lines on stderr this often")
	fs.StringVar(&o.logLevel, "broker-log-level", "info", "the broker's log level (its log is kept only with --broker-log)")
	fs.StringVar(&o.keepLog, "broker-log", "", "copy the broker's log (both processes') to FILE at the end")
	fs.StringVar(&o.restart, "restart", "term", "how the broker is stopped before the new one starts: term (SIGTERM: it closes every connection, 1001) or kill (SIGKILL: a crash)")
	fs.StringVar(&o.profileDir, "profile", "", "save Go profiles into DIR: the broker's CPU while associating, routing and re-associating, its heap and goroutines with all connections, and the driver's CPU (driver-cpu.pprof)")
	fs.StringVar(&out, "out", "", "write the Markdown section to FILE (default stdout)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	switch {
	case fs.NArg() > 0:
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	case o.conns < 1 || o.conns > 100_000:
		return errors.New("--conns must be between 1 and 100000")
	case o.dialConcurrency < 1 || o.dialConcurrency > 10_000:
		return errors.New("--dial-concurrency must be between 1 and 10000")
	case o.controllers < 1 || o.controllers > 100:
		return errors.New("--controllers must be between 1 and 100")
	case o.inflight < 1 || o.inflight > 10_000:
		return errors.New("--inflight must be between 1 and 10000")
	case o.duration < 100*time.Millisecond || o.duration > time.Hour:
		return errors.New("--duration must be between 100ms and 1h")
	case o.connectTimeout < time.Second || o.reassociateTimeout < time.Second || timeout < time.Second:
		return errors.New("--connect-timeout, --reassociate-timeout and --timeout must be at least 1s")
	case o.restart != "term" && o.restart != "kill":
		return fmt.Errorf("--restart %q: want term or kill", o.restart)
	case o.progressEvery < 100*time.Millisecond:
		return errors.New("--progress must be at least 100ms")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	// The driver shares the CPUs with the broker it measures: collecting
	// less often leaves the broker more of them.
	debug.SetGCPercent(400)
	progress := func(s string) { fmt.Fprintf(os.Stderr, "pcpbench: %s\n", s) }
	if o.profileDir != "" {
		dir, stopProfile, err := profileDriver(o.profileDir)
		if err != nil {
			return err
		}
		defer stopProfile()
		o.profileDir = dir
	}
	res, err := run(ctx, o, progress)
	if err != nil && ctx.Err() == context.DeadlineExceeded {
		err = fmt.Errorf("%w (the whole run is bounded by --timeout %s)", err, timeout)
	}
	if err != nil {
		res.Failed = err.Error()
	}
	res.Command = "pcpbench run " + strings.Join(args, " ")
	res.writeText(os.Stderr)
	w := os.Stdout
	if out != "" {
		f, ferr := os.Create(out)
		if ferr != nil {
			return errors.Join(err, ferr)
		}
		defer f.Close()
		w = f
	}
	res.writeMarkdown(w)
	return err
}

// profileDriver creates dir, makes it absolute (the broker process writes
// there too) and profiles this process's CPU into dir/driver-cpu.pprof
// until stop.
func profileDriver(dir string) (abs string, stop func(), err error) {
	if abs, err = filepath.Abs(dir); err != nil {
		return "", nil, err
	}
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return "", nil, err
	}
	f, err := os.Create(filepath.Join(abs, "driver-cpu.pprof"))
	if err != nil {
		return "", nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return "", nil, err
	}
	return abs, func() { pprof.StopCPUProfile(); f.Close() }, nil
}

// Command scalebench measures how the farm's control paths scale with the
// number of nodes: nodes created through the intake (a facts upload each),
// a code deploy, `code status` and `release status` over all of them, the
// store reads of one compile as the node count grows, and what one
// changed exported resource costs. It counts store calls with decorators
// around the stores each component is given (and AWS calls with
// pkg/awscalls), and reports numbers, never a verdict on time.
//
// Three parts, each optional:
//
//  1. the embedded store (pkg/localstore, as broker dev wires it): nodes
//     created up to each of --sizes, --samples compiles with the real
//     Puppet engine at each size, then the deploy, status, release status
//     and unchanged check-ins at the largest;
//  2. the same on the AWS drivers (pkg/dynamostate, pkg/s3store,
//     pkg/sqsqueue) against the emulators on loopback (--aws-sizes), with
//     the DynamoDB calls of each operation, Scan included;
//  3. exported resources (--export-sizes): every node exports its host
//     entry and collects those of its /28 (testdata/environments/exports);
//     one node's IP address changes, and the collectors it queues (every
//     node that collects the type) are compiled, a sample of them.
//
// Everything runs on loopback in one process, in a work directory made in
// --tmpdir and removed at the end (unless --work names one). The stores
// write there: on tmpfs (--tmpdir /dev/shm, as make bench runs it) a synced
// write costs nothing, so what is measured is the farm's own work; the
// report gives the cost of a synced write there and on disk. Progress goes
// to stderr every few seconds; the results to stdout as Markdown, and to
// --markdown and --json files. Numbers only: no verdict on any time.
//
//	go run ./bench/scalebench --tmpdir /dev/shm --sizes 1000,10000,100000 --aws-sizes 1000,10000 --export-sizes 2000 --markdown /tmp/scale.md
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/compilefarm/compilefarm/pkg/compiler/puppet"
)

// config is the command line.
type config struct {
	sizes, awsSizes, exportSizes []int
	samples, collectorSample     int
	workers, concurrency         int
	checkins                     int
	work, tmpdir                 string
	markdown, json               string
	timeout                      time.Duration
	ruby                         string
	environments, exportsEnvs    string
	facts                        string
	logLevel                     string
	cpuProfile                   string
	args                         []string
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg, err := parseFlags(os.Args[1:], os.Stderr)
	if err == nil {
		err = run(ctx, cfg, os.Stdout, os.Stderr)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "scalebench:", err)
		os.Exit(1)
	}
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	c := config{args: args}
	fs := flag.NewFlagSet("scalebench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	sizes := fs.String("sizes", "1000,10000,100000", "embedded store: node counts at which compiles are sampled; nodes are created up to the last (\"\": skip the part)")
	awsSizes := fs.String("aws-sizes", "1000,10000", "AWS drivers on the emulators: the same (\"\": skip the part)")
	exportSizes := fs.String("export-sizes", "2000", "exported resources: node counts, each a fresh store whose nodes all export and collect (\"\": skip the part)")
	fs.IntVar(&c.samples, "samples", 20, "compiles with the real engine at each size")
	fs.IntVar(&c.collectorSample, "collector-sample", 100, "exported resources: collector recompiles to run with the real engine at each size (0: all of them)")
	fs.IntVar(&c.workers, "workers", runtime.NumCPU(), "compile workers (Ruby Puppet processes)")
	fs.IntVar(&c.concurrency, "concurrency", 8, "fact uploads submitted at once while creating nodes")
	fs.IntVar(&c.checkins, "checkins", 1000, "check-ins with unchanged facts timed after the deploy")
	fs.StringVar(&c.work, "work", "", "work directory, kept afterwards (default: a temporary directory in --tmpdir, removed at the end)")
	fs.StringVar(&c.tmpdir, "tmpdir", "", "where the temporary work directory is made (default: $TMPDIR or /tmp); /dev/shm keeps the stores in memory")
	fs.StringVar(&c.markdown, "markdown", "", "also write the results as a section for docs/benchmarks.md to FILE")
	fs.StringVar(&c.json, "json", "", "also write the results as JSON to FILE")
	fs.DurationVar(&c.timeout, "timeout", 3*time.Hour, "bound on the whole run")
	fs.StringVar(&c.ruby, "ruby", "ruby", "Ruby interpreter with Puppet 7")
	fs.StringVar(&c.environments, "environments", "", "environmentpath of parts 1 and 2 (default: the checkout's bench/environments)")
	fs.StringVar(&c.exportsEnvs, "exports-environments", "", "environmentpath holding the exports environment (default: bench/scalebench/testdata/environments)")
	fs.StringVar(&c.facts, "facts", "", "template facts document (default: testdata/puppet-protocol/facts-agent1.json)")
	fs.StringVar(&c.logLevel, "log-level", "warn", "the farm's log level: debug, info, warn or error")
	fs.StringVar(&c.cpuProfile, "cpuprofile", "", "write a CPU profile of the whole run to FILE (go tool pprof)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: scalebench [flags]\n\nMeasures deploys, status and per-compile store reads as the node count grows (loopback only).\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	var err error
	if c.sizes, err = parseSizes(*sizes); err != nil {
		return c, fmt.Errorf("--sizes: %w", err)
	}
	if c.awsSizes, err = parseSizes(*awsSizes); err != nil {
		return c, fmt.Errorf("--aws-sizes: %w", err)
	}
	if c.exportSizes, err = parseSizes(*exportSizes); err != nil {
		return c, fmt.Errorf("--export-sizes: %w", err)
	}
	for _, n := range c.exportSizes {
		if n < 3 {
			return c, fmt.Errorf("--export-sizes: %d: at least 3 nodes (an exporter, a collector compiled fresh, and others)", n)
		}
	}
	switch {
	case c.samples < 1:
		return c, fmt.Errorf("--samples must be at least 1")
	case c.collectorSample < 0:
		return c, fmt.Errorf("--collector-sample must be 0 (all) or more")
	case c.workers < 1 || c.concurrency < 1:
		return c, fmt.Errorf("--workers and --concurrency must be at least 1")
	case c.checkins < 0:
		return c, fmt.Errorf("--checkins must be 0 or more")
	case c.timeout <= 0:
		return c, fmt.Errorf("--timeout must be positive")
	}
	return c, nil
}

// resolve fills in the default paths, from the checkout.
func (c *config) resolve() error {
	if c.environments != "" && c.exportsEnvs != "" && c.facts != "" {
		return nil
	}
	root, err := repoRoot()
	if err != nil {
		return err
	}
	if c.environments == "" {
		c.environments = filepath.Join(root, "bench", "environments")
	}
	if c.exportsEnvs == "" {
		c.exportsEnvs = filepath.Join(root, "bench", "scalebench", "testdata", "environments")
	}
	if c.facts == "" {
		c.facts = filepath.Join(root, "testdata", "puppet-protocol", "facts-agent1.json")
	}
	return nil
}

// run runs the parts the configuration asks for and writes the report,
// also when a part failed (with what was measured until then).
func run(ctx context.Context, c config, stdout, stderr io.Writer) (err error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	if err := c.resolve(); err != nil {
		return err
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(c.logLevel)); err != nil {
		return fmt.Errorf("--log-level: %w", err)
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	p := newProgress(stderr)
	if c.cpuProfile != "" {
		f, err := os.Create(c.cpuProfile)
		if err != nil {
			return fmt.Errorf("--cpuprofile: %w", err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return fmt.Errorf("--cpuprofile: %w", err)
		}
		defer func() { pprof.StopCPUProfile(); f.Close() }()
	}
	rep := &report{Command: commandLine(c.args), Started: time.Now().UTC(), Config: c.public(),
		Machine: machine{CPU: cpuModel(), Cores: runtime.NumCPU(), MemoryGB: memGiB(), OS: kernel(), Go: runtime.Version(), LoadAvg: loadAvg()}}

	work := c.work
	if work == "" {
		if work, err = os.MkdirTemp(c.tmpdir, "scalebench-"); err != nil {
			return fmt.Errorf("work directory: %w", err)
		}
		defer os.RemoveAll(work)
	} else if err := os.MkdirAll(work, 0o750); err != nil {
		return fmt.Errorf("work directory: %w", err)
	}
	rep.Machine.Storage = storageOf(work)
	fl, err := loadFleet(c.facts, "scale", "scalebench.test")
	if err != nil {
		return err
	}
	defer func() {
		rep.Seconds = time.Since(rep.Started).Seconds()
		if err != nil {
			rep.Error = err.Error()
		}
		if werr := rep.write(c, stdout); werr != nil {
			err = errors.Join(err, werr)
		}
	}()

	p.printf("starting the Puppet compile engine (%d workers)", c.workers)
	engine, err := puppet.New(ctx, puppet.Options{Workers: c.workers, Ruby: c.ruby, WorkDir: filepath.Join(work, "engine"), Logger: log})
	if err != nil {
		return fmt.Errorf("start the puppet compile engine (is puppet installed? scripts/install-deps.sh): %w", err)
	}
	defer engine.Close()
	rep.Machine.Puppet = engine.PuppetVersion()

	if len(c.sizes) > 0 {
		if err := rep.part("embedded", func() error {
			return c.storePart(ctx, p.in("embedded"), engine, fl, filepath.Join(work, "embedded"), false, c.sizes, log, &rep.Embedded)
		}); err != nil {
			return err
		}
	}
	if len(c.awsSizes) > 0 {
		if err := rep.part("aws", func() error {
			return c.storePart(ctx, p.in("aws"), engine, fl, filepath.Join(work, "aws"), true, c.awsSizes, log, &rep.AWS)
		}); err != nil {
			return err
		}
	}
	for _, n := range c.exportSizes {
		name := fmt.Sprintf("exports-%d", n)
		if err := rep.part(name, func() error {
			dir := filepath.Join(work, name)
			defer c.clean(dir)
			ecfg := exportsConfig{sample: c.collectorSample, workers: c.workers, concurrency: c.concurrency, envSrc: c.exportsEnvs}
			res, err := benchExports(ctx, ecfg, n, engine, fl, dir, log, p.in(name))
			rep.Exports = append(rep.Exports, res)
			return err
		}); err != nil {
			return err
		}
	}
	p.printf("done in %s", time.Since(rep.Started).Round(time.Second))
	return nil
}

// storePart runs part 1 (embedded) or 2 (aws) in dir, putting its result
// in *out even when it fails half way.
func (c config) storePart(ctx context.Context, p *progress, engine *puppet.Engine, fl *fleet, dir string, useAWS bool, sizes []int, log *slog.Logger, out **storeResult) error {
	defer c.clean(dir)
	envs := filepath.Join(dir, "environments")
	if err := copyTree(filepath.Join(c.environments, "production"), filepath.Join(envs, "production")); err != nil {
		return err
	}
	var (
		b          backend
		closeStore func()
		err        error
	)
	if useAWS {
		p.printf("starting the S3, DynamoDB and SQS emulators")
		b, closeStore, err = startAWS(ctx, dir, log)
	} else {
		b, closeStore, err = openEmbedded(ctx, filepath.Join(dir, "store"), log)
	}
	if err != nil {
		return err
	}
	defer closeStore()
	r, err := newRig(b, engine, envs, dir, log)
	if err != nil {
		return err
	}
	scfg := storeConfig{sizes: sizes, samples: c.samples, workers: c.workers, concurrency: c.concurrency, checkins: c.checkins, environment: "production"}
	*out, err = benchStore(ctx, scfg, r, fl, envs, p)
	return err
}

// clean removes a part's directory unless the work directory is kept.
func (c config) clean(dir string) {
	if c.work == "" {
		_ = os.RemoveAll(dir)
	}
}

// commandLine is how the run was invoked, for the report, without the
// flags that only name output files or a work directory.
func commandLine(args []string) string {
	var out []string
	for i := 0; i < len(args); i++ {
		name, _, hasValue := strings.Cut(strings.TrimLeft(args[i], "-"), "=")
		if strings.HasPrefix(args[i], "-") && slices.Contains([]string{"json", "markdown", "work", "cpuprofile"}, name) {
			if !hasValue {
				i++ // its value is the next argument
			}
			continue
		}
		a := args[i]
		if a == "" || strings.ContainsAny(a, " \t\"'$") {
			a = strconv.Quote(a)
		}
		out = append(out, a)
	}
	return strings.TrimSpace("go run ./bench/scalebench " + strings.Join(out, " "))
}

// publicConfig is the configuration as the JSON report shows it.
type publicConfig struct {
	Sizes           []int `json:"sizes"`
	AWSSizes        []int `json:"aws_sizes"`
	ExportSizes     []int `json:"export_sizes"`
	Samples         int   `json:"samples"`
	CollectorSample int   `json:"collector_sample"`
	Workers         int   `json:"workers"`
	Concurrency     int   `json:"concurrency"`
	Checkins        int   `json:"checkins"`
}

func (c config) public() publicConfig {
	return publicConfig{Sizes: c.sizes, AWSSizes: c.awsSizes, ExportSizes: c.exportSizes, Samples: c.samples,
		CollectorSample: c.collectorSample, Workers: c.workers, Concurrency: c.concurrency, Checkins: c.checkins}
}

// writeJSON writes v, indented, to path.
func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encode results: %w", err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("write --json: %w", err)
	}
	return nil
}

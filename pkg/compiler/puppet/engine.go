// Package puppet is the compile engine that runs real Ruby Puppet.
//
// Each worker is one long-lived Ruby process running the embedded Ruby
// worker (ruby/worker.rb and the files it loads from ruby/lib): Puppet is
// loaded once, then the process compiles one catalog at a time,
// the way Puppet Server's catalog endpoint does, and answers with the
// catalog exactly as Puppet Server sends it to an agent that accepts
// application/vnd.puppet.rich+json (Puppet::Resource::Catalog#to_data_hash
// with rich data, catalog_format 2).
//
// The Go side and the worker speak JSON lines over stdin/stdout; what the
// worker writes to stderr (Puppet's log) goes to slog. Each worker keeps a
// small LRU of Puppet environment loaders, one per environmentpath: a code
// snapshot (code_id) has its own environmentpath, so repeated compiles of
// one snapshot reuse its parsed code and a new snapshot is always read
// fresh.
//
// Every compile records which facts it read (Result.Reads): the worker
// instruments Puppet where facts enter the compiler (the fact hashes, the
// top scope's variables, templates, 3.x function arguments, Ruby's C-level
// Hash methods) and reports each read by key path with what it observed;
// non-deterministic functions (generate, Timestamp.new, legacy strftime, ...)
// mark the catalog always-recompile. The values are checked against, and
// stored as, facts.Observe over the request's facts, so facts.Changed
// decides recompiles. mutation_test.go proves on real modules that no read
// is missed.
//
// A compile gets the node as Puppet's exec node terminus and Puppet
// Server's TLS layer would give it (Request.Node): $trusted['extensions']
// from the certificate, the classifier's classes, and its parameters, which
// are top-scope variables that win over facts and are not fact reads.
//
// Exported resources work without PuppetDB: the worker runs with
// storeconfigs on and its own storeconfigs backend, which answers exported
// collectors (Type <<| query |>>) from Request.Exported, filtering as the
// PuppetDB terminus does (type, other nodes only, the query's ==, !=, and,
// or over tag, title and parameters). Result.Exports are the node's own
// exported resources, taken before the catalog is filtered for the agent;
// Result.Collects the exported collectors it evaluated and whose resources
// each collected. Neither is a fact read.
//
// PuppetDB (Options.PuppetDB) is reached through Debian's
// puppet-terminus-puppetdb, loaded and configured as Puppet Server does
// (puppetdb.conf and Puppet's SSL settings in each worker's own
// directories): puppetdb_query() works in manifests, and with
// Options.StoreConfigs "puppetdb" exported collectors read PuppetDB
// through Puppet's resource/puppetdb terminus instead of Request.Exported.
// Every query a compile makes is recorded in Result.Reads.Queries
// (farm.QueryRead: the query and a digest of PuppetDB's answer), so the
// farm can recompile a node when an answer changes. A query PuppetDB
// refuses fails the compile (*compiler.CompileError with PuppetDB's
// message); one no PuppetDB answers fails it with farm.ErrTransient, the
// worker kept. Without a PuppetDB, puppetdb_query() fails the compile
// saying so.
//
// Encrypted Hiera data (levels with lookup_key eyaml_lookup_key) is
// decrypted by Puppet's own backend and hiera-eyaml, with keys found outside
// the code snapshot (Options.EyamlKeys); decrypting is not a fact read.
//
// A compile error in the code is returned as a *compiler.CompileError. A
// worker that crashes, hangs past Options.Timeout, or whose compile is
// cancelled is killed (its whole process group) and restarted in the
// background; that compile fails with an error wrapping farm.ErrTransient.
package puppet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/compilefarm/compilefarm/internal/backoff"
	"github.com/compilefarm/compilefarm/pkg/compiler"
	"github.com/compilefarm/compilefarm/pkg/farm"
)

// Defaults for Options.
const (
	DefaultRuby    = "ruby"
	DefaultTimeout = 2 * time.Minute
)

const (
	// startTimeout bounds how long a worker may take to load Puppet.
	startTimeout = 2 * time.Minute
	// stopGrace is how long Close waits for a worker to exit by itself.
	stopGrace = 10 * time.Second
	// restartBackoff is the pause before retrying a failed restart.
	restartBackoff = 5 * time.Second
)

// Options configure an Engine.
type Options struct {
	// Workers is the number of Ruby worker processes, each compiling one
	// catalog at a time. Default 1.
	Workers int
	// Ruby is the ruby executable. Default "ruby".
	Ruby string
	// WorkDir holds the worker's Ruby files (in a directory named after
	// their content, so engines may share a WorkDir) and one directory per
	// worker with its Puppet confdir, vardir and codedir. Required;
	// Puppet's system directories (/etc/puppet, /var/lib/puppet) are never
	// used.
	WorkDir string
	// Timeout bounds one compile. Default 2 minutes.
	Timeout time.Duration
	// Logger receives the workers' Puppet log. Default slog.Default().
	Logger *slog.Logger
	// DisableHooks switches off recording hooks of the workers by name
	// (facts, topscope, qualified, tohash, iterate, erb, convert, hashargs,
	// nondet; queries for PuppetDB queries; "all" turns recording off, and
	// Result.Reads is then nil). For tests only: a catalog compiled with a
	// hook off may depend on facts or queries it does not report. An
	// unknown name makes New fail.
	DisableHooks []string
	// EyamlKeys is the directory that holds the keys of encrypted Hiera
	// data (hiera-eyaml's PKCS7 pair), kept out of every code snapshot.
	// When a hierarchy level with lookup_key eyaml_lookup_key decrypts a
	// value: a level that names no key uses EyamlKeys/private_key.pkcs7.pem
	// and EyamlKeys/public_key.pkcs7.pem; a key path that exists on this
	// host is used as written, as Puppet Server would; any other key path
	// (the /etc/puppetlabs/puppet/eyaml/... of a control repo written for
	// Puppet Server) is looked up by its file name in EyamlKeys. A key that
	// is missing, unreadable or wrong fails that compile with a
	// *compiler.CompileError naming the key file. Empty: only key paths that
	// exist work. New fails when it is set but is not a directory, or when
	// hiera-eyaml cannot be loaded.
	EyamlKeys string
	// PuppetDB is the PuppetDB compiles query (puppetdb_query(), and
	// exported collectors with StoreConfigs "puppetdb"). Nil: a manifest
	// that calls puppetdb_query() fails to compile, saying the farm has no
	// PuppetDB. New fails when it is invalid (see PuppetDB).
	PuppetDB *PuppetDB
	// StoreConfigs is where exported collectors (<<| |>>) collect from:
	// StoreConfigsFarm (the default, also "") or StoreConfigsPuppetDB,
	// which needs PuppetDB.
	StoreConfigs string
}

// Engine compiles catalogs with Ruby Puppet. It is safe for concurrent use.
type Engine struct {
	opts    Options
	log     *slog.Logger
	script  string
	version string
	pdb     *puppetdbSetup // nil without PuppetDB

	workers []*worker
	pool    pool // the workers not compiling

	life      context.Context // ends when Close starts
	stopLife  context.CancelFunc
	restarts  sync.WaitGroup
	closeOnce sync.Once
	closeErr  error
	nextID    atomic.Uint64

	// readMismatches counts reads whose value as the worker observed it
	// differs (beyond number formatting) from facts.Observe over the
	// request's facts: a bug in the worker's recording.
	readMismatches atomic.Int64
}

var _ compiler.Engine = (*Engine)(nil)

// errClosed is returned by Compile after Close.
var errClosed = fmt.Errorf("puppet engine is closed: %w", farm.ErrTransient)

// New writes the worker's Ruby files to opts.WorkDir and starts opts.Workers workers,
// returning once all have loaded Puppet. ctx bounds the start-up only.
func New(ctx context.Context, opts Options) (*Engine, error) {
	if opts.Workers <= 0 {
		opts.Workers = 1
	}
	if opts.Ruby == "" {
		opts.Ruby = DefaultRuby
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.WorkDir == "" {
		return nil, fmt.Errorf("puppet engine: WorkDir is required: %w", farm.ErrInvalid)
	}
	workDir, err := filepath.Abs(opts.WorkDir)
	if err != nil {
		return nil, fmt.Errorf("puppet engine: resolve WorkDir %q: %w", opts.WorkDir, err)
	}
	opts.WorkDir = workDir
	if opts.EyamlKeys != "" {
		keys, err := filepath.Abs(opts.EyamlKeys)
		if err != nil {
			return nil, fmt.Errorf("puppet engine: resolve EyamlKeys %q: %w", opts.EyamlKeys, err)
		}
		st, err := os.Stat(keys)
		if err != nil {
			return nil, fmt.Errorf("puppet engine: eyaml keys directory: %w: %w", err, farm.ErrInvalid)
		}
		if !st.IsDir() {
			return nil, fmt.Errorf("puppet engine: eyaml keys directory %s is not a directory: %w", keys, farm.ErrInvalid)
		}
		opts.EyamlKeys = keys
	}
	pdb, err := checkPuppetDB(opts.PuppetDB)
	if err != nil {
		return nil, fmt.Errorf("puppet engine: %w: %w", err, farm.ErrInvalid)
	}
	switch opts.StoreConfigs {
	case "", StoreConfigsFarm:
		opts.StoreConfigs = StoreConfigsFarm
	case StoreConfigsPuppetDB:
		if pdb == nil {
			return nil, fmt.Errorf("puppet engine: storeconfigs %q needs a PuppetDB: %w", opts.StoreConfigs, farm.ErrInvalid)
		}
	default:
		return nil, fmt.Errorf("puppet engine: storeconfigs %q is not %q or %q: %w", opts.StoreConfigs, StoreConfigsFarm, StoreConfigsPuppetDB, farm.ErrInvalid)
	}
	if err := os.MkdirAll(workDir, 0o750); err != nil {
		return nil, fmt.Errorf("puppet engine: create WorkDir: %w", err)
	}
	script, err := writeWorker(workDir)
	if err != nil {
		return nil, fmt.Errorf("puppet engine: write worker files: %w", err)
	}

	life, stop := context.WithCancel(context.Background())
	e := &Engine{
		opts:     opts,
		log:      opts.Logger.With("engine", "puppet"),
		script:   script,
		pdb:      pdb,
		life:     life,
		stopLife: stop,
	}
	for i := range opts.Workers {
		dir := filepath.Join(workDir, "worker-"+strconv.Itoa(i))
		if err := os.MkdirAll(dir, 0o750); err != nil {
			stop()
			return nil, fmt.Errorf("puppet engine: create worker directory: %w", err)
		}
		if err := pdb.write(dir); err != nil {
			stop()
			return nil, fmt.Errorf("puppet engine: write worker %d's PuppetDB configuration: %w", i, err)
		}
		e.workers = append(e.workers, &worker{n: i, dir: dir})
	}

	// Start all workers at once: loading Puppet takes a second or more each.
	errs := make([]error, len(e.workers))
	var wg sync.WaitGroup
	for i, w := range e.workers {
		wg.Go(func() { errs[i] = e.start(ctx, w) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		for _, w := range e.workers {
			if w.proc != nil {
				w.proc.kill()
			}
		}
		stop()
		return nil, fmt.Errorf("puppet engine: start workers (is puppet installed for %s?): %w", opts.Ruby, err)
	}
	e.version = e.workers[0].proc.ready.PuppetVersion
	for _, w := range e.workers {
		e.pool.put(w)
	}
	e.log.Info("puppet engine ready", "workers", opts.Workers, "puppet_version", e.version,
		"ruby_version", e.workers[0].proc.ready.RubyVersion, "workdir", workDir, "eyaml_keys", opts.EyamlKeys,
		"puppetdb", puppetdbURLs(opts.PuppetDB), "storeconfigs", opts.StoreConfigs)
	return e, nil
}

// PuppetVersion is the version of Puppet the workers loaded.
func (e *Engine) PuppetVersion() string { return e.version }

// start starts w's process; w must be owned by the caller.
func (e *Engine) start(ctx context.Context, w *worker) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stopOnClose := context.AfterFunc(e.life, cancel)
	defer stopOnClose()
	var args []string
	if len(e.opts.DisableHooks) > 0 {
		args = append(args, "--disable-hooks="+strings.Join(e.opts.DisableHooks, ","))
	}
	if e.opts.EyamlKeys != "" {
		args = append(args, "--eyaml-keys="+e.opts.EyamlKeys)
	}
	args = append(args, e.pdb.args(e.opts.StoreConfigs)...)
	p, err := startProcess(ctx, e.opts.Ruby, e.script, w.dir, args, startTimeout, e.log.With("worker", w.n))
	if err != nil {
		return fmt.Errorf("worker %d: %w", w.n, err)
	}
	w.proc = p
	return nil
}

// Compile compiles req's catalog on a free worker.
func (e *Engine) Compile(ctx context.Context, req compiler.Request) (compiler.Result, error) {
	return e.compile(ctx, req, nil)
}

// compile is Compile with recording hooks switched off for this compile
// only (tests).
func (e *Engine) compile(ctx context.Context, req compiler.Request, disableHooks []string) (compiler.Result, error) {
	if err := validate(req); err != nil {
		return compiler.Result{}, err
	}
	facts, err := encodeFacts(req.Facts)
	if err != nil {
		return compiler.Result{}, fmt.Errorf("puppet compile %s: %w: %w", req.Certname, err, farm.ErrInvalid)
	}
	var params json.RawMessage
	if len(req.Node.Parameters) > 0 {
		if params, err = encodeFacts(req.Node.Parameters); err != nil {
			return compiler.Result{}, fmt.Errorf("puppet compile %s: classifier parameters: %w: %w", req.Certname, err, farm.ErrInvalid)
		}
	}
	id := e.nextID.Add(1)
	line, err := json.Marshal(request{
		ID:              id,
		Certname:        req.Certname,
		Environment:     req.Environment,
		CodeID:          req.CodeID,
		EnvironmentPath: req.EnvironmentPath,
		Facts:           facts,
		Exported:        req.Exported,

		TrustedExtensions: req.Node.TrustedExtensions,
		Classes:           req.Node.Classes,
		Parameters:        params,
		DisableHooks:      disableHooks,
	})
	if err != nil {
		return compiler.Result{}, fmt.Errorf("puppet compile %s: encode request: %w", req.Certname, err)
	}
	line = append(line, '\n')

	w, err := e.acquire(ctx, req.EnvironmentPath)
	if err != nil {
		return compiler.Result{}, fmt.Errorf("puppet compile %s: wait for a free worker: %w", req.Certname, err)
	}
	if w.proc == nil {
		// An earlier restart failed; try again now.
		if err := e.start(ctx, w); err != nil {
			e.pool.put(w)
			return compiler.Result{}, fmt.Errorf("puppet compile %s: %w: %w", req.Certname, err, farm.ErrTransient)
		}
	}

	res, healthy, err := e.exchange(ctx, w, id, line, req)
	if healthy {
		w.used(req.EnvironmentPath)
		e.pool.put(w)
	} else {
		e.log.Warn("killing puppet worker", "worker", w.n, "pid", w.proc.pid, "err", err)
		w.proc.kill()
		e.restart(w)
	}
	return res, err
}

// validate rejects requests that no worker could compile.
func validate(req compiler.Request) error {
	if err := farm.ValidateCertname(req.Certname); err != nil {
		return fmt.Errorf("puppet compile: %w", err)
	}
	if err := farm.ValidateEnvironment(req.Environment); err != nil {
		return fmt.Errorf("puppet compile %s: %w", req.Certname, err)
	}
	if !filepath.IsAbs(req.EnvironmentPath) {
		return fmt.Errorf("puppet compile %s: environment path %q must be absolute: %w", req.Certname, req.EnvironmentPath, farm.ErrInvalid)
	}
	return nil
}

// acquire takes an idle worker, preferably one that has envpath's code.
func (e *Engine) acquire(ctx context.Context, envpath string) (*worker, error) {
	if e.life.Err() != nil {
		return nil, errClosed
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(e.life, cancel)
	defer stop()
	w, err := e.pool.get(ctx, envpath)
	if err != nil {
		if e.life.Err() != nil {
			return nil, errClosed
		}
		return nil, fmt.Errorf("%w: %w", farm.ErrTransient, err)
	}
	if e.life.Err() != nil {
		e.pool.put(w)
		return nil, errClosed
	}
	return w, nil
}

// exchange sends one request to w and waits for its answer. healthy is false
// when the worker must be killed and restarted.
func (e *Engine) exchange(ctx context.Context, w *worker, id uint64, line []byte, req compiler.Request) (res compiler.Result, healthy bool, err error) {
	p := w.proc
	what := fmt.Sprintf("puppet compile %s (environment %s, code %s) on worker %d (pid %d)", req.Certname, req.Environment, req.CodeID, w.n, p.pid)
	start := time.Now()
	timer := time.NewTimer(e.opts.Timeout)
	defer timer.Stop()

	if err := p.send(line); err != nil {
		return res, false, fmt.Errorf("%s: send request: worker died (%v)%s: %w", what, err, p.tail.suffix(), farm.ErrTransient)
	}
	for {
		select {
		case out, ok := <-p.lines:
			if !ok {
				<-p.exited
				return res, false, fmt.Errorf("%s: worker died (%v)%s; restarting: %w", what, p.waitErr, p.tail.suffix(), farm.ErrTransient)
			}
			var resp response
			if err := json.Unmarshal(out, &resp); err != nil {
				return res, false, fmt.Errorf("%s: unreadable answer %q: %w", what, compiler.Excerpt(out, 200), farm.ErrTransient)
			}
			if resp.ID == nil && resp.Error != nil {
				return res, true, fmt.Errorf("%s: worker rejected the request: %s: %w", what, resp.Error.Message, farm.ErrInvalid)
			}
			if resp.ID == nil || *resp.ID != id {
				e.log.Warn("puppet worker answered another request; ignored", "worker", w.n, "want", id, "line", compiler.Excerpt(out, 200))
				continue
			}
			return e.result(what, resp, req, time.Since(start))
		case <-timer.C:
			return res, false, fmt.Errorf("%s: no answer after %s; killing the worker: %w", what, e.opts.Timeout, farm.ErrTransient)
		case <-ctx.Done():
			return res, false, fmt.Errorf("%s: %w; killing the worker: %w", what, ctx.Err(), farm.ErrTransient)
		case <-e.life.Done():
			return res, false, fmt.Errorf("%s: %w", what, errClosed)
		}
	}
}

// result turns a worker's answer into Compile's result.
func (e *Engine) result(what string, resp response, req compiler.Request, took time.Duration) (compiler.Result, bool, error) {
	if resp.OK {
		if len(resp.Catalog) == 0 || resp.Catalog[0] != '{' {
			return compiler.Result{}, false, fmt.Errorf("%s: answer without a catalog: %w", what, farm.ErrTransient)
		}
		reads, err := e.checkReads(what, resp.Reads, req.Facts)
		if err != nil {
			return compiler.Result{}, false, fmt.Errorf("%s: %w: %w", what, err, farm.ErrTransient)
		}
		if reads != nil {
			reads.Queries = queryReads(resp.Queries)
		}
		n := -1
		if reads != nil {
			n = len(reads.Reads)
		}
		for i := range resp.Exports {
			resp.Exports[i].Certname = req.Certname
		}
		e.log.Debug("compiled catalog", "what", what, "duration", took, "bytes", len(resp.Catalog), "fact_reads", n,
			"exports", len(resp.Exports), "collects", len(resp.Collects), "puppetdb_queries", len(resp.Queries))
		return compiler.Result{Catalog: resp.Catalog, Reads: reads, Exports: resp.Exports, Collects: resp.Collects}, true, nil
	}
	we := resp.Error
	if we == nil {
		return compiler.Result{}, false, fmt.Errorf("%s: failed without saying why: %w", what, farm.ErrTransient)
	}
	switch we.Kind {
	case kindCompile:
		return compiler.Result{}, true, &compiler.CompileError{Message: we.Message, File: we.File, Line: we.Line, Column: we.Column}
	case kindInvalid:
		return compiler.Result{}, true, fmt.Errorf("%s: %s: %w", what, we.Message, farm.ErrInvalid)
	case kindUnavailable:
		return compiler.Result{}, true, fmt.Errorf("%s: %s: %w", what, we.Message, farm.ErrTransient)
	default:
		return compiler.Result{}, false, fmt.Errorf("%s: worker failed: %s: %w", what, we.Message, farm.ErrTransient)
	}
}

// restart starts a new process for w in the background and hands w back to
// the pool once it is ready (or, when that fails, without a process: the
// next Compile that takes it tries again).
func (e *Engine) restart(w *worker) {
	w.proc = nil
	w.recent = nil
	e.restarts.Add(1)
	go func() {
		defer e.restarts.Done()
		defer e.pool.put(w)
		for attempt := 1; attempt <= 3; attempt++ {
			if e.life.Err() != nil {
				return
			}
			err := e.start(e.life, w)
			if err == nil {
				e.log.Info("puppet worker restarted", "worker", w.n, "pid", w.proc.pid)
				return
			}
			e.log.Error("restart puppet worker", "worker", w.n, "attempt", attempt, "err", err)
			if backoff.Sleep(e.life, restartBackoff) != nil {
				return
			}
		}
	}()
}

// Close stops all workers, waiting for compiles in progress to be abandoned
// and for every process to exit. Compile fails after Close.
func (e *Engine) Close() error {
	e.closeOnce.Do(func() {
		e.stopLife()
		var errs []error
		for range e.workers {
			// Compiles in progress give up as life ends, restarts too.
			w, _ := e.pool.get(context.Background(), "")
			if w.proc != nil {
				if err := w.proc.stop(stopGrace); err != nil {
					errs = append(errs, err)
				}
				w.proc = nil
			}
		}
		e.restarts.Wait()
		e.closeErr = errors.Join(errs...)
		e.log.Info("puppet engine closed")
	})
	return e.closeErr
}

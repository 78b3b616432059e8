package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/compilefarm/compilefarm/pkg/admin"
	"github.com/compilefarm/compilefarm/pkg/ca"
	"github.com/compilefarm/compilefarm/pkg/code"
	"github.com/compilefarm/compilefarm/pkg/compiler"
	"github.com/compilefarm/compilefarm/pkg/compiler/puppet"
	"github.com/compilefarm/compilefarm/pkg/envcache"
	"github.com/compilefarm/compilefarm/pkg/facts"
	"github.com/compilefarm/compilefarm/pkg/frontdoor"
	"github.com/compilefarm/compilefarm/pkg/intake"
	"github.com/compilefarm/compilefarm/pkg/localstore"
	"github.com/compilefarm/compilefarm/pkg/metrics"
	"github.com/compilefarm/compilefarm/pkg/release"
)

type devConfig struct {
	listen, metricsListen, adminListen     string
	environments, data                     string
	autosign                               bool
	workers                                int
	dnsAltNames                            string
	certname                               string
	serverKey                              string
	volatile                               string
	firstWait, changedWait, compileTimeout time.Duration
	clockMaxAge                            time.Duration
	ruby                                   string
	logLevel                               string
	classifier                             classifierFlags
	basemodulepath                         basemodulepathFlag
	eyamlKeys                              string
	admission                              admissionFlags
	emf                                    emfFlags
	pcp                                    pcpFlags
	puppetdb                               puppetdbFlags
}

func runDev(ctx context.Context, args []string) error {
	host, _ := os.Hostname()
	host = strings.ToLower(host)
	var c devConfig
	fs := flag.NewFlagSet("dev", flag.ExitOnError)
	fs.StringVar(&c.listen, "listen", "127.0.0.1:8140", "front door address (Puppet's port 8140, TLS)")
	fs.StringVar(&c.metricsListen, "metrics-listen", "127.0.0.1:9140", "address for /metrics (Prometheus, plain HTTP); keep it on loopback")
	fs.StringVar(&c.adminListen, "admin-listen", defaultAdminListen, adminListenUsage)
	fs.StringVar(&c.environments, "environments", "examples/environments", "Puppet environmentpath: one directory per environment")
	fs.Var(&c.basemodulepath, "basemodulepath", basemodulepathUsage)
	fs.StringVar(&c.data, "data", ".data/dev", "directory for all state (CA, catalogs, facts, queue); survives restarts")
	fs.BoolVar(&c.autosign, "autosign", true, "sign every certificate request at once (dev only)")
	fs.IntVar(&c.workers, "workers", runtime.NumCPU(), "compile workers (one Ruby Puppet process each)")
	fs.StringVar(&c.dnsAltNames, "dns-alt-names", "", "extra names (comma separated) the server certificate covers; localhost, 127.0.0.1 and the host name always are")
	fs.StringVar(&c.certname, "certname", host, "the server's own certname")
	fs.StringVar(&c.serverKey, "server-key", "ecdsa-p256", "server TLS key type: ecdsa-p256 or rsa")
	fs.StringVar(&c.volatile, "volatile-facts", strings.Join(facts.DefaultVolatile, ","), "facts whose changes never trigger a compile (dotted paths, * matches any key)")
	fs.DurationVar(&c.firstWait, "first-compile-wait", 60*time.Second, "how long a node's first catalog request waits for its compile before 503 + Retry-After")
	fs.DurationVar(&c.changedWait, "changed-compile-wait", 10*time.Second, "how long a catalog request waits for a recompile before serving the last good catalog")
	fs.DurationVar(&c.clockMaxAge, "clock-max-age", time.Hour, clockMaxAgeUsage)
	fs.DurationVar(&c.compileTimeout, "compile-timeout", 2*time.Minute, "a compile running longer is killed and retried")
	fs.StringVar(&c.ruby, "ruby", "ruby", "Ruby interpreter with Puppet 7 (Debian's puppet-agent)")
	fs.StringVar(&c.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&c.eyamlKeys, "eyaml-keys", "", "directory with the keys of encrypted Hiera data (hiera-eyaml's private_key.pkcs7.pem and public_key.pkcs7.pem; "+
		"key paths a hiera.yaml names that do not exist here are looked up by file name in it); keep it outside --environments")
	c.classifier.register(fs)
	c.admission.register(fs)
	c.emf.register(fs)
	c.pcp.register(fs, "127.0.0.1:8142")
	c.puppetdb.register(fs, false)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("dev: unexpected arguments %q", fs.Args())
	}
	if err := checkSharedFlags(&c.pcp, &c.admission, &c.emf, c.adminListen); err != nil {
		return fmt.Errorf("dev: %w", err)
	}
	log, err := newLogger(c.logLevel)
	if err != nil {
		return err
	}
	return dev(ctx, c, log)
}

// checkSharedFlags checks the flags dev and serve share: PCP, admission,
// EMF and --admin-listen, in that order.
func checkSharedFlags(pcp *pcpFlags, admission *admissionFlags, emf *emfFlags, adminListen string) error {
	if err := pcp.validate(); err != nil {
		return err
	}
	if err := admission.validate(); err != nil {
		return err
	}
	if err := emf.validate(); err != nil {
		return err
	}
	return checkAdminListen(adminListen)
}

func dev(ctx context.Context, c devConfig, log *slog.Logger) error {
	if c.workers < 1 {
		return fmt.Errorf("--workers must be at least 1")
	}
	envRoot, err := filepath.Abs(c.environments)
	if err != nil {
		return fmt.Errorf("--environments: %w", err)
	}
	if st, err := os.Stat(envRoot); err != nil || !st.IsDir() {
		return fmt.Errorf("--environments %s is not a directory of Puppet environments", c.environments)
	}
	baseModulepath, err := c.basemodulepath.resolve(envRoot)
	if err != nil {
		return err
	}
	if err := checkEyamlKeys(c.eyamlKeys, envRoot); err != nil {
		return err
	}
	filter, err := facts.NewFilter(splitList(c.volatile))
	if err != nil {
		return fmt.Errorf("--volatile-facts: %w", err)
	}
	enc, err := c.classifier.open()
	if err != nil {
		return err
	}
	pdbURLs, err := c.puppetdb.validate(false)
	if err != nil {
		return err
	}
	// Absolute: the compile engine runs in directories of its own, and
	// `make run` passes a relative --data.
	if c.data, err = filepath.Abs(c.data); err != nil {
		return fmt.Errorf("--data: %w", err)
	}
	if err := os.MkdirAll(c.data, 0o750); err != nil {
		return fmt.Errorf("create --data %s: %w", c.data, err)
	}

	store, err := localstore.Open(ctx, filepath.Join(c.data, "store"), localstore.Options{})
	if err != nil {
		return fmt.Errorf("open store in %s: %w", c.data, err)
	}
	defer store.Close()
	queue := store.Queue(localstore.QueueOptions{})

	// The built-in CA in the data directory, as serve's --ca-dir.
	caDir := caFlags{dir: filepath.Join(c.data, "ca")}
	authority, serverCert, closeCA, err := caDir.open(ctx, aws.Config{}, c.data, ca.Options{Name: c.certname, Autosign: c.autosign},
		c.certname, serverAltNames(c.certname, c.dnsAltNames), c.serverKey, log)
	if err != nil {
		return err
	}
	defer closeCA()

	caPEM, err := authority.CACertificate(ctx)
	if err != nil {
		return fmt.Errorf("read the CA certificate: %w", err)
	}
	enginePDB, storeconfigs, err := c.puppetdb.engineConfig(pdbURLs, caPEM, serverCert)
	if err != nil {
		return err
	}
	log.Info("starting compile workers (loading Puppet)", "workers", c.workers)
	engine, err := puppet.New(ctx, puppet.Options{
		Workers: c.workers, Ruby: c.ruby, WorkDir: filepath.Join(c.data, "engine"),
		Timeout: c.compileTimeout, Logger: log, EyamlKeys: c.eyamlKeys, PuppetDB: enginePDB, StoreConfigs: storeconfigs,
	})
	if err != nil {
		return fmt.Errorf("start the puppet compile engine (is Debian's puppet-agent installed? run scripts/install-deps.sh): %w", err)
	}
	defer engine.Close()

	m := metrics.New(queue)
	lib := code.NewLibrary(store, filepath.Join(c.data, "code"))
	// Environment records from memory, as serve's: every write to them is
	// this process's deployer's, through the cache, so none is stale.
	envs := envcache.New(store, 0)
	in := &intake.Intake{Content: store, Nodes: store, Envs: envs, Queue: queue, Filter: filter, Log: log, ClockMaxAge: c.clockMaxAge,
		WholeFacts: len(pdbURLs) > 0} // PuppetDB sees every non-volatile change
	deployer := &release.Deployer{Content: store, Envs: envs.ReadThrough(), Nodes: store, Intake: in, Root: envRoot, BaseModulepath: baseModulepath, Log: log}
	pool := &compiler.Pool{Queue: queue, Nodes: store, Content: store, Engine: engine, Code: lib, Metrics: m, Log: log, Collectors: in}
	if enginePDB != nil {
		pool.Queries = store // the queries compiles make, run again by the refresher
	}

	// Compiles requested just before a crash, and code changed on disk
	// while the farm was down, are queued again.
	if _, err := in.RequeuePending(ctx); err != nil {
		return err
	}
	if err := deployer.DeployAll(ctx); err != nil {
		return err
	}

	fd := &frontdoor.Server{
		CA: authority, Revocations: authority, Peers: authority, Intake: in, Nodes: store, Envs: envs,
		Content: store, Files: lib, Bucket: store, Metrics: m, Log: log, PuppetVersion: engine.PuppetVersion(),
		FirstCompileWait: c.firstWait, ChangedCompileWait: c.changedWait, Admission: c.admission.limits, CacheBytes: c.admission.cacheMiB << 20,
	}
	if enc != nil {
		// At check-in (intake, node endpoint) and for each compile, as
		// Puppet Server runs its classifier per request.
		in.Classifier, pool.Classifier, fd.Classifier = enc, enc, enc
	}
	// One process: the broker delivers to its own clients only, and keeps
	// its jobs in the store (they outlive a restart).
	pcp, err := c.pcp.open(c.certname, pcpBackend{jobs: store, nodes: store}, authority, authority.ServerTLSConfig(serverCert), m, log)
	if err != nil {
		return err
	}
	pdb, err := c.puppetdb.open(ctx, pdbURLs, store.Outbox(localstore.OutboxOptions{}), store, store, queryWatch{queries: store, intake: in},
		caPEM, serverCert, c.certname, m, log)
	if err != nil {
		return err
	}
	adm := adminHandler(&admin.Server{CA: authority, Nodes: store, Envs: envs, Deployer: deployer, Explainer: in, Jobs: pcp.jobs(), Reports: store})
	fd.Operator = adm
	defer c.emf.start(ctx, m, os.Stderr, log)()
	// Client certificates are optional (CA bootstrap), verified against the
	// CA when given, and refused at the handshake once revoked.
	e := endpoints{
		front: c.listen, maxConns: c.admission.maxConns, metrics: c.metricsListen, admin: c.adminListen,
		frontHandler: fd.Handler(), tlsConf: authority.ServerTLSConfig(serverCert), metricsHandler: metricsHandler(m), adminHandler: adm,
	}
	background := pcp.withPCP(&e, c.pcp.listen, fd, pdb.with(fd, func(ctx context.Context) { pool.Run(ctx, c.workers) }))
	return listenAndServe(ctx, log, e, background,
		"compilefarm dev is up", "certname", c.certname, "environments", envRoot,
		"basemodulepath", strings.Join(baseModulepath, string(filepath.ListSeparator)), "data", c.data, "autosign", c.autosign)
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

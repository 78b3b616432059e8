package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/compilefarm/compilefarm/pkg/admin"
	"github.com/compilefarm/compilefarm/pkg/awscalls"
	"github.com/compilefarm/compilefarm/pkg/ca"
	"github.com/compilefarm/compilefarm/pkg/code"
	"github.com/compilefarm/compilefarm/pkg/envcache"
	"github.com/compilefarm/compilefarm/pkg/frontdoor"
	"github.com/compilefarm/compilefarm/pkg/metrics"
	"github.com/compilefarm/compilefarm/pkg/sqsqueue"
)

type serveConfig struct {
	backend, listen, metricsListen, adminListen string
	environments, work                          string
	aws                                         awsFlags
	certname, dnsAltNames, serverKey            string
	autosign, allowSANs                         bool
	firstWait, changedWait                      time.Duration
	clockMaxAge                                 time.Duration
	envCache, fullReportEvery, factsRefresh     time.Duration
	logLevel                                    string
	classifier                                  classifierFlags
	basemodulepath                              basemodulepathFlag
	admission                                   admissionFlags
	emf                                         emfFlags
	pcp                                         pcpFlags
	puppetdb                                    puppetdbFlags
	pdbURLs                                     []*url.URL // --puppetdb, parsed by validate
}

// runServe runs the fleet's front door (and operator API) on the AWS
// backends: stateless, so several tasks can serve behind a load balancer.
// Compiles happen in the compile Lambda (functions/compile).
func runServe(ctx context.Context, args []string) error {
	host, _ := os.Hostname()
	var c serveConfig
	fs := flag.NewFlagSet("serve", flag.ExitOnError)
	fs.StringVar(&c.backend, "backend", "aws", "storage and queue backend: aws (S3, DynamoDB, SQS; endpoints from the standard AWS configuration)")
	fs.StringVar(&c.listen, "listen", "0.0.0.0:8140", "front door address (TLS)")
	fs.StringVar(&c.metricsListen, "metrics-listen", "127.0.0.1:9140", "address for /metrics (Prometheus, plain HTTP); keep it private")
	fs.StringVar(&c.adminListen, "admin-listen", defaultAdminListen, adminListenUsage)
	fs.StringVar(&c.environments, "environments", "", "environmentpath that `broker code deploy` reads from on this task")
	fs.Var(&c.basemodulepath, "basemodulepath", basemodulepathUsage)
	fs.StringVar(&c.work, "work", filepath.Join(os.TempDir(), "compilefarm-serve"), "scratch directory")
	c.aws.register(fs)
	fs.StringVar(&c.certname, "certname", strings.ToLower(host), "the front door's certname")
	fs.StringVar(&c.dnsAltNames, "dns-alt-names", "", "extra names for the server certificate (the load balancer's)")
	fs.StringVar(&c.serverKey, "server-key", "ecdsa-p256", "server TLS key type: ecdsa-p256 or rsa")
	fs.BoolVar(&c.autosign, "autosign", false, "sign every certificate request at once")
	fs.BoolVar(&c.allowSANs, "allow-subject-alt-names", false, "accept certificate requests carrying DNS/IP alt names (other front doors' requests, with --ca-upstream pointing here)")
	fs.DurationVar(&c.firstWait, "first-compile-wait", 60*time.Second, "how long a first catalog request waits for its compile")
	fs.DurationVar(&c.changedWait, "changed-compile-wait", 10*time.Second, "how long a catalog request waits for a recompile")
	fs.DurationVar(&c.clockMaxAge, "clock-max-age", time.Hour, clockMaxAgeUsage)
	fs.DurationVar(&c.envCache, "environment-cache", envcache.DefaultTTL,
		"how long an environment record read from DynamoDB is reused (changes made through this task are seen at once; negative: never)")
	fs.DurationVar(&c.fullReportEvery, "full-report-every", 24*time.Hour,
		"keep the full report of one unchanged agent run per node this often; changed, failed and new-catalog runs are always kept (negative: never)")
	fs.DurationVar(&c.factsRefresh, "facts-refresh", 24*time.Hour,
		"how often a node's stored facts are rewritten when only facts no catalog reads changed (an S3 PUT and a DynamoDB write; keep it well above the agents' run interval)")
	fs.StringVar(&c.logLevel, "log-level", "info", "debug, info, warn or error")
	c.classifier.register(fs)
	c.admission.register(fs)
	c.emf.register(fs)
	c.pcp.register(fs, "") // the stack passes 0.0.0.0:8142, with the tables and inbox prefix
	c.puppetdb.register(fs, true)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := checkSharedFlags(&c.pcp, &c.admission, &c.emf, c.adminListen); err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	if c.backend != "aws" {
		return fmt.Errorf("serve: --backend %q is not supported (aws; the embedded farm is `broker dev`)", c.backend)
	}
	if err := c.aws.validate(); err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	if c.pcp.listen != "" {
		if err := c.aws.validatePCP(); err != nil {
			return fmt.Errorf("serve: %w", err)
		}
	}
	var err error
	if c.pdbURLs, err = c.puppetdb.validate(true); err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	if c.puppetdb.urls != "" && c.aws.queriesTable == "" {
		return fmt.Errorf("serve: --puppetdb needs --queries-table (the DynamoDB table of the PuppetDB queries compiles made)")
	}
	log, err := newLogger(c.logLevel)
	if err != nil {
		return err
	}
	return serve(ctx, c, log)
}

func serve(ctx context.Context, c serveConfig, log *slog.Logger) error {
	baseModulepath, err := c.basemodulepath.resolve(c.environments)
	if err != nil {
		return err
	}
	awsCfg, err := loadAWSConfig(ctx)
	if err != nil {
		return err
	}
	calls := awscalls.New() // every AWS call of this task, on /metrics
	calls.Instrument(&awsCfg)
	enc, err := c.classifier.open()
	if err != nil {
		return err
	}
	f, err := c.aws.openFarm(awsCfg, awsFarmOptions{envCache: c.envCache, clockMaxAge: c.clockMaxAge, factsRefresh: c.factsRefresh,
		environments: c.environments, baseModulepath: baseModulepath}, log)
	if err != nil {
		return err
	}
	content, state, queue, envs, in, deployer := f.content, f.state, f.queue, f.envs, f.intake, f.deployer
	in.WholeFacts = c.puppetdb.urls != "" // PuppetDB sees every non-volatile change
	authority, serverCert, closeCA, err := c.aws.ca.open(ctx, awsCfg, c.work, ca.Options{Name: c.certname, Autosign: c.autosign, AllowSubjectAltNames: c.allowSANs, Logger: log},
		c.certname, serverAltNames(c.certname, c.dnsAltNames), c.serverKey, log)
	if err != nil {
		return err
	}
	defer closeCA()
	m := metrics.New(queue)
	m.Registry.MustRegister(calls)
	lib := code.NewLibrary(content, filepath.Join(c.work, "code"))
	fd := &frontdoor.Server{
		CA: authority, Revocations: authority, Peers: authority, Intake: in, Nodes: state, Envs: envs,
		Reports: frontdoor.ReportPolicy{Every: c.fullReportEvery},
		Content: content, Files: lib, Bucket: content, Metrics: m, Log: log,
		FirstCompileWait: c.firstWait, ChangedCompileWait: c.changedWait, Admission: c.admission.limits, CacheBytes: c.admission.cacheMiB << 20,
	}
	if enc != nil {
		// At check-in; the compile function classifies again per compile
		// (COMPILEFARM_EXTERNAL_NODES).
		in.Classifier, fd.Classifier = enc, enc
	}
	// The fleet's tasks find each other's pxp-agents through the presence
	// table and post to each other's inboxes (an SQS queue per task).
	var pcpBE pcpBackend
	if c.pcp.listen != "" {
		inbox := sqsqueue.NewInbox(sqs.NewFromConfig(awsCfg), sqsqueue.InboxOptions{Prefix: c.aws.inboxPrefix, Logger: log})
		pcpBE = pcpBackend{presence: state, inbox: inbox, jobs: state, nodes: state}
	}
	pcp, err := c.pcp.open(c.certname, pcpBE, authority, authority.ServerTLSConfig(serverCert), m, log)
	if err != nil {
		return err
	}
	var pdb *puppetdbSide
	if pdbURLs := c.pdbURLs; len(pdbURLs) > 0 {
		caPEM, err := authority.CACertificate(ctx)
		if err != nil {
			return fmt.Errorf("read the CA certificate: %w", err)
		}
		outbox := sqsqueue.NewOutbox(sqs.NewFromConfig(awsCfg), sqsqueue.OutboxOptions{
			QueueURL: c.puppetdb.outboxQueue, DeadLetterURL: c.puppetdb.deadLetterURL})
		if pdb, err = c.puppetdb.open(ctx, pdbURLs, outbox, content, state, queryWatch{queries: state, intake: in},
			caPEM, serverCert, c.certname, m, log); err != nil {
			return err
		}
	}
	adm := adminHandler(&admin.Server{CA: authority, Nodes: state, Envs: state, Deployer: deployer, Explainer: in, Jobs: pcp.jobs(), Reports: content})
	fd.Operator = adm
	// The EMF lines go where the logs go: the awslogs driver ships both.
	defer c.emf.start(ctx, m, os.Stderr, log)()
	e := endpoints{
		front: c.listen, maxConns: c.admission.maxConns, metrics: c.metricsListen, admin: c.adminListen,
		frontHandler: fd.Handler(), tlsConf: authority.ServerTLSConfig(serverCert), metricsHandler: metricsHandler(m), adminHandler: adm,
	}
	return listenAndServe(ctx, log, e, pcp.withPCP(&e, c.pcp.listen, fd, pdb.with(fd, nil)), "compilefarm serve is up", "backend", c.backend, "certname", c.certname, "bucket", c.aws.bucket)
}

// newLogger returns the process's logger at level (--log-level) and makes
// it the default.
func newLogger(level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: l}))
	slog.SetDefault(log)
	return log, nil
}

// metricsHandler serves GET /metrics only: the scrape listener.
func metricsHandler(m *metrics.Farm) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", m.Handler())
	return mux
}

// adminHandler serves the operator API only: the loopback listener, and
// (behind the operator-certificate check) the front door's
// /compilefarm/admin/v1 routes.
func adminHandler(adm *admin.Server) http.Handler {
	mux := http.NewServeMux()
	adm.Register(mux)
	return mux
}

// loadAWSConfig reads the standard AWS configuration (environment,
// shared files, AWS_ENDPOINT_URL_* for emulators).
func loadAWSConfig(ctx context.Context) (aws.Config, error) {
	cfg, err := awsconfig.LoadDefaultConfig(ctx)
	if err != nil {
		return aws.Config{}, fmt.Errorf("load AWS configuration: %w", err)
	}
	return cfg, nil
}

// endpoints are the listeners of a running broker: the front door (TLS,
// at most maxConns connections open when maxConns > 0), /metrics, the
// operator API (plain HTTP; admin must be a loopback address) and, when
// pcp is set, the PCP broker (TLS, websockets).
type endpoints struct {
	front, metrics, admin                      string
	maxConns                                   int
	frontHandler, metricsHandler, adminHandler http.Handler
	tlsConf                                    *tls.Config
	pcp                                        string
	pcpHandler                                 http.Handler
	pcpTLS                                     *tls.Config
}

// listenAndServe runs the endpoints, plus background (if any), until ctx
// ends; it logs upMsg with the three addresses once all listen.
func listenAndServe(ctx context.Context, log *slog.Logger, e endpoints, background func(context.Context), upMsg string, upArgs ...any) error {
	if err := checkAdminListen(e.admin); err != nil {
		return err
	}
	var lns []net.Listener
	closeAll := func() {
		for _, l := range lns {
			l.Close()
		}
	}
	addrs := []string{e.front, e.metrics, e.admin}
	if e.pcp != "" {
		addrs = append(addrs, e.pcp)
	}
	for _, addr := range addrs {
		l, err := net.Listen("tcp", addr)
		if err != nil {
			closeAll()
			return fmt.Errorf("listen on %s: %w", addr, err)
		}
		lns = append(lns, l)
	}
	ln, mln, aln := limitConns(lns[0], e.maxConns), lns[1], lns[2]
	frontSrv := &http.Server{
		Handler: e.frontHandler, TLSConfig: e.tlsConf, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 90 * time.Second,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
	// The PCP server's connections become websockets (hijacked): its
	// timeouts bound only the upgrade request; the broker keeps the rest.
	pcpSrv := &http.Server{
		Handler: e.pcpHandler, TLSConfig: e.pcpTLS, ReadHeaderTimeout: 10 * time.Second,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
	metricsSrv := &http.Server{Handler: e.metricsHandler, ReadHeaderTimeout: 10 * time.Second}
	adminSrv := &http.Server{Handler: e.adminHandler, ReadHeaderTimeout: 10 * time.Second}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errc := make(chan error, 3)
	if background != nil {
		wg.Add(1)
		go func() { defer wg.Done(); background(runCtx) }()
	}
	serve := func(what string, run func() error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := run(); !errors.Is(err, http.ErrServerClosed) {
				errc <- fmt.Errorf("%s: %w", what, err)
			}
		}()
	}
	serve("front door", func() error { return frontSrv.ServeTLS(ln, "", "") })
	serve("metrics", func() error { return metricsSrv.Serve(mln) })
	serve("operator API", func() error { return adminSrv.Serve(aln) })
	up := []any{"front_door", "https://" + ln.Addr().String(), "metrics", "http://" + mln.Addr().String() + "/metrics",
		"admin", "http://" + aln.Addr().String()}
	if e.pcp != "" {
		pln := lns[3]
		serve("PCP broker", func() error { return pcpSrv.ServeTLS(pln, "", "") })
		up = append(up, "pcp", "wss://"+pln.Addr().String()+"/pcp/")
	}
	log.Info(upMsg, append(up, upArgs...)...)
	var runErr error
	select {
	case <-ctx.Done():
		log.Info("shutting down")
	case runErr = <-errc:
	}
	shutCtx, shutCancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer shutCancel()
	frontSrv.Shutdown(shutCtx)
	metricsSrv.Shutdown(shutCtx)
	adminSrv.Shutdown(shutCtx)
	pcpSrv.Shutdown(shutCtx)
	cancel()
	wg.Wait()
	return runErr
}

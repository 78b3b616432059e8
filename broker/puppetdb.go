package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"flag"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/compilefarm/compilefarm/pkg/compiler/puppet"
	"github.com/compilefarm/compilefarm/pkg/farm"
	"github.com/compilefarm/compilefarm/pkg/frontdoor"
	"github.com/compilefarm/compilefarm/pkg/metrics"
	"github.com/compilefarm/compilefarm/pkg/puppetdb"
	"github.com/compilefarm/compilefarm/pkg/querywatch"
)

// puppetdbFlags configure what feeds a site's PuppetDB: the URLs, how the
// farm authenticates to it and checks it, and how often recorded queries
// are run again.
type puppetdbFlags struct {
	urls          string
	caFile        string
	cert, key     string
	queryRefresh  time.Duration
	factsEvery    time.Duration
	storeconfigs  string
	outboxQueue   string // serve: the SQS FIFO queue of the outbox
	deadLetterURL string // serve: its dead-letter queue
}

func (p *puppetdbFlags) register(fs *flag.FlagSet, aws bool) {
	fs.StringVar(&p.urls, "puppetdb", "", "PuppetDB URLs (comma separated; https://HOST:8081, or http:// to a loopback address): "+
		"the farm sends facts, catalogs and reports there (PuppetDB's commands) and compiles run puppetdb_query() against it")
	fs.StringVar(&p.caFile, "puppetdb-ca", "", "CA certificate (PEM) PuppetDB's certificate is checked against: a FILE, or env:NAME; default: the farm's own CA")
	fs.StringVar(&p.cert, "puppetdb-cert", "", "client certificate (PEM) the farm presents to PuppetDB: a FILE, or env:NAME to read it from an environment variable; default: the front door's own certificate")
	fs.StringVar(&p.key, "puppetdb-key", "", "the private key (PEM) of --puppetdb-cert: a FILE or env:NAME")
	fs.DurationVar(&p.queryRefresh, "puppetdb-query-refresh", 5*time.Minute, "how often each distinct query compiles made of PuppetDB is run again (a changed result recompiles the nodes that made it)")
	fs.DurationVar(&p.factsEvery, "puppetdb-facts-every", 24*time.Hour, "how often a node's unchanged facts are sent to PuppetDB anyway, at a check-in in the node's slot (negative: only when they change)")
	fs.StringVar(&p.storeconfigs, "storeconfigs", "farm", "where collectors (<<| |>>) find exported resources: farm (the farm's own record) or puppetdb (PuppetDB's, for a fleet still partly on Puppet Server)")
	if aws {
		fs.StringVar(&p.outboxQueue, "puppetdb-outbox-queue", "", "URL of the SQS FIFO queue that holds PuppetDB's commands until they are delivered (required with --puppetdb)")
		fs.StringVar(&p.deadLetterURL, "puppetdb-dead-letter-queue", "", "URL of the SQS FIFO queue of the commands PuppetDB refused (required with --puppetdb)")
	}
}

// validate checks the flags before anything starts; it returns the URLs
// (none without --puppetdb).
func (p *puppetdbFlags) validate(aws bool) ([]*url.URL, error) {
	switch p.storeconfigs {
	case "farm", "puppetdb":
	default:
		return nil, fmt.Errorf("--storeconfigs %q: want farm or puppetdb", p.storeconfigs)
	}
	if p.urls == "" {
		if p.storeconfigs == "puppetdb" {
			return nil, fmt.Errorf("--storeconfigs puppetdb needs --puppetdb URL")
		}
		return nil, nil
	}
	urls, err := puppetdb.ParseURLs(p.urls)
	if err != nil {
		return nil, fmt.Errorf("--puppetdb: %w", err)
	}
	if (p.cert == "") != (p.key == "") {
		return nil, fmt.Errorf("--puppetdb-cert and --puppetdb-key go together")
	}
	if p.queryRefresh <= 0 {
		return nil, fmt.Errorf("--puppetdb-query-refresh must be positive")
	}
	if aws && (p.outboxQueue == "" || p.deadLetterURL == "") {
		return nil, fmt.Errorf("--puppetdb needs --puppetdb-outbox-queue and --puppetdb-dead-letter-queue (the SQS FIFO queues the stack creates)")
	}
	return urls, nil
}

// pemSource reads --puppetdb-cert or --puppetdb-key: a file, or env:NAME.
func pemSource(flagName, v string) ([]byte, error) {
	if name, ok := strings.CutPrefix(v, "env:"); ok {
		s := os.Getenv(name)
		if s == "" {
			return nil, fmt.Errorf("%s: environment variable %s is empty", flagName, name)
		}
		return []byte(s), nil
	}
	b, err := os.ReadFile(v)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", flagName, err)
	}
	return b, nil
}

// identity returns PuppetDB's CA (the farm's, or --puppetdb-ca) and the
// certificate the farm presents (its own, or --puppetdb-cert/-key).
func (p *puppetdbFlags) identity(farmCA []byte, own tls.Certificate) (caPEM []byte, cert tls.Certificate, err error) {
	caPEM, cert = farmCA, own
	if p.caFile != "" {
		if caPEM, err = pemSource("--puppetdb-ca", p.caFile); err != nil {
			return nil, tls.Certificate{}, err
		}
	}
	if p.cert != "" {
		c, err := pemSource("--puppetdb-cert", p.cert)
		if err != nil {
			return nil, tls.Certificate{}, err
		}
		k, err := pemSource("--puppetdb-key", p.key)
		if err != nil {
			return nil, tls.Certificate{}, err
		}
		if cert, err = tls.X509KeyPair(c, k); err != nil {
			return nil, tls.Certificate{}, fmt.Errorf("--puppetdb-cert/--puppetdb-key: %w", err)
		}
	}
	return caPEM, cert, nil
}

// engineConfig is the compile engine's PuppetDB (puppetdb_query(),
// --storeconfigs puppetdb): the same URLs and identity as the sink's; nil
// without --puppetdb.
func (p *puppetdbFlags) engineConfig(urls []*url.URL, farmCA []byte, own tls.Certificate) (*puppet.PuppetDB, string, error) {
	if len(urls) == 0 {
		return nil, puppet.StoreConfigsFarm, nil
	}
	caPEM, cert, err := p.identity(farmCA, own)
	if err != nil {
		return nil, "", err
	}
	var certPEM []byte
	for _, der := range cert.Certificate {
		certPEM = append(certPEM, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})...)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(cert.PrivateKey)
	if err != nil {
		return nil, "", fmt.Errorf("the PuppetDB client key: %w", err)
	}
	cfg := &puppet.PuppetDB{CACert: caPEM, Cert: certPEM, Key: pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})}
	for _, u := range urls {
		cfg.URLs = append(cfg.URLs, u.String())
	}
	return cfg, p.storeconfigs, nil
}

// tlsConfig is how the farm talks to PuppetDB: its own certificate (or
// --puppetdb-cert), PuppetDB's checked against the farm's CA (or
// --puppetdb-ca), as Puppet Server does with its host certificate.
func (p *puppetdbFlags) tlsConfig(farmCA []byte, own tls.Certificate) (*tls.Config, error) {
	caPEM, cert, err := p.identity(farmCA, own)
	if err != nil {
		return nil, err
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		from := "the farm's CA certificate"
		if p.caFile != "" {
			from = p.caFile + " (--puppetdb-ca)"
		}
		return nil, fmt.Errorf("no PEM certificate in %s", from)
	}
	return &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
}

// puppetdbSide is the running PuppetDB side: the front door's hook, the
// drainer and the refresher of the queries compiles made.
type puppetdbSide struct {
	sink      *puppetdb.Sink
	drainer   *puppetdb.Drainer
	refresher *querywatch.Refresher
}

// queryWatch are what the refresher needs: where compiles record their
// queries, and the intake that recompiles the nodes whose answer changed.
type queryWatch struct {
	queries farm.QueryStore
	intake  querywatch.Intake
}

// openPuppetDB wires the sink and the drainer over outbox; nil without
// --puppetdb. An unreachable PuppetDB does not stop the farm: the first
// deliveries say so, and the commands wait in the outbox.
func (p *puppetdbFlags) open(ctx context.Context, urls []*url.URL, outbox farm.Outbox, content puppetdb.Content, nodes puppetdb.NodeReader, qw queryWatch,
	farmCA []byte, own tls.Certificate, producer string, m *metrics.Farm, log *slog.Logger) (*puppetdbSide, error) {
	if len(urls) == 0 {
		return nil, nil
	}
	conf, err := p.tlsConfig(farmCA, own)
	if err != nil {
		return nil, err
	}
	client := puppetdb.NewClient(urls, conf, producer)
	pm := m.PuppetDB(outbox)
	plog := log.With("component", "puppetdb")
	s := &puppetdbSide{
		sink: &puppetdb.Sink{Outbox: outbox, Spill: content, Log: plog, Metrics: pm, FactsEvery: p.factsEvery},
		drainer: &puppetdb.Drainer{Outbox: outbox, Client: client, Log: plog, Metrics: pm,
			Commands: &puppetdb.Commands{Content: content, Nodes: nodes, Producer: producer}},
	}
	// Each distinct query compiles made runs again every
	// --puppetdb-query-refresh, and soon after facts or a catalog were
	// delivered (they may change an answer).
	s.refresher = querywatch.New(client, qw.queries, content, qw.intake)
	s.refresher.Interval, s.refresher.Metrics = p.queryRefresh, m.QueryRefresh()
	s.refresher.Log = log.With("component", "puppetdb-queries")
	// Facts and catalogs are what manifests query (inventory, resources);
	// a report delivered triggers nothing, or a fleet that reports every
	// few seconds would run every query every few seconds: queries over
	// reports see them at the next interval.
	s.drainer.Delivered = func(m puppetdb.Message) {
		if m.Kind != puppetdb.KindReport {
			s.refresher.Trigger()
		}
	}
	// Told, not waited for: a PuppetDB that does not answer (up to 10 s
	// per URL) must not hold up the farm's start.
	go func() {
		if err := client.Ping(ctx); err != nil {
			log.Warn("PuppetDB does not answer yet: commands wait in the outbox until it does", "puppetdb", p.urls, "err", err)
		} else {
			log.Info("feeding PuppetDB", "puppetdb", p.urls)
		}
	}()
	return s, nil
}

// with hooks the sink into the front door and adds the drainer to
// background; a nil side changes nothing.
func (s *puppetdbSide) with(fd *frontdoor.Server, background func(context.Context)) func(context.Context) {
	if s == nil {
		return background
	}
	fd.PuppetDB = s.sink
	return func(ctx context.Context) {
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { defer wg.Done(); s.drainer.Run(ctx) }()
		go func() { defer wg.Done(); s.refresher.Run(ctx) }()
		if background != nil {
			background(ctx)
		}
		wg.Wait()
	}
}

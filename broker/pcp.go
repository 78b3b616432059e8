package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"log/slog"
	"math/big"
	"time"

	"github.com/compilefarm/compilefarm/pkg/admin"
	"github.com/compilefarm/compilefarm/pkg/farm"
	"github.com/compilefarm/compilefarm/pkg/frontdoor"
	"github.com/compilefarm/compilefarm/pkg/metrics"
	"github.com/compilefarm/compilefarm/pkg/pcp/broker"
	"github.com/compilefarm/compilefarm/pkg/pcp/jobs"
)

// pcpFlags are the PCP broker's settings on dev and serve: where it
// listens (port 8142, as Puppet Enterprise's) and its limits.
type pcpFlags struct {
	listen        string
	idleTimeout   time.Duration
	maxConns      int
	maxMessageMiB int
}

func (p *pcpFlags) register(fs *flag.FlagSet, defaultListen string) {
	fs.StringVar(&p.listen, "pcp-listen", defaultListen,
		"PCP broker address (TLS websockets for pxp-agent: wss://HOST:PORT/pcp/, v2 on /pcp2/; client certificates from the farm's CA required); empty: no broker")
	fs.DurationVar(&p.idleTimeout, "pcp-idle-timeout", broker.DefaultIdleTimeout,
		"close a PCP connection that sent nothing (no message or ping) for this long; pxp-agent pings every 2 minutes")
	fs.IntVar(&p.maxConns, "pcp-max-connections", broker.DefaultMaxConnections,
		"PCP connections open at once; more are refused with HTTP 503 (pxp-agent retries with back-off). Mind the process's open-file limit")
	fs.IntVar(&p.maxMessageMiB, "pcp-max-message-mib", 64, "largest PCP message accepted, in MiB; a larger one closes the connection (1009)")
}

func (p *pcpFlags) validate() error {
	switch {
	case p.idleTimeout < time.Second:
		return fmt.Errorf("--pcp-idle-timeout must be at least 1s")
	case p.maxConns < 1:
		return fmt.Errorf("--pcp-max-connections must be at least 1")
	case p.maxMessageMiB < 1:
		return fmt.Errorf("--pcp-max-message-mib must be at least 1")
	}
	return nil
}

// pcpBackend is where a farm's PCP side keeps its state: presence and
// inboxes across tasks (nil for one process), jobs, and the nodes an
// environment's job runs on.
type pcpBackend struct {
	presence farm.PresenceStore
	inbox    farm.Inbox
	jobs     farm.RunJobStore
	nodes    pcpNodes
}

// pcpNodes are the node records jobs read: an environment's nodes, and a
// node's latest report (the run's report link).
type pcpNodes interface {
	jobs.NodeLister
	jobs.NodeReader
}

// pcpSide is a running farm's PCP broker and job runner.
type pcpSide struct {
	broker *broker.Broker
	runner *jobs.Runner
	tls    *tls.Config
	log    *slog.Logger
}

// open builds the broker (named after this task) and its job runner,
// attached as pcp://<name>/controller. It returns nil when the broker is
// off (--pcp-listen ""). tlsConf is the front door's configuration: the
// broker's requires a client certificate and speaks HTTP/1.1 only.
// pcpAuthority checks PCP clients' certificates: the farm's CA.
type pcpAuthority interface {
	IsRevoked(serial *big.Int) bool
	VerifyPeer(certs []*x509.Certificate) error
}

func (p *pcpFlags) open(name string, be pcpBackend, auth pcpAuthority, tlsConf *tls.Config, m *metrics.Farm, log *slog.Logger) (*pcpSide, error) {
	if p.listen == "" {
		return nil, nil
	}
	b, err := broker.New(broker.Options{
		Name: name, Presence: be.presence, Inbox: be.inbox, Revocations: auth, VerifyPeer: auth.VerifyPeer,
		IdleTimeout: p.idleTimeout, MaxConnections: p.maxConns, MaxMessageSize: p.maxMessageMiB << 20, Log: log,
	})
	if err != nil {
		return nil, fmt.Errorf("PCP broker: %w", err)
	}
	m.Registry.MustRegister(b.Collectors()...)
	conf := tlsConf.Clone()
	// The farm CA's VerifyConnection verifies the chain and revocation at
	// the handshake (the broker asks VerifyPeer again: crypto/tls itself
	// verified nothing); crypto/tls makes sure there is a certificate.
	conf.ClientAuth = tls.RequireAnyClientCert
	conf.NextProtos = []string{"http/1.1"}
	return &pcpSide{
		broker: b,
		runner: jobs.New(jobs.Config{Store: be.jobs, Presence: b, Nodes: be.nodes, Reports: be.nodes, Name: name, Logger: log}),
		tls:    conf, log: log,
	}, nil
}

// run attaches the job runner, resumes the jobs a restart interrupted, and
// does the broker's background work until ctx ends.
func (s *pcpSide) run(ctx context.Context) {
	local, err := s.broker.Attach(ctx, "controller", s.runner.Deliver)
	if err != nil {
		s.log.Error("attach the job runner to the PCP broker; jobs cannot run", "err", err)
	} else {
		s.runner.SetMessenger(local)
		go s.adopt(ctx)
	}
	if err := s.broker.Run(ctx); err != nil {
		s.log.Error("PCP broker stopped", "err", err)
	}
	s.runner.Close()
}

// adoptEvery is how often a task looks for jobs no runner runs any more:
// the runner's StaleAfter, after which a job of a task that died may be
// taken over (its replacement has another name, so it finds the job stale
// only after a while, not at its start).
const adoptEvery = 2 * time.Minute

// adopt resumes this task's interrupted jobs at start, then takes over the
// jobs of tasks that stopped, until ctx ends.
func (s *pcpSide) adopt(ctx context.Context) {
	t := time.NewTicker(adoptEvery)
	defer t.Stop()
	for {
		if err := s.runner.Resume(ctx); err != nil && ctx.Err() == nil {
			s.log.Error("resume jobs that no runner runs", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// status is the broker's entry in /status/v1/services.
func (s *pcpSide) status() frontdoor.ServiceStatus {
	return frontdoor.ServiceStatus{Name: "broker-service", Status: func() any { return s.broker.Stats() }}
}

// withPCP adds the broker to a farm's endpoints, front door status and
// operator API, and its work to background; a nil side changes nothing.
func (s *pcpSide) withPCP(e *endpoints, listen string, fd *frontdoor.Server, background func(context.Context)) func(context.Context) {
	if s == nil {
		return background
	}
	e.pcp, e.pcpHandler, e.pcpTLS = listen, s.broker.Handler(), s.tls
	fd.Services = append(fd.Services, s.status())
	return func(ctx context.Context) {
		done := make(chan struct{})
		go func() { defer close(done); s.run(ctx) }()
		if background != nil {
			background(ctx)
		}
		<-done
	}
}

// jobs is the operator API's job runner: nil (no jobs: 503) without a
// broker.
func (s *pcpSide) jobs() admin.Jobs {
	if s == nil {
		return nil
	}
	return s.runner
}

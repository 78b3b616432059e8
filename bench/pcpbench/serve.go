package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/compilefarm/compilefarm/bench/internal/loopback"
	"github.com/compilefarm/compilefarm/pkg/clientcert"
	"github.com/compilefarm/compilefarm/pkg/pcp/broker"
)

// serveOptions are `pcpbench serve`'s flags.
type serveOptions struct {
	listen, status, certs string
	maxConns              int
	idleTimeout           time.Duration
	logLevel              slog.Level
	profileDir            string
}

// serveMain is `pcpbench serve`: the real broker (pkg/pcp/broker) alone in
// this process, over TLS configured as `broker serve` configures it, with
// client certificates from the bench CA, and a plain-HTTP status endpoint
// on loopback. It prints one line, "pcpbench serve: pcp=ADDR status=ADDR
// pid=PID", once both listen, and runs until SIGTERM or SIGINT.
func serveMain(args []string) error {
	var o serveOptions
	fs := flag.NewFlagSet("pcpbench serve", flag.ContinueOnError)
	fs.StringVar(&o.listen, "listen", "127.0.0.1:0", "the broker's PCP address (loopback only)")
	fs.StringVar(&o.status, "status", "127.0.0.1:0", "plain-HTTP status address (loopback only): GET /stats")
	fs.StringVar(&o.certs, "certs", "", "directory with ca.pem, broker.pem and broker-key.pem (written by `pcpbench run`)")
	fs.IntVar(&o.maxConns, "max-connections", 0, "the broker's MaxConnections (0: its default)")
	fs.DurationVar(&o.idleTimeout, "idle-timeout", 0, "the broker's IdleTimeout (0: its default, 6m)")
	fs.StringVar(&o.profileDir, "profile-dir", "", "directory where POST /cpuprofile/start?name=NAME.pprof on the status address writes a CPU profile (until POST /cpuprofile/stop)")
	fs.TextVar(&o.logLevel, "log-level", slog.LevelInfo, "the broker's log level (debug, info, warn, error); logs go to stderr")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if o.certs == "" {
		return errors.New("--certs is required")
	}
	if err := loopback.Check("--listen", o.listen); err != nil {
		return err
	}
	if err := loopback.Check("--status", o.status); err != nil {
		return err
	}
	if _, err := raiseFileLimit(0); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return serve(ctx, o)
}

func serve(ctx context.Context, o serveOptions) error {
	cert, caCert, err := loadServerFiles(o.certs)
	if err != nil {
		return err
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: o.logLevel}))
	check := clientCheck(caCert)
	b, err := broker.New(broker.Options{
		Name:           brokerCN,
		IdleTimeout:    o.idleTimeout,
		MaxConnections: o.maxConns,
		// As `broker serve` (broker/pcp.go): the CA checks the certificate
		// again at the upgrade (a cache hit), and every open connection's
		// every 10 s (none is revoked here).
		VerifyPeer:  check.VerifyPeer,
		Revocations: neverRevoked{},
		Log:         logger,
	})
	if err != nil {
		return err
	}
	tlsConfig := brokerTLS(cert, check)
	ln, err := net.Listen("tcp", o.listen)
	if err != nil {
		return fmt.Errorf("the broker's listener: %w", err)
	}
	sln, err := net.Listen("tcp", o.status)
	if err != nil {
		ln.Close()
		return fmt.Errorf("the status listener: %w", err)
	}
	// As `broker serve` (broker/serve.go): the upgrade request is bounded;
	// handshake errors are logged at debug level.
	srv := &http.Server{
		Handler:           b.Handler(),
		TLSConfig:         tlsConfig,
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelDebug),
	}
	cpu := &cpuProfiler{dir: o.profileDir}
	defer cpu.stop()
	statusSrv := &http.Server{Handler: statusHandler(b, cpu), ReadHeaderTimeout: 10 * time.Second}

	runCtx, cancel := context.WithCancel(context.Background())
	defer cancel()
	runDone := make(chan error, 1)
	go func() { runDone <- b.Run(runCtx) }()
	go srv.ServeTLS(ln, "", "")
	go statusSrv.Serve(sln)
	fmt.Printf("pcpbench serve: pcp=%s status=%s pid=%d\n", ln.Addr(), sln.Addr(), os.Getpid())

	select {
	case <-ctx.Done():
	case err := <-runDone:
		return fmt.Errorf("the broker stopped by itself: %v", err)
	}
	// The broker closes its websockets (1001 going away) when Run's
	// context ends; the HTTP server then has nothing left but its listener.
	ln.Close()
	cancel()
	select {
	case err := <-runDone:
		if err != nil {
			logger.Warn("pcpbench serve: the broker's Run", "err", err)
		}
	case <-time.After(10 * time.Second):
		logger.Warn("pcpbench serve: the broker's Run did not return 10s after shutdown began")
	}
	srv.Close()
	statusSrv.Close()
	return nil
}

// neverRevoked is a broker.Revocations for a CA that revoked nothing.
type neverRevoked struct{}

func (neverRevoked) IsRevoked(*big.Int) bool { return false }

// clientCheck checks clients' certificates against the bench CA as the
// farm's CA does (pkg/clientcert.Check, with its cache of verified
// certificates).
func clientCheck(caCert *x509.Certificate) clientcert.Check {
	pool := x509.NewCertPool()
	pool.AddCert(caCert)
	return clientcert.Check{
		Roots:     pool,
		Issuers:   []*x509.Certificate{caCert},
		IsRevoked: neverRevoked{}.IsRevoked,
		Verified:  clientcert.NewVerifiedCache(0),
	}
}

// brokerTLS is the TLS configuration of `broker serve`'s PCP listener
// (broker/pcp.go on pkg/ca's ServerTLSConfig): TLS 1.2 or later, no
// session tickets, full-size records, a client certificate required
// (RequireAnyClientCert) and verified by check's VerifyConnection, HTTP/1.1
// only.
func brokerTLS(cert tls.Certificate, check clientcert.Check) *tls.Config {
	conf := check.TLSConfig(cert)
	conf.ClientAuth = tls.RequireAnyClientCert
	conf.NextProtos = []string{"http/1.1"}
	return conf
}

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
	"os"
	"path/filepath"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"

	"github.com/compilefarm/compilefarm/pkg/ca"
	"github.com/compilefarm/compilefarm/pkg/cadir"
	"github.com/compilefarm/compilefarm/pkg/cakey"
	"github.com/compilefarm/compilefarm/pkg/caproxy"
	"github.com/compilefarm/compilefarm/pkg/dynamostate"
	"github.com/compilefarm/compilefarm/pkg/farm"
	"github.com/compilefarm/compilefarm/pkg/pki"
)

// authority is what a serving front door needs of its CA: the CA
// endpoints, the revocation check and the TLS configuration.
type authority interface {
	farm.CA
	Close() error
	IsRevoked(serial *big.Int) bool
	VerifyPeer(certs []*x509.Certificate) error
	ServerTLSConfig(server tls.Certificate) *tls.Config
}

// caFlags choose where serve's CA lives: records in DynamoDB with the key
// in a file or a Secrets Manager secret, a directory shared by the tasks,
// or an upstream Puppet CA that requests are proxied to.
type caFlags struct {
	table, keyFile, keySecret string
	dir                       string
	upstream, upstreamCACert  string
}

func (c *caFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&c.table, "ca-table", "", "DynamoDB table of the CA's serial, index and CRL (create the CA once with `broker ca init`)")
	fs.StringVar(&c.keyFile, "ca-key-file", "", "with --ca-table: PEM file holding the CA key")
	fs.StringVar(&c.keySecret, "ca-key-secret", "", "with --ca-table: AWS Secrets Manager secret (name or ARN) holding the CA key")
	fs.StringVar(&c.dir, "ca-dir", "", "directory of the CA (Puppet cadir layout), shared by the tasks that sign: one host or a filesystem with working flock")
	fs.StringVar(&c.upstream, "ca-upstream", "", "proxy CA requests to this Puppet CA (https://HOST:8140) instead of signing here")
	fs.StringVar(&c.upstreamCACert, "ca-upstream-cacert", "", "with --ca-upstream: PEM of the upstream's CA certificate (default: trust the one it serves on first use and keep it)")
}

// validate checks that exactly one CA is chosen, with what it needs.
func (c *caFlags) validate() error {
	n := 0
	for _, v := range []string{c.table, c.dir, c.upstream} {
		if v != "" {
			n++
		}
	}
	if n != 1 {
		return errors.New("choose one CA: --ca-table (with --ca-key-file or --ca-key-secret), --ca-dir, or --ca-upstream")
	}
	if c.table != "" {
		return c.validateKey()
	}
	if c.keyFile != "" || c.keySecret != "" {
		return errors.New("--ca-key-file and --ca-key-secret go with --ca-table")
	}
	if c.upstreamCACert != "" && c.upstream == "" {
		return errors.New("--ca-upstream-cacert goes with --ca-upstream")
	}
	return nil
}

func (c *caFlags) validateKey() error {
	if (c.keyFile == "") == (c.keySecret == "") {
		return errors.New("--ca-table needs the CA key from exactly one of --ca-key-file or --ca-key-secret")
	}
	return nil
}

func (c *caFlags) keySource(awsCfg aws.Config) farm.CAKeySource {
	if c.keySecret != "" {
		return cakey.NewSecret(secretsmanager.NewFromConfig(awsCfg), c.keySecret)
	}
	return cadir.KeyFile(c.keyFile)
}

// open opens the chosen CA and gets the front door's certificate from it.
// With an upstream CA that can mean waiting for an operator to sign it.
// awsCfg matters only with --ca-table; work holds the local files of the
// upstream and table CAs.
func (c *caFlags) open(ctx context.Context, awsCfg aws.Config, work string, opts ca.Options,
	certname string, altNames []string, keyType string, log *slog.Logger) (authority, tls.Certificate, func(), error) {
	auth, err := c.openAuthority(ctx, awsCfg, work, opts, log)
	if err != nil {
		return nil, tls.Certificate{}, nil, err
	}
	var cert tls.Certificate
	switch a := auth.(type) {
	case *caproxy.CA:
		log.Info("getting the front door's certificate from the upstream CA", "upstream", c.upstream, "certname", certname)
		if cert, err = a.ServerCert(ctx, certname, altNames, keyType); err != nil {
			err = fmt.Errorf("server certificate from %s: %w", c.upstream, err)
		}
	case *ca.CA:
		if cert, err = a.IssueServerCert(ctx, certname, altNames, keyType); err != nil {
			err = fmt.Errorf("issue server certificate: %w", err)
		}
	}
	if err != nil {
		auth.Close()
		return nil, tls.Certificate{}, nil, err
	}
	return auth, cert, func() { auth.Close() }, nil
}

// openAuthority opens the chosen CA, without a certificate of its own: a
// front door's open, and an operator command's with --backend aws.
func (c *caFlags) openAuthority(ctx context.Context, awsCfg aws.Config, work string, opts ca.Options, log *slog.Logger) (authority, error) {
	if c.upstream != "" {
		p, err := caproxy.Open(ctx, caproxy.Options{Upstream: c.upstream, CACertFile: c.upstreamCACert,
			Dir: filepath.Join(work, "ca-upstream"), Logger: log})
		if err != nil {
			return nil, err
		}
		return p, nil
	}
	if c.table != "" {
		opts.ServerDir = filepath.Join(work, "server-cert")
		opts.Name = "" // named by `broker ca init`; the certname is not the CA's name here
		store := dynamostate.NewCAStore(dynamodb.NewFromConfig(awsCfg), c.table)
		a, err := ca.New(ctx, store, c.keySource(awsCfg), opts)
		if err != nil {
			return nil, fmt.Errorf("open CA in DynamoDB table %s: %w", c.table, err)
		}
		return a, nil
	}
	a, err := cadir.OpenCA(ctx, c.dir, opts)
	if err != nil {
		return nil, err
	}
	return a, nil
}

// serverAltNames are the names the front door's certificate covers: the
// loopback names, its certname, "puppet" and the extra ones (comma separated).
func serverAltNames(certname, extra string) []string {
	return append([]string{"localhost", "127.0.0.1", "::1", certname, "puppet"}, splitList(extra)...)
}

// runCAInit creates the CA of a fleet in DynamoDB: the key in the key
// source (a new one unless it already holds one, or the one --import-key
// gives), the certificate, CRL and serial counter in the table. Running it
// again changes nothing.
func runCAInit(ctx context.Context, args []string) error {
	var c caFlags
	fs := flag.NewFlagSet("ca init", flag.ExitOnError)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: broker ca init --ca-table TABLE (--ca-key-file FILE | --ca-key-secret ID) [--import-key FILE] [--name NAME]")
		fmt.Fprintln(fs.Output(), "Creates the fleet's CA for `broker serve --ca-table`. AWS endpoints and credentials come from the standard AWS configuration.")
		fmt.Fprintln(fs.Output(), "--import-key brings an existing CA key (Puppet Server's ca_key.pem) into the key source first: a file or a")
		fmt.Fprintln(fs.Output(), "Secrets Manager secret, which the signing tasks then read (see docs/operations.md on key custody). The CA")
		fmt.Fprintln(fs.Output(), "certificate is made anew with that key: give --name the name of the CA it takes over from.")
		fs.PrintDefaults()
	}
	fs.StringVar(&c.table, "ca-table", "", "DynamoDB table for the CA's records (required)")
	fs.StringVar(&c.keyFile, "ca-key-file", "", "PEM file for the CA key (made 0600 if missing)")
	fs.StringVar(&c.keySecret, "ca-key-secret", "", "AWS Secrets Manager secret (name or ARN) for the CA key (created if missing)")
	name := fs.String("name", "compilefarm", `the CA's name: its subject is "Puppet CA: NAME"`)
	bits := fs.Int("key-bits", 4096, "RSA key size of a new CA key")
	importKey := fs.String("import-key", "", "PEM file of an existing CA key (Puppet Server's ca_key.pem: PKCS#1, SEC 1 or PKCS#8) to import into the key source, which must hold none or that key")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if c.table == "" {
		fs.Usage()
		return errors.New("ca init: --ca-table is required")
	}
	if err := c.validateKey(); err != nil {
		fs.Usage()
		return fmt.Errorf("ca init: %w", err)
	}
	awsCfg, err := loadAWSConfig(ctx)
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "ca-init-*")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	keys := c.keySource(awsCfg)
	if *importKey != "" {
		if err := importCAKey(ctx, keys, *importKey); err != nil {
			return fmt.Errorf("ca init: %w", err)
		}
		fmt.Fprintf(os.Stderr, "imported the CA key from %s into %s\n", *importKey, keys)
	}
	fmt.Fprintf(os.Stderr, "creating the CA in DynamoDB table %s with the key in %s (a %d-bit key takes a few seconds)...\n", c.table, keys, *bits)
	a, err := ca.Init(ctx, dynamostate.NewCAStore(dynamodb.NewFromConfig(awsCfg), c.table), keys,
		ca.Options{Name: *name, KeyBits: *bits, ServerDir: tmp, Logger: slog.New(slog.NewTextHandler(os.Stderr, nil))})
	if err != nil {
		return fmt.Errorf("ca init: %w", err)
	}
	defer a.Close()
	cert := a.CACert()
	fmt.Printf("CA %q ready in table %s, key in %s\nfingerprint (SHA256) %s\nnot after %s\n",
		cert.Subject.CommonName, c.table, keys, pki.Fingerprint(cert.Raw), cert.NotAfter.UTC().Format("2006-01-02"))
	return nil
}

// importCAKey imports the PEM key in file into keys before the CA is
// created: keys must be able to import (a file or a Secrets Manager secret;
// a KMS key's material is imported with AWS's own ImportKeyMaterial), and
// hold no key or that same key (ca init run again).
func importCAKey(ctx context.Context, keys farm.CAKeySource, file string) error {
	importer, ok := keys.(farm.CAKeyImporter)
	if !ok {
		return fmt.Errorf("--import-key: %s cannot import a key; import into --ca-key-file or --ca-key-secret, "+
			"or import the key material into a KMS key with AWS's ImportKeyMaterial (docs/operations.md): %w", keys, farm.ErrInvalid)
	}
	keyPEM, err := os.ReadFile(file)
	if err != nil {
		return fmt.Errorf("--import-key: %w", err)
	}
	err = importer.ImportKey(ctx, keyPEM)
	if !errors.Is(err, farm.ErrConflict) {
		if err != nil {
			return fmt.Errorf("--import-key %s: %w", file, err)
		}
		return nil
	}
	held, herr := importer.Signer(ctx)
	want, perr := pki.ParsePrivateKey(keyPEM)
	if herr == nil && perr == nil && pki.PublicKeysEqual(held.Public(), want.Public()) {
		return nil // imported before: ca init run again
	}
	return fmt.Errorf("--import-key %s: %s already holds another key: %w", file, keys, err)
}

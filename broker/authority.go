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
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/kms"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"

	"github.com/compilefarm/compilefarm/pkg/ca"
	"github.com/compilefarm/compilefarm/pkg/cadir"
	"github.com/compilefarm/compilefarm/pkg/cakey"
	"github.com/compilefarm/compilefarm/pkg/caproxy"
	"github.com/compilefarm/compilefarm/pkg/dynamostate"
	"github.com/compilefarm/compilefarm/pkg/farm"
	"github.com/compilefarm/compilefarm/pkg/kmskey"
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
// in a KMS key, a Secrets Manager secret or a file, a directory shared by
// the tasks, or an upstream Puppet CA that requests are proxied to.
type caFlags struct {
	table                      string
	keyKMS, keySecret, keyFile string
	dir                        string
	upstream, upstreamCACert   string
}

func (c *caFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&c.table, "ca-table", "", "DynamoDB table of the CA's serial, index and CRL (create the CA once with `broker ca init`)")
	fs.StringVar(&c.keyKMS, "ca-key-kms", "", "with --ca-table: AWS KMS asymmetric signing key holding the CA key, which never leaves KMS (key ID, key ARN, alias name or alias ARN)")
	fs.StringVar(&c.keySecret, "ca-key-secret", "", "with --ca-table: AWS Secrets Manager secret (name or ARN) holding the CA key")
	fs.StringVar(&c.keyFile, "ca-key-file", "", "with --ca-table: PEM file holding the CA key")
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
		return errors.New("choose one CA: --ca-table (with --ca-key-kms, --ca-key-secret or --ca-key-file), --ca-dir, or --ca-upstream")
	}
	if c.table != "" {
		return c.validateKey()
	}
	if keys := c.keyFlags(); len(keys) > 0 {
		return fmt.Errorf("%s goes with --ca-table: the other CAs keep their key themselves (--ca-dir) or sign nothing (--ca-upstream)", keys[0])
	}
	if c.upstreamCACert != "" && c.upstream == "" {
		return errors.New("--ca-upstream-cacert goes with --ca-upstream")
	}
	return nil
}

// validateKey checks that --ca-table has its key from exactly one source.
func (c *caFlags) validateKey() error {
	switch keys := c.keyFlags(); len(keys) {
	case 0:
		return errors.New("--ca-table needs the CA key from one of --ca-key-kms (a KMS key; the key never leaves KMS), --ca-key-secret or --ca-key-file")
	case 1:
		return nil
	default:
		return fmt.Errorf("--ca-table takes the CA key from one source, not %s and %s: keep only one",
			strings.Join(keys[:len(keys)-1], ", "), keys[len(keys)-1])
	}
}

// keyFlags are the key source flags given, in the order of keySource.
func (c *caFlags) keyFlags() []string {
	var given []string
	for _, f := range []struct{ name, v string }{{"--ca-key-kms", c.keyKMS}, {"--ca-key-secret", c.keySecret}, {"--ca-key-file", c.keyFile}} {
		if f.v != "" {
			given = append(given, f.name)
		}
	}
	return given
}

// keySource is the CA key source the flags name (validateKey passed); its
// AWS client, if any, is made from awsCfg without calling AWS.
func (c *caFlags) keySource(awsCfg aws.Config) farm.CAKeySource {
	switch {
	case c.keyKMS != "":
		return kmskey.NewKey(kms.NewFromConfig(awsCfg), c.keyKMS)
	case c.keySecret != "":
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

// caInitFlags are broker ca init's flags.
type caInitFlags struct {
	ca        caFlags // the table and one key source
	name      string
	bits      int
	importKey string
}

func (f *caInitFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.ca.table, "ca-table", "", "DynamoDB table for the CA's records (required)")
	fs.StringVar(&f.ca.keyKMS, "ca-key-kms", "", "AWS KMS key for the CA key, which never leaves KMS: the stack's alias (alias/compilefarm/STAGE/ca), "+
		"a key ID or key ARN, or an alias (name or ARN) that does not exist yet, created with a new RSA key of --key-bits (2048, 3072 or 4096)")
	fs.StringVar(&f.ca.keySecret, "ca-key-secret", "", "AWS Secrets Manager secret (name or ARN) for the CA key (created if missing)")
	fs.StringVar(&f.ca.keyFile, "ca-key-file", "", "PEM file for the CA key (made 0600 if missing)")
	fs.StringVar(&f.name, "name", "compilefarm", `the CA's name: its subject is "Puppet CA: NAME"`)
	fs.IntVar(&f.bits, "key-bits", 4096, "RSA key size of a new CA key")
	fs.StringVar(&f.importKey, "import-key", "", "PEM file of an existing CA key (Puppet Server's ca_key.pem: PKCS#1, SEC 1 or PKCS#8) to import into "+
		"--ca-key-secret or --ca-key-file, which must hold none or that key")
}

// validate checks the table, one key source, and that --import-key has a
// source it can import into.
func (f *caInitFlags) validate() error {
	if f.ca.table == "" {
		return errors.New("--ca-table is required")
	}
	if err := f.ca.validateKey(); err != nil {
		return err
	}
	if f.importKey != "" && f.ca.keyKMS != "" {
		return errors.New("--import-key cannot put a key into a KMS key (--ca-key-kms): import the key material with AWS's ImportKeyMaterial " +
			"(docs/operations.md, \"The CA key in KMS\"), then run ca init with --ca-key-kms alone; or import into --ca-key-secret, where the tasks read the key (weaker custody)")
	}
	return nil
}

// runCAInit creates the CA of a fleet in DynamoDB: the key in the key
// source (a new one unless it already holds one, or the one --import-key
// gives), the certificate, CRL and serial counter in the table. Running it
// again changes nothing.
func runCAInit(ctx context.Context, args []string) error {
	var f caInitFlags
	fs := flag.NewFlagSet("ca init", flag.ExitOnError)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: broker ca init --ca-table TABLE (--ca-key-kms KEY | --ca-key-secret ID | --ca-key-file FILE) [--import-key FILE] [--name NAME]")
		fmt.Fprintln(fs.Output(), "Creates the fleet's CA for `broker serve --ca-table`. AWS endpoints and credentials come from the standard AWS configuration.")
		fmt.Fprintln(fs.Output(), "With --ca-key-kms the CA signs inside KMS with a key that never leaves it: the stack's key, or a new one under an alias.")
		fmt.Fprintln(fs.Output(), "--import-key brings an existing CA key (Puppet Server's ca_key.pem) into the key source first: a Secrets Manager")
		fmt.Fprintln(fs.Output(), "secret or a file, which the signing tasks then read (see docs/operations.md on key custody; a KMS key's material")
		fmt.Fprintln(fs.Output(), "is imported with AWS's ImportKeyMaterial). The CA certificate is made anew with that key: give --name the name of")
		fmt.Fprintln(fs.Output(), "the CA it takes over from.")
		fs.PrintDefaults()
	}
	f.register(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := f.validate(); err != nil {
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
	keys := f.ca.keySource(awsCfg)
	if f.importKey != "" {
		if err := importCAKey(ctx, keys, f.importKey); err != nil {
			return fmt.Errorf("ca init: %w", err)
		}
		fmt.Fprintf(os.Stderr, "imported the CA key from %s into %s\n", f.importKey, keys)
	}
	fmt.Fprintf(os.Stderr, "creating the CA in DynamoDB table %s with the key in %s (a new %d-bit key takes a few seconds)...\n", f.ca.table, keys, f.bits)
	a, err := ca.Init(ctx, dynamostate.NewCAStore(dynamodb.NewFromConfig(awsCfg), f.ca.table), keys,
		ca.Options{Name: f.name, KeyBits: f.bits, ServerDir: tmp, Logger: slog.New(slog.NewTextHandler(os.Stderr, nil))})
	if err != nil {
		return fmt.Errorf("ca init: %w", err)
	}
	defer a.Close()
	cert := a.CACert()
	fmt.Printf("CA %q ready in table %s, key in %s\nfingerprint (SHA256) %s\nnot after %s\n",
		cert.Subject.CommonName, f.ca.table, keys, pki.Fingerprint(cert.Raw), cert.NotAfter.UTC().Format("2006-01-02"))
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

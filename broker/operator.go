package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/compilefarm/compilefarm/internal/atomicfile"
	"github.com/compilefarm/compilefarm/pkg/admin"
	"github.com/compilefarm/compilefarm/pkg/ca"
	"github.com/compilefarm/compilefarm/pkg/frontdoor"
)

// operatorFlags choose how an operator command reaches the operator API:
// a broker's loopback --admin-listen (http://), its front door with an
// operator certificate (https://, mTLS), or --backend aws, which builds the
// operator API in this process over the stage's AWS resources and calls it
// with this machine's AWS credentials, through no listener.
type operatorFlags struct {
	admin, cert, key, caCert string
	backend                  string
	aws                      awsFlags
	// code deploy with --backend aws reads code on this machine.
	environments   string
	basemodulepath basemodulepathFlag
}

// register adds the flags to fs; withCode adds --environments and
// --basemodulepath (code deploy with --backend aws).
func (o *operatorFlags) register(fs *flag.FlagSet, withCode bool) {
	fs.StringVar(&o.admin, "admin", defaultAdmin, "operator API: a broker's --admin-listen (http://127.0.0.1:9141, on its host), "+
		"or its front door (https://HOST:8140, with --cert, --key and --ca-cert)")
	fs.StringVar(&o.cert, "cert", "", "with --admin https://HOST:8140: the operator certificate (PEM, from `broker ca generate NAME --operator`)")
	fs.StringVar(&o.key, "key", "", "with --admin https://HOST:8140: the operator certificate's key (PEM)")
	fs.StringVar(&o.caCert, "ca-cert", "", "with --admin https://HOST:8140: the farm's CA certificate (PEM), to verify the front door")
	fs.StringVar(&o.backend, "backend", "", "aws: run the operator API in this process on the stage's AWS resources (the broker serve flags "+
		"below name them) with this machine's AWS credentials; --admin is not used")
	o.aws.register(fs)
	if withCode {
		fs.StringVar(&o.environments, "environments", "", "with --backend aws: the environmentpath on this machine that code deploy reads")
		fs.Var(&o.basemodulepath, "basemodulepath", "with --backend aws: "+basemodulepathUsage)
	}
}

// operatorFlagSet is the flag set of operator command name, with the
// operator flags registered (withCode: as for register) and usage, when
// not empty, printed above the flags' defaults.
func operatorFlagSet(name, usage string, withCode bool) (*flag.FlagSet, *operatorFlags) {
	fs := flag.NewFlagSet(name, flag.ExitOnError)
	if usage != "" {
		fs.Usage = func() {
			fmt.Fprintln(fs.Output(), usage)
			fs.PrintDefaults()
		}
	}
	op := &operatorFlags{}
	op.register(fs, withCode)
	return fs, op
}

// with calls fn with the operator API's client and releases the client
// once fn returns.
func (o *operatorFlags) with(ctx context.Context, fn func(c *admin.Client) error) error {
	c, done, err := o.client(ctx)
	if err != nil {
		return err
	}
	defer done()
	return fn(c)
}

// connect parses args as parseInterspersed does and returns the
// positional arguments, the operator API's client and what to call when
// done with it.
func (o *operatorFlags) connect(ctx context.Context, fs *flag.FlagSet, args []string) ([]string, *admin.Client, func(), error) {
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return nil, nil, nil, err
	}
	c, done, err := o.client(ctx)
	if err != nil {
		return nil, nil, nil, err
	}
	return pos, c, done, nil
}

// client returns the operator API's client and what to call when done.
func (o *operatorFlags) client(ctx context.Context) (*admin.Client, func(), error) {
	switch o.backend {
	case "":
	case "aws":
		return o.awsClient(ctx)
	default:
		return nil, nil, fmt.Errorf("--backend %q: the operator commands take --backend aws, or none (--admin URL)", o.backend)
	}
	u, err := url.Parse(o.admin)
	if err != nil || u.Host == "" {
		return nil, nil, fmt.Errorf("--admin %q: want http://127.0.0.1:PORT (a broker's --admin-listen) or https://HOST:8140 (its front door)", o.admin)
	}
	base := strings.TrimSuffix(o.admin, "/")
	switch u.Scheme {
	case "http":
		if o.cert != "" || o.key != "" || o.caCert != "" {
			return nil, nil, fmt.Errorf("--cert, --key and --ca-cert go with --admin https://HOST:8140 (a front door); %s is a loopback "+
				"operator API, which takes no certificate", o.admin)
		}
		return &admin.Client{Base: base}, func() {}, nil
	case "https":
	default:
		return nil, nil, fmt.Errorf("--admin %q: want http:// (a broker's --admin-listen) or https:// (its front door)", o.admin)
	}
	if o.cert == "" || o.key == "" || o.caCert == "" {
		return nil, nil, fmt.Errorf("--admin %s is a front door: its operator API needs an operator certificate, --cert FILE --key FILE "+
			"--ca-cert FILE (create them on the broker's host with: broker ca generate NAME --operator --out DIR)", o.admin)
	}
	conf, err := operatorTLS(o.cert, o.key, o.caCert)
	if err != nil {
		return nil, nil, err
	}
	if u.Path == "" || u.Path == "/" {
		base += frontdoor.OperatorPrefix
	}
	tr := &http.Transport{TLSClientConfig: conf, TLSHandshakeTimeout: 30 * time.Second, ForceAttemptHTTP2: true}
	return &admin.Client{Base: base, HTTP: &http.Client{Transport: tr, Timeout: 10 * time.Minute}}, tr.CloseIdleConnections, nil
}

// operatorTLS is the client side of the front door's mTLS: the operator's
// certificate, and the farm's CA as the only root.
func operatorTLS(certFile, keyFile, caFile string) (*tls.Config, error) {
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("load the operator certificate (--cert %s, --key %s): %w", certFile, keyFile, err)
	}
	caPEM, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("read the farm's CA certificate (--ca-cert): %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("--ca-cert %s holds no PEM certificate (want the farm's CA, ca.pem beside the operator certificate)", caFile)
	}
	return &tls.Config{Certificates: []tls.Certificate{pair}, RootCAs: pool, MinVersion: tls.VersionTLS12}, nil
}

// awsClient builds the operator API, as broker serve does, over the AWS
// drivers named by the flags and calls it in process.
func (o *operatorFlags) awsClient(ctx context.Context) (*admin.Client, func(), error) {
	if err := o.aws.validate(); err != nil {
		return nil, nil, fmt.Errorf("--backend aws names the stage's resources with broker serve's flags: %w", err)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	var baseModulepath []string
	if o.environments != "" {
		var err error
		if baseModulepath, err = o.basemodulepath.resolve(o.environments); err != nil {
			return nil, nil, err
		}
	}
	awsCfg, err := loadAWSConfig(ctx)
	if err != nil {
		return nil, nil, err
	}
	// Environment records are read from DynamoDB every time (a negative
	// TTL): front doors change them too.
	f, err := o.aws.openFarm(awsCfg, awsFarmOptions{envCache: -1, environments: o.environments, baseModulepath: baseModulepath}, log)
	if err != nil {
		return nil, nil, err
	}
	work, err := os.MkdirTemp("", "broker-operator-*")
	if err != nil {
		return nil, nil, err
	}
	if d := o.aws.ca.dir; d != "" {
		// An operator's command opens the stage's CA; it never makes one.
		if _, err := os.Stat(filepath.Join(d, "ca_crt.pem")); err != nil {
			os.RemoveAll(work)
			return nil, nil, fmt.Errorf("--ca-dir %s holds no CA (ca_crt.pem): give the directory the stage's front doors sign with", d)
		}
	}
	auth, err := o.aws.ca.openAuthority(ctx, awsCfg, work, ca.Options{Logger: log}, log)
	if err != nil {
		os.RemoveAll(work)
		return nil, nil, err
	}
	h := adminHandler(&admin.Server{CA: auth, Nodes: f.state, Envs: f.state, Deployer: f.deployer, Explainer: f.intake, Reports: f.content})
	done := func() {
		auth.Close()
		os.RemoveAll(work)
	}
	return &admin.Client{Base: "http://in-process", HTTP: &http.Client{Transport: admin.InProcess(h)}}, done, nil
}

// errNoCode is code deploy with --backend aws and no code to read.
var errNoCode = errors.New("code deploy --backend aws reads the code on this machine: give --environments DIR (the environmentpath) or --from DIR")

// generateOperator makes a key and a request for pp_cli_auth on this
// machine, has the CA sign it through c, and writes NAME.key.pem (0600),
// NAME.cert.pem and ca.pem into dir: the key never leaves this machine.
func generateOperator(ctx context.Context, c *admin.Client, name, dir string, out io.Writer) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("generate key: %w", err)
	}
	cliAuth, err := asn1.MarshalWithParams("true", "utf8")
	if err != nil {
		return err
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject:         pkix.Name{CommonName: name},
		ExtraExtensions: []pkix.Extension{{Id: oidPPCliAuth, Value: cliAuth}},
	}, key)
	if err != nil {
		return fmt.Errorf("create certificate request: %w", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	paths := map[string]string{"key": filepath.Join(dir, name+".key.pem"), "cert": filepath.Join(dir, name+".cert.pem"), "ca": filepath.Join(dir, "ca.pem")}
	if _, err := os.Stat(paths["key"]); err == nil {
		return fmt.Errorf("%s exists: remove it, or choose another --out directory", paths["key"])
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create --out %s: %w", dir, err)
	}
	issued, err := c.Generate(ctx, name, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}))
	if err != nil {
		return fmt.Errorf("ca generate %s: %w", name, err)
	}
	for _, f := range []struct {
		path string
		data []byte
		mode os.FileMode
	}{
		{paths["key"], pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600},
		{paths["cert"], []byte(issued.Certificate), 0o644},
		{paths["ca"], []byte(issued.CA), 0o644},
	} {
		if err := atomicfile.Write(f.path, f.data, f.mode); err != nil {
			return err
		}
	}
	fmt.Fprintf(out, "operator certificate for %s (pp_cli_auth) in %s: %s, %s, %s\n", name, dir,
		filepath.Base(paths["key"]), filepath.Base(paths["cert"]), filepath.Base(paths["ca"]))
	fmt.Fprintf(out, "use it with: broker nodes --admin https://HOST:8140 --cert %s --key %s --ca-cert %s\n", paths["cert"], paths["key"], paths["ca"])
	fmt.Fprintf(out, "revoke it with: broker ca revoke %s\n", name)
	return nil
}

// oidPPCliAuth is Puppet's pp_cli_auth extension.
var oidPPCliAuth = asn1.ObjectIdentifier{1, 3, 6, 1, 4, 1, 34380, 1, 3, 39}

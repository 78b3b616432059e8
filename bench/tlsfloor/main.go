// Command tlsfloor measures the floor under the front door's CPU per agent
// run: it serves an agent run's requests (those bench/agentsim makes)
// with bytes it has ready, over the front door's own TLS set-up (pkg/ca's
// ServerTLSConfig on the farm's CA, so the same handshake, client
// certificate check and revocation look-up) and net/http server, and does
// no farm work at all. agentsim's "broker CPU per run" against it is what
// Go's TLS, HTTP and runtime cost for that traffic on the machine: no
// front door can take less per run.
//
//	tlsfloor capture --from ADDR --ca-dir DATA/ca --cert AGENT.pem --out DIR
//	tlsfloor serve --ca-dir DATA/ca --answers DIR [--listen 127.0.0.1:0]
//
// capture asks a running broker, as the agent whose certificate and key
// are in AGENT.pem, for its catalog (JSON, as the farm stored it) and its
// pluginsync answer, and writes them to DIR (catalog.json, metadata.json).
// serve then answers with them: --ca-dir is the broker's CA directory
// (broker dev --data DIR: DIR/ca), whose front door certificate it
// presents; each requesting node gets the captured catalog under its own
// name, gzipped the first time it asks (measure a second herd: agentsim
// --rounds 2); every file_metadatas request gets the captured answer;
// reports are read and answered as the front door answers them. It prints
// "tlsfloor is up front_door=https://ADDR" and serves until SIGINT or
// SIGTERM.
package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/compilefarm/compilefarm/bench/internal/loopback"
	"github.com/compilefarm/compilefarm/pkg/ca"
	"github.com/compilefarm/compilefarm/pkg/cadir"
)

func main() {
	err := errors.New("usage: tlsfloor capture|serve [flags] (tlsfloor capture -h, tlsfloor serve -h)")
	if args := os.Args[1:]; len(args) > 0 {
		switch args[0] {
		case "capture":
			err = capture(args[1:])
		case "serve":
			err = serve(args[1:])
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "tlsfloor:", err)
		os.Exit(1)
	}
}

func serve(args []string) error {
	fs := flag.NewFlagSet("tlsfloor serve", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:0", "address to serve on (loopback only)")
	caDir := fs.String("ca-dir", "", "the broker's CA directory (broker dev --data DIR: DIR/ca)")
	answers := fs.String("answers", "", "the directory tlsfloor capture wrote")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *caDir == "" || *answers == "" {
		return errors.New("serve: --ca-dir and --answers are required")
	}
	if err := loopback.Check("--listen", *listen); err != nil {
		return err
	}
	catalog, err := os.ReadFile(filepath.Join(*answers, fileCatalog))
	if err != nil {
		return fmt.Errorf("serve: %w (run tlsfloor capture first)", err)
	}
	f, err := newFloor(catalog)
	if err != nil {
		return fmt.Errorf("serve: %s: %w", fileCatalog, err)
	}
	if f.metadata, err = os.ReadFile(filepath.Join(*answers, fileMetadata)); err != nil {
		return fmt.Errorf("serve: %w (run tlsfloor capture first)", err)
	}
	// What an agent with a certificate still fetches: the CA's
	// certificate and CRL.
	if f.caCert, err = os.ReadFile(filepath.Join(*caDir, "ca_crt.pem")); err != nil {
		return err
	}
	if f.crl, err = os.ReadFile(filepath.Join(*caDir, "ca_crl.pem")); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	authority, err := cadir.OpenCA(ctx, *caDir, ca.Options{})
	if err != nil {
		return err
	}
	cert, err := serverCert(filepath.Join(*caDir, "server"))
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	// As broker/serve.go's front door server.
	srv := &http.Server{Handler: f.handler(), TLSConfig: authority.ServerTLSConfig(cert),
		ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 90 * time.Second}
	go func() {
		<-ctx.Done()
		shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(shut)
	}()
	fmt.Printf("tlsfloor is up front_door=https://%s pid=%d\n", ln.Addr(), os.Getpid())
	if err := srv.ServeTLS(ln, "", ""); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// serverCert loads the one front door certificate and key in dir
// (NAME.pem, NAME.key), as broker dev left them.
func serverCert(dir string) (tls.Certificate, error) {
	pems, err := filepath.Glob(filepath.Join(dir, "*.pem"))
	if err != nil || len(pems) != 1 {
		return tls.Certificate{}, fmt.Errorf("want one front door certificate in %s, found %d", dir, len(pems))
	}
	return tls.LoadX509KeyPair(pems[0], strings.TrimSuffix(pems[0], ".pem")+".key")
}

// floor holds the answers.
type floor struct {
	template []byte // the catalog, its node's name split out
	name     []byte // that name
	metadata []byte
	caCert   []byte
	crl      []byte
	catalogs sync.Map // node name → gzipped catalog
	bodies   sync.Pool
}

func newFloor(catalog []byte) (*floor, error) {
	var head struct {
		Name string `json:"name"`
	}
	if err := json.Unmarshal(catalog, &head); err != nil || head.Name == "" {
		return nil, fmt.Errorf("not a catalog with a name: %v", err)
	}
	return &floor{
		template: catalog, name: []byte(head.Name),
		bodies: sync.Pool{New: func() any { return new(bytes.Buffer) }},
	}, nil
}

func (f *floor) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /puppet-ca/v1/certificate/ca", func(w http.ResponseWriter, r *http.Request) {
		answer(w, "text/plain", f.caCert, false)
	})
	mux.HandleFunc("GET /puppet-ca/v1/certificate_revocation_list/ca", func(w http.ResponseWriter, r *http.Request) {
		answer(w, "text/plain", f.crl, false)
	})
	mux.HandleFunc("GET /puppet/v3/file_metadatas/{mount}", func(w http.ResponseWriter, r *http.Request) {
		answer(w, "application/json", f.metadata, false)
	})
	mux.HandleFunc("POST /puppet/v3/catalog/{name}", func(w http.ResponseWriter, r *http.Request) {
		f.drain(r)
		answer(w, "application/json", f.catalog(r.PathValue("name")), true)
	})
	mux.HandleFunc("PUT /puppet/v3/report/{name}", func(w http.ResponseWriter, r *http.Request) {
		f.drain(r)
		answer(w, "application/json", []byte(`["store"]`), false)
	})
	return mux
}

// drain reads the request's body, as a handler that used it would.
func (f *floor) drain(r *http.Request) {
	b := f.bodies.Get().(*bytes.Buffer)
	b.Reset()
	b.ReadFrom(io.LimitReader(r.Body, 64<<20))
	f.bodies.Put(b)
}

// catalog is node's catalog, gzipped: made the first time node asks.
func (f *floor) catalog(node string) []byte {
	if b, ok := f.catalogs.Load(node); ok {
		return b.([]byte)
	}
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write(bytes.ReplaceAll(f.template, f.name, []byte(node)))
	zw.Close()
	f.catalogs.Store(node, buf.Bytes())
	return buf.Bytes()
}

func answer(w http.ResponseWriter, contentType string, body []byte, gzipped bool) {
	h := w.Header()
	h.Set("Content-Type", contentType)
	h.Set("X-Puppet-Version", "7.23.0")
	if gzipped {
		h.Set("Content-Encoding", "gzip")
	}
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.Write(body)
}

// The files capture writes and serve reads.
const (
	fileCatalog  = "catalog.json"
	fileMetadata = "metadata.json"
)

// capturePaths are what capture asks for, under /puppet/v3: the agent's
// catalog and its biggest pluginsync request (bench/agentsim's).
const captureMetadata = "/file_metadatas/plugins?recurse=true&max_files=-1&ignore=.svn&ignore=CVS&ignore=.git&ignore=.hg&links=follow&checksum_type=sha256&source_permissions=ignore&environment="

func capture(args []string) error {
	fs := flag.NewFlagSet("tlsfloor capture", flag.ContinueOnError)
	from := fs.String("from", "", "the broker's front door host:port (loopback only)")
	caDir := fs.String("ca-dir", "", "the broker's CA directory: its certificate is trusted")
	certPath := fs.String("cert", "", "an agent's certificate and key (PEM, one file: agentsim --state keeps them so)")
	env := fs.String("environment", "production", "the agent's environment")
	out := fs.String("out", "", "directory to write catalog.json and metadata.json to")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *from == "" || *caDir == "" || *certPath == "" || *out == "" {
		return errors.New("capture: --from, --ca-dir, --cert and --out are required")
	}
	if err := loopback.Check("--from", *from); err != nil {
		return err
	}
	cert, err := tls.LoadX509KeyPair(*certPath, *certPath)
	if err != nil {
		return fmt.Errorf("capture: --cert: %w", err)
	}
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		return fmt.Errorf("capture: --cert: %w", err)
	}
	caPEM, err := os.ReadFile(filepath.Join(*caDir, "ca_crt.pem"))
	if err != nil {
		return fmt.Errorf("capture: %w", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		return fmt.Errorf("capture: no certificate in %s", filepath.Join(*caDir, "ca_crt.pem"))
	}
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		TLSClientConfig:    &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: roots, ServerName: "localhost"},
		DisableCompression: true,
	}}
	e := url.QueryEscape(*env)
	for _, c := range []struct{ path, file string }{
		{"/catalog/" + url.PathEscape(leaf.Subject.CommonName) + "?environment=" + e, fileCatalog},
		{captureMetadata + e, fileMetadata},
	} {
		body, err := get(client, "https://"+*from+"/puppet/v3"+c.path)
		if err != nil {
			return fmt.Errorf("capture: %w", err)
		}
		if err := os.WriteFile(filepath.Join(*out, c.file), body, 0o644); err != nil {
			return fmt.Errorf("capture: %w", err)
		}
	}
	return nil
}

func get(c *http.Client, u string) ([]byte, error) {
	req, err := http.NewRequest("GET", u, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", u, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s: %.200s", u, resp.Status, body)
	}
	return body, nil
}

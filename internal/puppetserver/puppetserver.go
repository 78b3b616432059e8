// Package puppetserver runs a real Puppet Server 7 (Debian's
// puppetserver, through scripts/puppetserver.sh) on loopback, the
// reference the farm is compared with: its own directory, the given
// environments, and, when asked, Debian's puppetdb termini sending facts,
// catalogs and reports to a PuppetDB, as a site's Puppet Server does.
// Real agents run against it with test/e2e's Agent (a *Server has the Port
// an agent needs). It is for tests only.
package puppetserver

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/compilefarm/compilefarm/internal/farmproc"
	"github.com/compilefarm/compilefarm/internal/procgroup"
)

// startLimit bounds scripts/puppetserver.sh start (its own wait is 300 s;
// Puppet Server takes 35-60 s on 2 cores).
const startLimit = 6 * time.Minute

// Options say what a Puppet Server serves and where it stores.
type Options struct {
	// Environments is its environmentpath: a directory of environments.
	Environments string
	// PuppetDB is the https URL of the PuppetDB its termini send facts,
	// catalogs and reports to (server_urls), "" for none. The termini
	// refuse plain http.
	PuppetDB string
	// CADir is a Puppet CA directory (the one PuppetDB's certificate comes
	// from and whose client certificates it trusts) that the server copies
	// and is the CA of; required with PuppetDB. Without it the server
	// makes a CA of its own.
	CADir string
}

// Server is a running Puppet Server.
type Server struct {
	Dir      string // its directory (configuration, CA, SSL, logs)
	URL      string // https://127.0.0.1:PORT; its certificate also names localhost
	CACert   string // the CA certificate agents trust (PEM file)
	Certname string // its own certname: the producer of what it sends PuppetDB
	port     string
}

// Port is the port agents reach it on (with --server localhost).
func (s *Server) Port() string { return s.port }

// LogTail returns the last n lines of its log.
func (s *Server) LogTail(n int) string {
	b, _ := os.ReadFile(filepath.Join(s.Dir, "log", "puppetserver.log"))
	return procgroup.Tail(string(b), n)
}

// Start starts a Puppet Server with opts in a temporary directory, waits
// until it answers (its progress goes to the test log), and stops it when
// the test ends, logging the end of its log if the test failed. It skips
// the test under -short and fails it, saying what to install, when
// Debian's puppetserver is missing.
func Start(t testing.TB, opts Options) *Server {
	t.Helper()
	if testing.Short() {
		t.Skip("needs a real Puppet Server (Debian's puppetserver, a JVM); skipped with -short")
	}
	if opts.Environments == "" {
		t.Fatal("puppetserver.Start: Options.Environments is required")
	}
	dir := filepath.Join(t.TempDir(), "puppetserver")
	args := []string{"start", dir, "--environments", opts.Environments}
	if opts.PuppetDB != "" {
		args = append(args, "--puppetdb", opts.PuppetDB, "--cadir", opts.CADir)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("Puppet Server log (%s):\n%s", filepath.Join(dir, "log"), (&Server{Dir: dir}).LogTail(60))
		}
		if out, err := script(context.Background(), t, "stop", dir); err != nil {
			t.Errorf("stop Puppet Server: %v\n%s", err, out)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), startLimit)
	defer cancel()
	began := time.Now()
	if out, err := script(ctx, t, args...); err != nil {
		t.Fatalf("start Puppet Server: %v\n%s", err, out)
	}
	env, err := readEnv(filepath.Join(dir, "env"))
	if err != nil {
		t.Fatalf("Puppet Server started but its env file: %v", err)
	}
	s := &Server{Dir: dir, URL: env["PUPPETSERVER_URL"], CACert: env["PUPPETSERVER_CACERT"],
		Certname: env["PUPPETSERVER_CERTNAME"], port: env["PUPPETSERVER_PORT"]}
	if s.URL == "" || s.port == "" || s.CACert == "" || s.Certname == "" {
		t.Fatalf("Puppet Server's env file %s lacks a key: %v", filepath.Join(dir, "env"), env)
	}
	t.Logf("Puppet Server %s up in %s", s.URL, time.Since(began).Round(time.Second))
	return s
}

// script runs scripts/puppetserver.sh with args, each line it prints going
// to the test log as it comes, and returns its output.
func script(ctx context.Context, t testing.TB, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(farmproc.ModuleRoot(), "scripts", "puppetserver.sh"), args...)
	cmd.WaitDelay = 10 * time.Second
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	var out bytes.Buffer
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			out.WriteString(sc.Text() + "\n")
			t.Log(sc.Text())
		}
		io.Copy(io.Discard, pr)
	}()
	err := cmd.Run()
	pw.Close()
	<-done
	if ctx.Err() != nil {
		return out.String(), fmt.Errorf("scripts/puppetserver.sh %s: not done within its limit: %w", args[0], ctx.Err())
	}
	return out.String(), err
}

// readEnv reads the KEY=value lines of the env file start writes.
func readEnv(path string) (map[string]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	env := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), "="); ok {
			env[k] = v
		}
	}
	return env, nil
}

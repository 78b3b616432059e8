package cadir

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/compilefarm/compilefarm/pkg/ca"
	"github.com/compilefarm/compilefarm/pkg/farm"
	"github.com/compilefarm/compilefarm/pkg/farm/farmtest"
	"github.com/compilefarm/compilefarm/pkg/pki"
)

var discard = slog.New(slog.DiscardHandler)

// templateDir holds one CA made with 2048-bit keys, copied by openCA so
// most tests do not pay for RSA key generation.
var templateDir = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "cadir-template-*")
	if err != nil {
		return "", err
	}
	c, err := OpenCA(context.Background(), filepath.Join(dir, "ca"), ca.Options{Name: "puppet.test", KeyBits: 2048, Logger: discard})
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, "ca"), c.Close()
})

func TestMain(m *testing.M) {
	code := m.Run()
	if dir, err := templateDir(); err == nil {
		os.RemoveAll(filepath.Dir(dir))
	}
	os.Exit(code)
}

// dirCA is a CA opened with OpenCA and its directory, for tests that look
// at or damage the files.
type dirCA struct {
	*ca.CA
	st *Store // paths only: its lock file is not open
}

func (c *dirCA) dir() string                        { return c.st.dir }
func (c *dirCA) path(elem ...string) string         { return c.st.path(elem...) }
func (c *dirCA) signedPath(certname string) string  { return c.st.signedPath(certname) }
func (c *dirCA) names(sub string) ([]string, error) { return c.st.names(sub) }
func (c *dirCA) readSerial() (*big.Int, error)      { return c.st.readSerial() }

// openCA opens a copy of the template CA (name "puppet.test", 2048 bits)
// with opts; Name and KeyBits in opts are ignored.
func openCA(t testing.TB, opts ca.Options) *dirCA {
	t.Helper()
	tmpl, err := templateDir()
	if err != nil {
		t.Fatalf("template CA: %v", err)
	}
	dir := filepath.Join(t.TempDir(), "ca")
	if err := os.CopyFS(dir, os.DirFS(tmpl)); err != nil {
		t.Fatalf("copy template CA: %v", err)
	}
	return openDir(t, dir, opts)
}

// freshCA creates a new CA in a new directory (2048 bits unless opts say).
func freshCA(t testing.TB, opts ca.Options) (*dirCA, string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "ca")
	return openDir(t, dir, opts), dir
}

func openDir(t testing.TB, dir string, opts ca.Options) *dirCA {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = discard
	}
	if opts.KeyBits == 0 {
		opts.KeyBits = 2048
	}
	c, err := OpenCA(t.Context(), dir, opts)
	if err != nil {
		t.Fatalf("OpenCA %s: %v", dir, err)
	}
	t.Cleanup(func() { c.Close() })
	return &dirCA{CA: c, st: &Store{dir: dir}}
}

// csr is a PEM certificate request for cn with a new ECDSA P-256 key.
func csr(t testing.TB, cn string) []byte {
	t.Helper()
	b, _ := farmtest.NewCSR(t, cn)
	return b
}

func mustParseCert(t testing.TB, data []byte) *x509.Certificate {
	t.Helper()
	cert, err := pki.ParseCertPEM(data)
	if err != nil {
		t.Fatalf("parse certificate: %v", err)
	}
	return cert
}

func mustReadFile(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	return b
}

func mustWriteFile(t testing.TB, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatalf("write: %v", err)
	}
}

func TestOpenCAWithoutDirectory(t *testing.T) {
	if _, err := OpenCA(t.Context(), "", ca.Options{}); !errors.Is(err, farm.ErrInvalid) {
		t.Fatalf("OpenCA with no directory: err = %v, want ErrInvalid", err)
	}
}

func TestOpenDamagedDirectory(t *testing.T) {
	_, otherDir := freshCA(t, ca.Options{Name: "other"})
	tests := []struct {
		name    string
		damage  func(t *testing.T, dir string)
		wantErr string
	}{
		{"key of another CA", func(t *testing.T, dir string) {
			mustWriteFile(t, filepath.Join(dir, fileCAKey), mustReadFile(t, filepath.Join(otherDir, fileCAKey)))
		}, "does not match CA certificate"},
		{"CRL of another CA", func(t *testing.T, dir string) {
			mustWriteFile(t, filepath.Join(dir, fileCRL), mustReadFile(t, filepath.Join(otherDir, fileCRL)))
		}, "not signed by this CA"},
		{"CRL missing", func(t *testing.T, dir string) {
			os.Remove(filepath.Join(dir, fileCRL))
		}, "read CRL"},
		{"serial counter missing", func(t *testing.T, dir string) {
			os.Remove(filepath.Join(dir, fileSerial))
		}, "serial counter"},
		{"CA certificate lost while agents hold certificates", func(t *testing.T, dir string) {
			mustWriteFile(t, filepath.Join(dir, dirSigned, "agent.example.test.pem"), mustReadFile(t, filepath.Join(otherDir, fileCACert)))
			os.Remove(filepath.Join(dir, fileCACert))
		}, "restore the CA certificate"},
		{"serial counter garbage", func(t *testing.T, dir string) {
			mustWriteFile(t, filepath.Join(dir, fileSerial), []byte("zz"))
		}, "not a positive hex number"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := openCA(t, ca.Options{})
			dir := c.dir()
			c.Close()
			tc.damage(t, dir)
			_, err := OpenCA(t.Context(), dir, ca.Options{Logger: discard})
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Open: err = %v, want one mentioning %q", err, tc.wantErr)
			}
		})
	}
	t.Run("crash before the certificate was written", func(t *testing.T) {
		c := openCA(t, ca.Options{})
		dir := c.dir()
		c.Close()
		os.Remove(filepath.Join(dir, fileCACert)) // key, CRL and serial remain: a half-made CA
		c2 := openDir(t, dir, ca.Options{})
		if err := c2.SubmitCSR(t.Context(), "a.example.test", csr(t, "a.example.test")); err != nil {
			t.Fatalf("SubmitCSR on the re-created CA: %v", err)
		}
	})
}

func TestReopenKeepsEverything(t *testing.T) {
	ctx := t.Context()
	c, dir := freshCA(t, ca.Options{Name: "keep.test"})
	submitSign := func(c *dirCA, name string) *x509.Certificate {
		t.Helper()
		if err := c.SubmitCSR(ctx, name, csr(t, name)); err != nil {
			t.Fatalf("SubmitCSR %s: %v", name, err)
		}
		if err := c.Sign(ctx, name); err != nil {
			t.Fatalf("Sign %s: %v", name, err)
		}
		return mustParseCert(t, mustReadFile(t, c.signedPath(name)))
	}
	submitSign(c, "signed.example.test")
	revoked := submitSign(c, "revoked.example.test")
	if err := c.Revoke(ctx, "revoked.example.test"); err != nil {
		t.Fatalf("Revoke: %v", err)
	}
	if err := c.SubmitCSR(ctx, "pending.example.test", csr(t, "pending.example.test")); err != nil {
		t.Fatalf("SubmitCSR: %v", err)
	}
	server, err := c.IssueServerCert(ctx, "puppet.test", []string{"puppet", "127.0.0.1"}, "")
	if err != nil {
		t.Fatalf("IssueServerCert: %v", err)
	}
	caPEM, _ := c.CACertificate(ctx)
	crlPEM, _ := c.CRL(ctx)
	list, err := c.List(ctx)
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}

	// Options of the reopening process do not change the CA itself.
	r := openDir(t, dir, ca.Options{Name: "ignored", KeyBits: 3072})
	if got, _ := r.CACertificate(ctx); !bytes.Equal(got, caPEM) {
		t.Errorf("CA certificate changed on reopen")
	}
	if got, _ := r.CRL(ctx); !bytes.Equal(got, crlPEM) {
		t.Errorf("CRL changed on reopen")
	}
	relist, err := r.List(ctx)
	if err != nil {
		t.Fatalf("List after reopen: %v", err)
	}
	if fmt.Sprint(relist) != fmt.Sprint(list) {
		t.Errorf("List after reopen:\n%v\nbefore:\n%v", relist, list)
	}
	states := map[string]string{}
	for _, st := range relist {
		states[st.Certname] = st.State
	}
	want := map[string]string{
		"signed.example.test": farm.CertSigned, "revoked.example.test": farm.CertRevoked,
		"pending.example.test": farm.CertRequested, "puppet.test": farm.CertSigned,
	}
	if fmt.Sprint(states) != fmt.Sprint(want) {
		t.Errorf("states after reopen = %v, want %v", states, want)
	}
	if !r.IsRevoked(revoked.SerialNumber) {
		t.Errorf("IsRevoked(%x) = false after reopen", revoked.SerialNumber)
	}
	again, err := r.IssueServerCert(ctx, "puppet.test", []string{"puppet", "127.0.0.1"}, "")
	if err != nil {
		t.Fatalf("IssueServerCert after reopen: %v", err)
	}
	if again.Leaf.SerialNumber.Cmp(server.Leaf.SerialNumber) != 0 {
		t.Errorf("server certificate reissued on reopen (serial %x, was %x)", again.Leaf.SerialNumber, server.Leaf.SerialNumber)
	}
	// Serials continue: 1 CA, 2 signed, 3 revoked, 4 server.
	next := submitSign(r, "next.example.test")
	if next.SerialNumber.Int64() != 5 {
		t.Errorf("first serial after reopen = %d, want 5", next.SerialNumber)
	}
}

func TestFilesOnDisk(t *testing.T) {
	ctx := t.Context()
	c, dir := freshCA(t, ca.Options{Name: "files.test"})
	if err := c.SubmitCSR(ctx, "a.example.test", csr(t, "a.example.test")); err != nil {
		t.Fatalf("SubmitCSR: %v", err)
	}
	if err := c.SubmitCSR(ctx, "b.example.test", csr(t, "b.example.test")); err != nil {
		t.Fatalf("SubmitCSR: %v", err)
	}
	if err := c.Sign(ctx, "a.example.test"); err != nil {
		t.Fatalf("Sign: %v", err)
	}
	if _, err := c.IssueServerCert(ctx, "puppet.test", nil, ""); err != nil {
		t.Fatalf("IssueServerCert: %v", err)
	}
	want := map[string]fs.FileMode{
		fileCAKey:                     0o600,
		fileCACert:                    0o644,
		fileCAPub:                     0o644,
		fileCRL:                       0o644,
		fileSerial:                    0o644,
		fileInventory:                 0o644,
		fileLock:                      0o600,
		"requests/b.example.test.pem": 0o644,
		"signed/a.example.test.pem":   0o644,
		"signed/puppet.test.pem":      0o644,
		"server/puppet.test.pem":      0o644,
		"server/puppet.test.key":      0o600,
	}
	got := map[string]fs.FileMode{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		got[filepath.ToSlash(rel)] = info.Mode().Perm()
		return nil
	})
	if err != nil {
		t.Fatalf("walk: %v", err)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("files on disk:\n%v\nwant:\n%v", got, want)
	}
	if s := string(mustReadFile(t, filepath.Join(dir, fileSerial))); s != "0004" {
		t.Errorf("serial file = %q, want %q", s, "0004")
	}
	inv := strings.Split(strings.TrimSuffix(string(mustReadFile(t, filepath.Join(dir, fileInventory))), "\n"), "\n")
	line := regexp.MustCompile(`^0x[0-9A-F]{4} \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dUTC \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dUTC /CN=\S.*$`)
	wantCN := []string{"/CN=Puppet CA: files.test", "/CN=a.example.test", "/CN=puppet.test"}
	if len(inv) != len(wantCN) {
		t.Fatalf("inventory has %d lines, want %d:\n%s", len(inv), len(wantCN), strings.Join(inv, "\n"))
	}
	for i, l := range inv {
		if !line.MatchString(l) || !strings.HasSuffix(l, wantCN[i]) || !strings.HasPrefix(l, fmt.Sprintf("0x%04X ", i+1)) {
			t.Errorf("inventory line %d = %q, want Puppet's format ending in %q", i+1, l, wantCN[i])
		}
	}
}

// TestTwoInstancesShareDir is two processes' view of one directory, in one
// process: each CA has its own lock file descriptor, so flock serialises them.
func TestTwoInstancesShareDir(t *testing.T) {
	ctx := t.Context()
	a := openCA(t, ca.Options{Autosign: true})
	b := openDir(t, a.dir(), ca.Options{Autosign: true})
	const n = 12
	var wg sync.WaitGroup
	errs := make(chan error, n)
	csrs := make([][]byte, n)
	for i := range n {
		csrs[i] = csr(t, fmt.Sprintf("shared%02d.example.test", i))
	}
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := a
			if i%2 == 1 {
				c = b
			}
			if err := c.SubmitCSR(ctx, fmt.Sprintf("shared%02d.example.test", i), csrs[i]); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	checkDistinctSerials(t, a, n)

	cert := mustParseCert(t, mustReadFile(t, a.signedPath("shared00.example.test")))
	if b.IsRevoked(cert.SerialNumber) {
		t.Fatalf("IsRevoked before any revocation")
	}
	if err := a.Revoke(ctx, "shared00.example.test"); err != nil {
		t.Fatalf("Revoke: %v", err)
	}
	// b learns of a's revocation when it next reads the CRL ...
	if _, err := b.CRL(ctx); err != nil {
		t.Fatalf("CRL: %v", err)
	}
	if !b.IsRevoked(cert.SerialNumber) {
		t.Fatalf("b.IsRevoked = false after a revoked and b read the CRL")
	}
	// ... builds on it when revoking ...
	if err := b.Revoke(ctx, "shared01.example.test"); err != nil {
		t.Fatalf("Revoke: %v", err)
	}
	crl, err := x509.ParseRevocationList(mustPEMBytes(t, mustReadFile(t, filepath.Join(a.dir(), fileCRL))))
	if err != nil {
		t.Fatalf("parse CRL: %v", err)
	}
	if len(crl.RevokedCertificateEntries) != 2 || crl.Number.Int64() != 2 {
		t.Fatalf("CRL after revocations from both = %d entries, number %d; want 2, 2", len(crl.RevokedCertificateEntries), crl.Number)
	}
	// ... and IsRevoked alone catches up within a second (the CA's
	// refresh period).
	other := mustParseCert(t, mustReadFile(t, a.signedPath("shared01.example.test")))
	time.Sleep(1100 * time.Millisecond)
	if !a.IsRevoked(other.SerialNumber) {
		t.Fatalf("a.IsRevoked did not pick up b's revocation after a second")
	}
}

func mustPEMBytes(t testing.TB, data []byte) []byte {
	t.Helper()
	block, _ := pem.Decode(data)
	if block == nil {
		t.Fatalf("no PEM block in %.40q", data)
	}
	return block.Bytes
}

// checkDistinctSerials checks every signed certificate has its own serial
// and the serial counter is past all of them.
func checkDistinctSerials(t testing.TB, c *dirCA, wantCerts int) {
	t.Helper()
	names, err := c.names(dirSigned)
	if err != nil {
		t.Fatalf("names: %v", err)
	}
	if len(names) != wantCerts {
		t.Fatalf("%d signed certificates, want %d", len(names), wantCerts)
	}
	seen := map[string]string{}
	max := big.NewInt(1)
	for _, name := range names {
		cert := mustParseCert(t, mustReadFile(t, c.signedPath(name)))
		s := cert.SerialNumber.String()
		if other, dup := seen[s]; dup {
			t.Fatalf("%s and %s share serial %s", name, other, s)
		}
		seen[s] = name
		if cert.SerialNumber.Cmp(max) > 0 {
			max = cert.SerialNumber
		}
	}
	next, err := c.readSerial()
	if err != nil {
		t.Fatalf("readSerial: %v", err)
	}
	if next.Cmp(max) <= 0 {
		t.Fatalf("serial counter %x is not past the highest serial %x", next, max)
	}
}

// TestTwoProcessesShareDir runs two more processes of this test binary
// signing into the same directory as this one; flock(2) must keep the
// serial counter, inventory and files consistent.
func TestTwoProcessesShareDir(t *testing.T) {
	c := openCA(t, ca.Options{Autosign: true})
	exe, err := os.Executable()
	if err != nil {
		t.Fatalf("test binary: %v", err)
	}
	const perProcess = 8
	var cmds []*exec.Cmd
	var outs []*bytes.Buffer
	for _, prefix := range []string{"child-a", "child-b"} {
		cmd := exec.CommandContext(t.Context(), exe, "-test.run=^TestHelperProcessSigns$", "-test.count=1")
		cmd.Env = append(os.Environ(), "CA_TEST_HELPER_DIR="+c.dir(), "CA_TEST_HELPER_PREFIX="+prefix,
			fmt.Sprintf("CA_TEST_HELPER_COUNT=%d", perProcess))
		out := &bytes.Buffer{}
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			t.Fatalf("start helper: %v", err)
		}
		cmds, outs = append(cmds, cmd), append(outs, out)
	}
	for i := range perProcess {
		name := fmt.Sprintf("parent%02d.example.test", i)
		if err := c.SubmitCSR(t.Context(), name, csr(t, name)); err != nil {
			t.Errorf("SubmitCSR %s: %v", name, err)
		}
	}
	for i, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Fatalf("helper process: %v\n%s", err, outs[i])
		}
		if !strings.Contains(outs[i].String(), "helper signed") {
			t.Fatalf("helper process did not run its loop:\n%s", outs[i])
		}
	}
	checkDistinctSerials(t, c, 3*perProcess)
	inv := strings.Count(string(mustReadFile(t, c.path(fileInventory))), "\n")
	if inv != 1+3*perProcess {
		t.Fatalf("inventory has %d lines, want %d", inv, 1+3*perProcess)
	}
}

// TestHelperProcessSigns is the child of TestTwoProcessesShareDir; run on
// its own it has nothing to do and passes.
func TestHelperProcessSigns(t *testing.T) {
	dir := os.Getenv("CA_TEST_HELPER_DIR")
	if dir == "" {
		return
	}
	prefix := os.Getenv("CA_TEST_HELPER_PREFIX")
	var n int
	fmt.Sscan(os.Getenv("CA_TEST_HELPER_COUNT"), &n)
	c := openDir(t, dir, ca.Options{Autosign: true})
	for i := range n {
		name := fmt.Sprintf("%s%02d.example.test", prefix, i)
		if err := c.SubmitCSR(t.Context(), name, csr(t, name)); err != nil {
			t.Fatalf("SubmitCSR %s: %v", name, err)
		}
	}
	fmt.Printf("helper signed %d\n", n)
}

package ca

import (
	"bytes"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/compilefarm/compilefarm/pkg/farm"
	"github.com/compilefarm/compilefarm/pkg/farm/farmtest"
)

func TestContract(t *testing.T) {
	farmtest.TestCA(t, func(t *testing.T) farm.CA { return openCA(t, Options{}) })
}

// TestDefaults is the one test paying for a 4096-bit key: the zero Options
// give Puppet's CA.
func TestDefaults(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ca")
	c, err := Open(t.Context(), dir, Options{Logger: discard})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer c.Close()
	ca := c.CACert()
	if got := ca.PublicKey.(*rsa.PublicKey).N.BitLen(); got != 4096 {
		t.Errorf("CA key is %d bits, want 4096", got)
	}
	if got, want := ca.Subject.CommonName, "Puppet CA: compilefarm"; got != want {
		t.Errorf("CA subject CN = %q, want %q", got, want)
	}
	if c.opts.Autosign || c.opts.AllowSubjectAltNames || c.opts.AllowAuthorizationExtensions {
		t.Errorf("zero Options enable a permissive policy: %+v", c.opts)
	}
	csr := makeCSR(t, csrSpec{cn: "agent.example.test"})
	if err := c.SubmitCSR(t.Context(), "agent.example.test", csr); err != nil {
		t.Fatalf("SubmitCSR: %v", err)
	}
	if err := c.Sign(t.Context(), "agent.example.test"); err != nil {
		t.Fatalf("Sign: %v", err)
	}
	cert := mustParseCert(t, mustReadFile(t, c.signedPath("agent.example.test")))
	if got, want := cert.NotAfter.Sub(cert.NotBefore), 5*365*24*time.Hour+24*time.Hour; got != want {
		t.Errorf("agent certificate lifetime %s, want %s (five 365-day years plus the day of backdating)", got, want)
	}
}

func TestOpenOptions(t *testing.T) {
	tests := []struct {
		name string
		opts Options
	}{
		{"key too small", Options{KeyBits: 1024}},
		{"negative validity", Options{Validity: -time.Hour}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Open(t.Context(), t.TempDir(), tc.opts)
			if !errors.Is(err, farm.ErrInvalid) {
				t.Fatalf("Open: err = %v, want ErrInvalid", err)
			}
		})
	}
	if _, err := Open(t.Context(), "", Options{}); !errors.Is(err, farm.ErrInvalid) {
		t.Fatalf("Open with no directory: err = %v, want ErrInvalid", err)
	}
}

func TestOpenDamagedDirectory(t *testing.T) {
	_, otherDir := freshCA(t, Options{Name: "other"})
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
			mustWriteFile(t, filepath.Join(dir, dirSigned, "agent.example.test.pem"), mustReadFile(t, goldenAgentCert))
			os.Remove(filepath.Join(dir, fileCACert))
		}, "restore the CA certificate"},
		{"serial counter garbage", func(t *testing.T, dir string) {
			mustWriteFile(t, filepath.Join(dir, fileSerial), []byte("zz"))
		}, "not a positive hex number"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := openCA(t, Options{})
			dir := c.dir()
			c.Close()
			tc.damage(t, dir)
			_, err := Open(t.Context(), dir, Options{Logger: discard})
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Open: err = %v, want one mentioning %q", err, tc.wantErr)
			}
		})
	}
	t.Run("crash before the certificate was written", func(t *testing.T) {
		c := openCA(t, Options{})
		dir := c.dir()
		c.Close()
		os.Remove(filepath.Join(dir, fileCACert)) // key, CRL and serial remain: a half-made CA
		c2 := openDir(t, dir, Options{})
		if err := c2.SubmitCSR(t.Context(), "a.example.test", makeCSR(t, csrSpec{cn: "a.example.test"})); err != nil {
			t.Fatalf("SubmitCSR on the re-created CA: %v", err)
		}
	})
}

func TestReopenKeepsEverything(t *testing.T) {
	ctx := t.Context()
	c, dir := freshCA(t, Options{Name: "keep.test"})
	submitSign := func(c *CA, name string) *x509.Certificate {
		t.Helper()
		if err := c.SubmitCSR(ctx, name, makeCSR(t, csrSpec{cn: name})); err != nil {
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
	if err := c.SubmitCSR(ctx, "pending.example.test", makeCSR(t, csrSpec{cn: "pending.example.test"})); err != nil {
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
	r := openDir(t, dir, Options{Name: "ignored", KeyBits: 3072})
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
	c, dir := freshCA(t, Options{Name: "files.test"})
	if err := c.SubmitCSR(ctx, "a.example.test", makeCSR(t, csrSpec{cn: "a.example.test"})); err != nil {
		t.Fatalf("SubmitCSR: %v", err)
	}
	if err := c.SubmitCSR(ctx, "b.example.test", makeCSR(t, csrSpec{cn: "b.example.test"})); err != nil {
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

func TestSubmitAfterRevoke(t *testing.T) {
	ctx := t.Context()
	c := openCA(t, Options{})
	const name = "again.example.test"
	if err := c.SubmitCSR(ctx, name, makeCSR(t, csrSpec{cn: name})); err != nil {
		t.Fatalf("SubmitCSR: %v", err)
	}
	if err := c.Sign(ctx, name); err != nil {
		t.Fatalf("Sign: %v", err)
	}
	old := mustParseCert(t, mustReadFile(t, c.signedPath(name)))
	if err := c.Revoke(ctx, name); err != nil {
		t.Fatalf("Revoke: %v", err)
	}
	if err := c.SubmitCSR(ctx, name, makeCSR(t, csrSpec{cn: name})); err != nil {
		t.Fatalf("SubmitCSR after revocation: %v", err)
	}
	// The revoked certificate is retired so the agent fetching its new
	// certificate does not get the old one.
	if _, err := c.Certificate(ctx, name); !errors.Is(err, farm.ErrNotFound) {
		t.Fatalf("Certificate while the new request is pending: err = %v, want ErrNotFound", err)
	}
	list, _ := c.List(ctx)
	if len(list) != 1 || list[0].State != farm.CertRequested {
		t.Fatalf("List = %+v, want one requested entry", list)
	}
	if err := c.Sign(ctx, name); err != nil {
		t.Fatalf("Sign the new request: %v", err)
	}
	cur := mustParseCert(t, mustReadFile(t, c.signedPath(name)))
	if cur.SerialNumber.Cmp(old.SerialNumber) == 0 {
		t.Fatalf("new certificate reuses serial %x", old.SerialNumber)
	}
	if !c.IsRevoked(old.SerialNumber) || c.IsRevoked(cur.SerialNumber) {
		t.Fatalf("IsRevoked(old)=%v IsRevoked(new)=%v, want true, false", c.IsRevoked(old.SerialNumber), c.IsRevoked(cur.SerialNumber))
	}
}

func TestRevokeTwiceChangesNothing(t *testing.T) {
	ctx := t.Context()
	c := openCA(t, Options{Autosign: true})
	if err := c.SubmitCSR(ctx, "r.example.test", makeCSR(t, csrSpec{cn: "r.example.test"})); err != nil {
		t.Fatalf("SubmitCSR: %v", err)
	}
	if err := c.Revoke(ctx, "r.example.test"); err != nil {
		t.Fatalf("Revoke: %v", err)
	}
	first, _ := c.CRL(ctx)
	if err := c.Revoke(ctx, "r.example.test"); err != nil {
		t.Fatalf("Revoke again: %v", err)
	}
	second, _ := c.CRL(ctx)
	if !bytes.Equal(first, second) {
		t.Fatalf("revoking a revoked certificate re-signed the CRL")
	}
	if n := c.crl.Load().number.Int64(); n != 1 {
		t.Fatalf("CRL number = %d, want 1", n)
	}
}

func TestSignStates(t *testing.T) {
	ctx := t.Context()
	c := openCA(t, Options{})
	if err := c.SubmitCSR(ctx, "s.example.test", makeCSR(t, csrSpec{cn: "s.example.test"})); err != nil {
		t.Fatalf("SubmitCSR: %v", err)
	}
	if err := c.Sign(ctx, "s.example.test"); err != nil {
		t.Fatalf("Sign: %v", err)
	}
	if _, err := c.CertificateRequest(ctx, "s.example.test"); !errors.Is(err, farm.ErrNotFound) {
		t.Errorf("CertificateRequest after signing: err = %v, want ErrNotFound (Puppet deletes signed requests)", err)
	}
	if err := c.Sign(ctx, "s.example.test"); !errors.Is(err, farm.ErrConflict) {
		t.Errorf("Sign of a signed name: err = %v, want ErrConflict", err)
	}
	if err := c.Revoke(ctx, "s.example.test"); err != nil {
		t.Fatalf("Revoke: %v", err)
	}
	if err := c.Sign(ctx, "s.example.test"); !errors.Is(err, farm.ErrNotFound) {
		t.Errorf("Sign of a revoked name without a new request: err = %v, want ErrNotFound", err)
	}
	var re *RequestError
	err := c.Sign(ctx, "never.example.test")
	if !errors.As(err, &re) || re.Message != "Could not find certificate_request never.example.test" {
		t.Errorf("Sign of an unknown name: err = %v, want Puppet's 404 message", err)
	}
	_, err = c.Certificate(ctx, "never.example.test")
	if !errors.As(err, &re) || re.Message != "Could not find certificate never.example.test" {
		t.Errorf("Certificate of an unknown name: err = %v, want Puppet's 404 message", err)
	}
}

func TestAutosign(t *testing.T) {
	ctx := t.Context()
	c := openCA(t, Options{Autosign: true})
	const name = "auto.example.test"
	if err := c.SubmitCSR(ctx, name, makeCSR(t, csrSpec{cn: "pending-first.example.test"})); err == nil {
		t.Fatalf("SubmitCSR with a mismatched CN succeeded under autosign")
	}
	if err := c.SubmitCSR(ctx, name, makeCSR(t, csrSpec{cn: name})); err != nil {
		t.Fatalf("SubmitCSR: %v", err)
	}
	if _, err := c.Certificate(ctx, name); err != nil {
		t.Fatalf("Certificate right after an autosigned submit: %v", err)
	}
	if _, err := c.CertificateRequest(ctx, name); !errors.Is(err, farm.ErrNotFound) {
		t.Fatalf("CertificateRequest after autosign: err = %v, want ErrNotFound", err)
	}
	if err := c.SubmitCSR(ctx, name, makeCSR(t, csrSpec{cn: name})); !errors.Is(err, farm.ErrConflict) {
		t.Fatalf("second SubmitCSR under autosign: err = %v, want ErrConflict", err)
	}
}

func TestFrontDoorNamesAreReserved(t *testing.T) {
	ctx := t.Context()
	c := openCA(t, Options{Autosign: true})
	if _, err := c.IssueServerCert(ctx, "puppet.test", []string{"puppet", "localhost", "10.1.2.3"}, ""); err != nil {
		t.Fatalf("IssueServerCert: %v", err)
	}
	for _, name := range []string{"puppet.test", "puppet", "localhost"} {
		err := c.SubmitCSR(ctx, name, makeCSR(t, csrSpec{cn: name}))
		if !errors.Is(err, farm.ErrConflict) {
			t.Errorf("SubmitCSR %q, a front door name: err = %v, want ErrConflict", name, err)
		}
	}
	if err := c.SubmitCSR(ctx, "agent.puppet.test", makeCSR(t, csrSpec{cn: "agent.puppet.test"})); err != nil {
		t.Errorf("SubmitCSR of an unrelated name: %v", err)
	}
	// An agent already holding the name keeps it: the front door must pick another.
	if _, err := c.IssueServerCert(ctx, "agent.puppet.test", nil, ""); !errors.Is(err, farm.ErrConflict) {
		t.Errorf("IssueServerCert for an agent's certname: err = %v, want ErrConflict", err)
	}
}

// TestTwoInstancesShareDir is two processes' view of one directory, in one
// process: each CA has its own lock file descriptor, so flock serialises them.
func TestTwoInstancesShareDir(t *testing.T) {
	ctx := t.Context()
	a := openCA(t, Options{Autosign: true})
	b := openDir(t, a.dir(), Options{Autosign: true})
	const n = 12
	var wg sync.WaitGroup
	errs := make(chan error, n)
	csrs := make([][]byte, n)
	for i := range n {
		csrs[i] = makeCSR(t, csrSpec{cn: fmt.Sprintf("shared%02d.example.test", i)})
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
	// ... and IsRevoked alone catches up within refreshEvery.
	other := mustParseCert(t, mustReadFile(t, a.signedPath("shared01.example.test")))
	time.Sleep(refreshEvery + 100*time.Millisecond)
	if !a.IsRevoked(other.SerialNumber) {
		t.Fatalf("a.IsRevoked did not pick up b's revocation after %s", refreshEvery)
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
func checkDistinctSerials(t testing.TB, c *CA, wantCerts int) {
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
	c := openCA(t, Options{Autosign: true})
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
		if err := c.SubmitCSR(t.Context(), name, makeCSR(t, csrSpec{cn: name})); err != nil {
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
	c := openDir(t, dir, Options{Autosign: true})
	for i := range n {
		name := fmt.Sprintf("%s%02d.example.test", prefix, i)
		if err := c.SubmitCSR(t.Context(), name, makeCSR(t, csrSpec{cn: name})); err != nil {
			t.Fatalf("SubmitCSR %s: %v", name, err)
		}
	}
	fmt.Printf("helper signed %d\n", n)
}

func TestClampToCALifetime(t *testing.T) {
	c := openCA(t, Options{Autosign: true, Validity: 100 * 365 * 24 * time.Hour})
	if err := c.SubmitCSR(t.Context(), "long.example.test", makeCSR(t, csrSpec{cn: "long.example.test"})); err != nil {
		t.Fatalf("SubmitCSR: %v", err)
	}
	cert := mustParseCert(t, mustReadFile(t, c.signedPath("long.example.test")))
	if !cert.NotAfter.Equal(c.CACert().NotAfter) {
		t.Fatalf("NotAfter %v, want the CA's %v", cert.NotAfter, c.CACert().NotAfter)
	}
}

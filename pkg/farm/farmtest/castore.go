package farmtest

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/compilefarm/compilefarm/pkg/farm"
)

// TestCAStore runs the contract suite for farm.CAStore. open returns a new,
// empty store; each subtest opens its own. Changes are made under Lock, as
// the CA makes them.
func TestCAStore(t *testing.T, open func(t *testing.T) farm.CAStore) {
	t.Run("NoCAYet", func(t *testing.T) {
		s := open(t)
		if _, err := s.CACert(t.Context()); !errors.Is(err, farm.ErrNotFound) {
			t.Fatalf("CACert of an empty store: err = %v, want ErrNotFound", err)
		}
		if _, err := s.CRL(t.Context()); !errors.Is(err, farm.ErrNotFound) {
			t.Fatalf("CRL of an empty store: err = %v, want ErrNotFound", err)
		}
		if err := s.Check(t.Context()); !errors.Is(err, farm.ErrNotFound) {
			t.Fatalf("Check of an empty store: err = %v, want ErrNotFound", err)
		}
	})

	t.Run("CreateOnce", func(t *testing.T) {
		s := open(t)
		m := newMinter(t)
		g := m.genesis(t)
		caLocked(t, s, func(ctx context.Context) {
			if err := s.Create(ctx, g); err != nil {
				t.Fatalf("Create: %v", err)
			}
		})
		got, err := s.CACert(t.Context())
		if err != nil || string(got) != string(g.CertPEM) {
			t.Fatalf("CACert after Create = %.40q, %v; want the genesis certificate", got, err)
		}
		if err := s.Check(t.Context()); err != nil {
			t.Fatalf("Check after Create: %v", err)
		}
		if crl, err := s.CRL(t.Context()); err != nil || string(crl) != string(g.CRLPEM) {
			t.Fatalf("CRL after Create = %.40q, %v; want the genesis CRL", crl, err)
		}
		other := newMinter(t).genesis(t)
		caLocked(t, s, func(ctx context.Context) {
			if err := s.Create(ctx, other); !errors.Is(err, farm.ErrConflict) {
				t.Fatalf("second Create: err = %v, want ErrConflict", err)
			}
		})
		if got, _ := s.CACert(t.Context()); string(got) != string(g.CertPEM) {
			t.Fatalf("a refused Create replaced the CA certificate")
		}
	})

	t.Run("NextSerialNeverRepeats", func(t *testing.T) {
		s := open(t)
		m := newMinter(t)
		caCreate(t, s, m)
		const n = 40
		var mu sync.Mutex
		var got []int64
		var wg sync.WaitGroup
		for range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				caLocked(t, s, func(ctx context.Context) {
					serial, err := s.NextSerial(ctx)
					if err != nil {
						t.Errorf("NextSerial: %v", err)
						return
					}
					mu.Lock()
					got = append(got, serial.Int64())
					mu.Unlock()
				})
			}()
		}
		wg.Wait()
		sort.Slice(got, func(i, j int) bool { return got[i] < got[j] })
		for i, v := range got {
			if v != int64(i+2) {
				t.Fatalf("serials %v: want 2..%d, each once", got, n+1)
			}
		}
	})

	t.Run("Requests", func(t *testing.T) {
		s := open(t)
		caCreate(t, s, newMinter(t))
		ctx := t.Context()
		if _, err := s.Request(ctx, "a.example.test"); !errors.Is(err, farm.ErrNotFound) {
			t.Fatalf("Request of an unknown name: err = %v, want ErrNotFound", err)
		}
		csrA, _ := NewCSR(t, "a.example.test")
		csrB, _ := NewCSR(t, "b.example.test")
		caLocked(t, s, func(ctx context.Context) {
			noErr(t, s.PutRequest(ctx, "a.example.test", csrA))
			noErr(t, s.PutRequest(ctx, "b.example.test", csrB))
		})
		if got, err := s.Request(ctx, "a.example.test"); err != nil || string(got) != string(csrA) {
			t.Fatalf("Request = %.40q, %v", got, err)
		}
		all, err := s.Requests(ctx)
		if err != nil || len(all) != 2 || string(all["b.example.test"]) != string(csrB) {
			t.Fatalf("Requests = %d entries, %v; want a and b", len(all), err)
		}
		csrA2, _ := NewCSR(t, "a.example.test")
		caLocked(t, s, func(ctx context.Context) { noErr(t, s.PutRequest(ctx, "a.example.test", csrA2)) })
		if got, err := s.Request(ctx, "a.example.test"); err != nil || string(got) != string(csrA2) {
			t.Fatalf("Request after a second PutRequest = %.40q, %v; want the second request", got, err)
		}
		caLocked(t, s, func(ctx context.Context) {
			noErr(t, s.DeleteRequest(ctx, "a.example.test"))
			noErr(t, s.DeleteRequest(ctx, "a.example.test")) // missing: not an error
		})
		if _, err := s.Request(ctx, "a.example.test"); !errors.Is(err, farm.ErrNotFound) {
			t.Fatalf("Request after DeleteRequest: err = %v, want ErrNotFound", err)
		}
	})

	t.Run("SignedIsConditional", func(t *testing.T) {
		s := open(t)
		m := newMinter(t)
		caCreate(t, s, m)
		ctx := t.Context()
		first, second := m.cert(t, 2, "a.example.test"), m.cert(t, 3, "a.example.test")
		if _, err := s.Signed(ctx, "a.example.test"); !errors.Is(err, farm.ErrNotFound) {
			t.Fatalf("Signed of an unknown name: err = %v, want ErrNotFound", err)
		}
		caLocked(t, s, func(ctx context.Context) {
			noErr(t, s.PutSigned(ctx, "a.example.test", first, nil))
			if err := s.PutSigned(ctx, "a.example.test", second, nil); !errors.Is(err, farm.ErrConflict) {
				t.Fatalf("PutSigned over a held certificate without replace: err = %v, want ErrConflict", err)
			}
			if err := s.PutSigned(ctx, "a.example.test", second, big.NewInt(9)); !errors.Is(err, farm.ErrConflict) {
				t.Fatalf("PutSigned replacing the wrong serial: err = %v, want ErrConflict", err)
			}
			if err := s.PutSigned(ctx, "c.example.test", m.cert(t, 7, "c.example.test"), big.NewInt(7)); !errors.Is(err, farm.ErrConflict) {
				t.Fatalf("PutSigned replacing a serial for a name holding none: err = %v, want ErrConflict", err)
			}
		})
		if got, _ := s.Signed(ctx, "a.example.test"); string(got) != string(first) {
			t.Fatalf("a refused PutSigned changed the certificate")
		}
		caLocked(t, s, func(ctx context.Context) {
			noErr(t, s.PutSigned(ctx, "a.example.test", second, big.NewInt(2)))
			if err := s.DeleteSigned(ctx, "a.example.test", big.NewInt(2)); !errors.Is(err, farm.ErrConflict) {
				t.Fatalf("DeleteSigned of a replaced serial: err = %v, want ErrConflict", err)
			}
			noErr(t, s.PutSigned(ctx, "b.example.test", m.cert(t, 4, "b.example.test"), nil))
		})
		all, err := s.SignedCerts(ctx)
		if err != nil || len(all) != 2 || string(all["a.example.test"]) != string(second) {
			t.Fatalf("SignedCerts = %d entries, %v; want a (second) and b", len(all), err)
		}
		caLocked(t, s, func(ctx context.Context) {
			noErr(t, s.DeleteSigned(ctx, "a.example.test", big.NewInt(3)))
			noErr(t, s.DeleteSigned(ctx, "a.example.test", big.NewInt(3))) // gone: not an error
			noErr(t, s.RecordIssued(ctx, farm.CertIssued{Certname: "a.example.test", Serial: big.NewInt(3), NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour)}))
		})
		if _, err := s.Signed(ctx, "a.example.test"); !errors.Is(err, farm.ErrNotFound) {
			t.Fatalf("Signed after DeleteSigned: err = %v, want ErrNotFound", err)
		}
	})

	t.Run("ServerCerts", func(t *testing.T) {
		s := open(t)
		m := newMinter(t)
		caCreate(t, s, m)
		caLocked(t, s, func(ctx context.Context) {
			noErr(t, s.PutServerCert(ctx, "door1.example.test", m.cert(t, 5, "door1.example.test")))
			noErr(t, s.PutServerCert(ctx, "door2.example.test", m.cert(t, 6, "door2.example.test")))
		})
		all, err := s.ServerCerts(t.Context(), "")
		if err != nil || len(all) != 2 {
			t.Fatalf("ServerCerts = %d, %v; want 2", len(all), err)
		}
		for name, want := range map[string]int{"door1.example.test": 1, "door2.example.test": 1, "nobody.example.test": 0} {
			named, err := s.ServerCerts(t.Context(), name)
			if err != nil || len(named) != want {
				t.Fatalf("ServerCerts(%s) = %d, %v; want %d", name, len(named), err, want)
			}
		}
	})

	t.Run("CRLIsConditional", func(t *testing.T) {
		s := open(t)
		m := newMinter(t)
		caCreate(t, s, m)
		one := m.crl(t, 1)
		caLocked(t, s, func(ctx context.Context) {
			noErr(t, s.PutCRL(ctx, one, big.NewInt(1), big.NewInt(0)))
			if err := s.PutCRL(ctx, m.crl(t, 2), big.NewInt(2), big.NewInt(0)); !errors.Is(err, farm.ErrConflict) {
				t.Fatalf("PutCRL over a stale number: err = %v, want ErrConflict", err)
			}
		})
		if got, _ := s.CRL(t.Context()); string(got) != string(one) {
			t.Fatalf("CRL is not the one written under the right number")
		}
	})

	// A large site's CRL (20,000 revocations, about 1 MB of PEM) is kept
	// whole, and a second store on the same records sees each new one.
	t.Run("LargeCRL", func(t *testing.T) {
		s := open(t)
		m := newMinter(t)
		caCreate(t, s, m)
		big1 := m.crlWith(t, 1, 20000)
		big2 := m.crlWith(t, 2, 20001)
		for i, crl := range [][]byte{big1, big2} {
			caLocked(t, s, func(ctx context.Context) {
				noErr(t, s.PutCRL(ctx, crl, big.NewInt(int64(i+1)), big.NewInt(int64(i))))
			})
			got, err := s.CRL(t.Context())
			if err != nil || string(got) != string(crl) {
				t.Fatalf("CRL %d of %d bytes read back as %d bytes, %v", i+1, len(crl), len(got), err)
			}
		}
	})
	// Arguments no store can keep are ErrInvalid and change nothing: a
	// certname that fails farm.ValidateCertname (a path, upper case), an
	// empty PEM, a serial or CRL number that is missing, not positive, or
	// not above the one it replaces.
	t.Run("InvalidArgumentsAreInvalid", func(t *testing.T) {
		s := open(t)
		m := newMinter(t)
		g := m.genesis(t)
		caLocked(t, s, func(ctx context.Context) { noErr(t, s.Create(ctx, g)) })
		ctx := t.Context()
		cert := m.cert(t, 5, "a.example.test")
		csr, _ := NewCSR(t, "a.example.test")
		for _, name := range []string{"", "../a.example.test", "a/b", "A.example.test", ".."} {
			caLocked(t, s, func(ctx context.Context) {
				wantErrIs(t, fmt.Sprintf("PutRequest %q", name), s.PutRequest(ctx, name, csr), farm.ErrInvalid)
				wantErrIs(t, fmt.Sprintf("DeleteRequest %q", name), s.DeleteRequest(ctx, name), farm.ErrInvalid)
				wantErrIs(t, fmt.Sprintf("PutSigned %q", name), s.PutSigned(ctx, name, cert, nil), farm.ErrInvalid)
				wantErrIs(t, fmt.Sprintf("DeleteSigned %q", name), s.DeleteSigned(ctx, name, big.NewInt(5)), farm.ErrInvalid)
				wantErrIs(t, fmt.Sprintf("PutServerCert %q", name), s.PutServerCert(ctx, name, cert), farm.ErrInvalid)
			})
			_, err := s.Request(ctx, name)
			wantErrIs(t, fmt.Sprintf("Request %q", name), err, farm.ErrInvalid)
			_, err = s.Signed(ctx, name)
			wantErrIs(t, fmt.Sprintf("Signed %q", name), err, farm.ErrInvalid)
		}
		caLocked(t, s, func(ctx context.Context) {
			wantErrIs(t, "PutRequest of no PEM", s.PutRequest(ctx, "a.example.test", nil), farm.ErrInvalid)
			wantErrIs(t, "PutSigned of no PEM", s.PutSigned(ctx, "a.example.test", nil, nil), farm.ErrInvalid)
			wantErrIs(t, "PutSigned replacing serial 0", s.PutSigned(ctx, "a.example.test", cert, big.NewInt(0)), farm.ErrInvalid)
			wantErrIs(t, "DeleteSigned of no serial", s.DeleteSigned(ctx, "a.example.test", nil), farm.ErrInvalid)
			wantErrIs(t, "PutServerCert of no PEM", s.PutServerCert(ctx, "a.example.test", nil), farm.ErrInvalid)
			wantErrIs(t, "RecordIssued without a serial", s.RecordIssued(ctx, farm.CertIssued{Certname: "a.example.test"}), farm.ErrInvalid)
			wantErrIs(t, "RecordIssued without a certname", s.RecordIssued(ctx, farm.CertIssued{Serial: big.NewInt(5)}), farm.ErrInvalid)
			wantErrIs(t, "PutCRL of no CRL", s.PutCRL(ctx, nil, big.NewInt(1), big.NewInt(0)), farm.ErrInvalid)
			wantErrIs(t, "PutCRL without a previous number", s.PutCRL(ctx, m.crl(t, 1), big.NewInt(1), nil), farm.ErrInvalid)
			wantErrIs(t, "PutCRL of a number not above the previous", s.PutCRL(ctx, m.crl(t, 0), big.NewInt(0), big.NewInt(0)), farm.ErrInvalid)
			wantErrIs(t, "Create without a next serial", s.Create(ctx, farm.CAGenesis{CertPEM: cert, CRLPEM: m.crl(t, 0)}), farm.ErrInvalid)
		})
		if all, err := s.Requests(ctx); err != nil || len(all) != 0 {
			t.Fatalf("Requests after refused puts = %d entries, %v; want none", len(all), err)
		}
		if all, err := s.SignedCerts(ctx); err != nil || len(all) != 0 {
			t.Fatalf("SignedCerts after refused puts = %d entries, %v; want none", len(all), err)
		}
		if all, err := s.ServerCerts(ctx, ""); err != nil || len(all) != 0 {
			t.Fatalf("ServerCerts after refused puts = %d, %v; want none", len(all), err)
		}
		if crl, err := s.CRL(ctx); err != nil || string(crl) != string(g.CRLPEM) {
			t.Fatalf("CRL after refused puts is not the genesis CRL (%v)", err)
		}
	})

	// A call whose context has ended returns its error and changes
	// nothing; Lock holds nothing.
	t.Run("EndedContextChangesNothing", func(t *testing.T) {
		s := open(t)
		m := newMinter(t)
		g := m.genesis(t)
		ended, cancel := context.WithCancel(t.Context())
		cancel()
		if unlock, err := s.Lock(ended); !errors.Is(err, context.Canceled) {
			if unlock != nil {
				unlock()
			}
			t.Fatalf("Lock with an ended context: err = %v, want context.Canceled", err)
		}
		wantErrIs(t, "Create with an ended context", s.Create(ended, g), context.Canceled)
		if _, err := s.CACert(t.Context()); !errors.Is(err, farm.ErrNotFound) {
			t.Fatalf("CACert after a Create with an ended context: err = %v, want ErrNotFound", err)
		}
		caLocked(t, s, func(ctx context.Context) { noErr(t, s.Create(ctx, g)) })
		csr, _ := NewCSR(t, "a.example.test")
		cert := m.cert(t, 2, "a.example.test")
		wantErrIs(t, "PutRequest with an ended context", s.PutRequest(ended, "a.example.test", csr), context.Canceled)
		wantErrIs(t, "PutSigned with an ended context", s.PutSigned(ended, "a.example.test", cert, nil), context.Canceled)
		wantErrIs(t, "PutServerCert with an ended context", s.PutServerCert(ended, "a.example.test", cert), context.Canceled)
		wantErrIs(t, "PutCRL with an ended context", s.PutCRL(ended, m.crl(t, 1), big.NewInt(1), big.NewInt(0)), context.Canceled)
		wantErrIs(t, "RecordIssued with an ended context", s.RecordIssued(ended, farm.CertIssued{Certname: "a.example.test", Serial: big.NewInt(2)}), context.Canceled)
		_, err := s.NextSerial(ended)
		wantErrIs(t, "NextSerial with an ended context", err, context.Canceled)
		for name, read := range map[string]func(context.Context) error{
			"CACert":      func(ctx context.Context) error { _, err := s.CACert(ctx); return err },
			"Check":       s.Check,
			"CRL":         func(ctx context.Context) error { _, err := s.CRL(ctx); return err },
			"Request":     func(ctx context.Context) error { _, err := s.Request(ctx, "a.example.test"); return err },
			"Requests":    func(ctx context.Context) error { _, err := s.Requests(ctx); return err },
			"Signed":      func(ctx context.Context) error { _, err := s.Signed(ctx, "a.example.test"); return err },
			"SignedCerts": func(ctx context.Context) error { _, err := s.SignedCerts(ctx); return err },
			"ServerCerts": func(ctx context.Context) error { _, err := s.ServerCerts(ctx, ""); return err },
		} {
			wantErrIs(t, name+" with an ended context", read(ended), context.Canceled)
		}
		ctx := t.Context()
		if _, err := s.Request(ctx, "a.example.test"); !errors.Is(err, farm.ErrNotFound) {
			t.Fatalf("Request after a PutRequest with an ended context: err = %v, want ErrNotFound", err)
		}
		if _, err := s.Signed(ctx, "a.example.test"); !errors.Is(err, farm.ErrNotFound) {
			t.Fatalf("Signed after a PutSigned with an ended context: err = %v, want ErrNotFound", err)
		}
		if all, err := s.ServerCerts(ctx, ""); err != nil || len(all) != 0 {
			t.Fatalf("ServerCerts after a PutServerCert with an ended context = %d, %v; want none", len(all), err)
		}
		if crl, err := s.CRL(ctx); err != nil || string(crl) != string(g.CRLPEM) {
			t.Fatalf("CRL after a PutCRL with an ended context is not the genesis CRL (%v)", err)
		}
		caLocked(t, s, func(ctx context.Context) {
			serial, err := s.NextSerial(ctx)
			if err != nil || serial.Int64() != 2 {
				t.Fatalf("NextSerial after one with an ended context = %v, %v; want 2", serial, err)
			}
		})
	})
}

// TestSharedCA runs two CAs opened on one store, as two front doors run:
// concurrent autosigned requests get distinct serials, a name requested
// through both at once gets one certificate, and revocations made through
// each end on one CRL. open returns the two CAs, autosign on.
func TestSharedCA(t *testing.T, open func(t *testing.T) (a, b farm.CA)) {
	a, b := open(t)
	ctx := t.Context()
	const n = 30
	var wg sync.WaitGroup
	for i := range n {
		c := a
		if i%2 == 1 {
			c = b
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := fmt.Sprintf("shared%02d.example.test", i)
			csr, _ := NewCSR(t, name)
			if err := c.SubmitCSR(ctx, name, csr); err != nil {
				t.Errorf("SubmitCSR %s: %v", name, err)
			}
		}()
	}
	// One name through both at once: one wins, the other is told.
	var wins, conflicts int
	var mu sync.Mutex
	for _, c := range []farm.CA{a, b, a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			csr, _ := NewCSR(t, "contested.example.test")
			err := c.SubmitCSR(ctx, "contested.example.test", csr)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				wins++
			case errors.Is(err, farm.ErrConflict):
				conflicts++
			default:
				t.Errorf("contested SubmitCSR: %v", err)
			}
		}()
	}
	wg.Wait()
	if wins != 1 || conflicts != 3 {
		t.Errorf("contested name: %d signed, %d refused; want 1 and 3", wins, conflicts)
	}
	list, err := b.List(ctx)
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	serials := map[string]string{}
	for _, s := range list {
		if other, dup := serials[s.Serial]; dup {
			t.Errorf("serial %s issued to %s and %s", s.Serial, other, s.Certname)
		}
		serials[s.Serial] = s.Certname
	}
	if len(list) != n+1 {
		t.Errorf("List has %d entries, want %d", len(list), n+1)
	}
	if err := a.Revoke(ctx, "shared00.example.test"); err != nil {
		t.Fatalf("Revoke: %v", err)
	}
	if err := b.Revoke(ctx, "shared01.example.test"); err != nil {
		t.Fatalf("Revoke: %v", err)
	}
	crlPEM, err := b.CRL(ctx)
	if err != nil {
		t.Fatalf("CRL: %v", err)
	}
	block, _ := pem.Decode(crlPEM)
	rl, err := x509.ParseRevocationList(block.Bytes)
	if err != nil || len(rl.RevokedCertificateEntries) != 2 || rl.Number.Int64() != 2 {
		t.Fatalf("CRL after one revocation through each CA: %v entries, number %v, %v; want 2 and 2", len(rl.RevokedCertificateEntries), rl.Number, err)
	}
}

func noErr(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func caLocked(t *testing.T, s farm.CAStore, fn func(ctx context.Context)) {
	t.Helper()
	unlock, err := s.Lock(t.Context())
	if err != nil {
		t.Fatalf("Lock: %v", err)
	}
	defer unlock()
	fn(t.Context())
}

func caCreate(t *testing.T, s farm.CAStore, m *minter) {
	t.Helper()
	g := m.genesis(t)
	caLocked(t, s, func(ctx context.Context) { noErr(t, s.Create(ctx, g)) })
}

// minter makes a throwaway CA's certificates and CRLs for the store suite,
// which checks records, not cryptography.
type minter struct {
	key    crypto.Signer
	caCert *x509.Certificate
	der    []byte
}

func newMinter(t *testing.T) *minter {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	noErr(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "Puppet CA: store test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	noErr(t, err)
	cert, err := x509.ParseCertificate(der)
	noErr(t, err)
	return &minter{key: key, caCert: cert, der: der}
}

func (m *minter) genesis(t *testing.T) farm.CAGenesis {
	return farm.CAGenesis{
		CertPEM:    pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: m.der}),
		CRLPEM:     m.crl(t, 0),
		NextSerial: big.NewInt(2),
		Issued:     farm.CertIssued{Certname: m.caCert.Subject.CommonName, Serial: big.NewInt(1), NotBefore: m.caCert.NotBefore, NotAfter: m.caCert.NotAfter},
	}
}

func (m *minter) cert(t *testing.T, serial int64, cn string) []byte {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	noErr(t, err)
	der, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{
		SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn}, DNSNames: []string{cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
	}, m.caCert, key.Public(), m.key)
	noErr(t, err)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func (m *minter) crl(t *testing.T, number int64) []byte { return m.crlWith(t, number, 0) }

// crlWith makes a CRL revoking serials 1000..1000+revoked-1.
func (m *minter) crlWith(t *testing.T, number int64, revoked int) []byte {
	entries := make([]x509.RevocationListEntry, revoked)
	for i := range entries {
		entries[i] = x509.RevocationListEntry{SerialNumber: big.NewInt(int64(1000 + i)), RevocationTime: time.Now()}
	}
	der, err := x509.CreateRevocationList(rand.Reader, &x509.RevocationList{
		Number: big.NewInt(number), ThisUpdate: time.Now(), NextUpdate: time.Now().Add(time.Hour),
		RevokedCertificateEntries: entries,
	}, m.caCert, m.key)
	noErr(t, err)
	return pem.EncodeToMemory(&pem.Block{Type: "X509 CRL", Bytes: der})
}

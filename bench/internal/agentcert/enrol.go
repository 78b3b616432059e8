package agentcert

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/compilefarm/compilefarm/pkg/pki"
)

// Agent is one synthetic agent's identity: its certname and certificate
// (with its key and parsed leaf).
type Agent struct {
	Name string
	Cert tls.Certificate
}

// Key types for Enrol.
const (
	KeyECDSA = "ecdsa" // P-256: generated in microseconds; the CA signs it
	KeyRSA   = "rsa"   // 2048 bits, as loadgen's --key rsa
)

// Enrol makes a key of keyType (KeyECDSA or KeyRSA) and a CSR for name,
// submits it (the broker autosigns) and fetches the signed certificate, as
// a first agent run does. The certificate must verify against the farm's
// CA, which also catches a CA that changed since FetchCA.
func (f *Farm) Enrol(ctx context.Context, name, keyType string) (*Agent, error) {
	a, _, err := f.enrol(ctx, bootstrapClient(), name, keyType)
	return a, err
}

// enrol is Enrol on a given bootstrap client; it also returns the key's PEM
// (for a Store).
func (f *Farm) enrol(ctx context.Context, c *http.Client, name, keyType string) (*Agent, []byte, error) {
	if keyType != KeyECDSA && keyType != KeyRSA {
		return nil, nil, fmt.Errorf("key type %q: want %s or %s", keyType, KeyECDSA, KeyRSA)
	}
	key, keyPEM, err := pki.NewServerKey(keyType, 2048) // RSA 2048 for "rsa", else ECDSA P-256
	if err != nil {
		return nil, nil, err
	}
	csr, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: name}}, key)
	if err != nil {
		return nil, nil, err
	}
	base := "https://" + f.Target + "/puppet-ca/v1/"
	csrPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: csr})
	if _, err := fetch(ctx, c, http.MethodPut, base+"certificate_request/"+name, csrPEM, http.StatusOK); err != nil {
		return nil, nil, fmt.Errorf("submit CSR: %w", err)
	}
	// With autosign the certificate is there at once; poll briefly in case
	// signing is asynchronous, but never forever.
	var certPEM []byte
	for try := 0; ; try++ {
		certPEM, err = fetch(ctx, c, http.MethodGet, base+"certificate/"+name, nil, http.StatusOK)
		if err == nil {
			break
		}
		if try == 10 || ctx.Err() != nil {
			return nil, nil, fmt.Errorf("fetch the signed certificate (is the broker started with --autosign?): %w", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	a, err := f.identity(name, certPEM, keyPEM)
	if err != nil {
		return nil, nil, err
	}
	return a, keyPEM, nil
}

// identity checks that certPEM is name's certificate from the farm's CA,
// usable for a client, and pairs it with its key.
func (f *Farm) identity(name string, certPEM, keyPEM []byte) (*Agent, error) {
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("signed certificate for %s: %w", name, err)
	}
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		return nil, err
	}
	if leaf.Subject.CommonName != name {
		return nil, fmt.Errorf("the certificate for %s names %q", name, leaf.Subject.CommonName)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: f.Roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		return nil, fmt.Errorf("certificate for %s does not verify against the farm's CA: %w", name, err)
	}
	cert.Leaf = leaf
	return &Agent{Name: name, Cert: cert}, nil
}

// EnrolOptions tune EnrolAll.
type EnrolOptions struct {
	KeyType  string // KeyECDSA (default) or KeyRSA
	Parallel int    // enrolments at once; default 8
	// Store, when set, is tried first for each name, and keeps every new
	// identity.
	Store *Store
	// Progress, when set, is called after each agent (from several
	// goroutines at once) with whether its identity came from Store.
	Progress func(reused bool)
}

// EnrolAll enrols the named agents, opts.Parallel at a time, reusing what
// opts.Store holds for this CA.
func (f *Farm) EnrolAll(ctx context.Context, names []string, opts EnrolOptions) ([]*Agent, error) {
	if opts.KeyType == "" {
		opts.KeyType = KeyECDSA
	}
	agents := make([]*Agent, len(names))
	errs := make([]error, len(names))
	if opts.Parallel <= 0 {
		opts.Parallel = 8
	}
	sem := make(chan struct{}, opts.Parallel)
	c := bootstrapClient()
	var wg sync.WaitGroup
	for i, name := range names {
		if ctx.Err() != nil {
			errs[i] = ctx.Err()
			break
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			agents[i], errs[i] = f.enrolOne(ctx, c, name, opts)
			if errs[i] != nil {
				errs[i] = fmt.Errorf("enrol %s: %w", name, errs[i])
			}
		}()
	}
	wg.Wait()
	return agents, errors.Join(errs...)
}

func (f *Farm) enrolOne(ctx context.Context, c *http.Client, name string, opts EnrolOptions) (*Agent, error) {
	if opts.Store != nil {
		if a, ok := opts.Store.Load(f, name); ok {
			if opts.Progress != nil {
				opts.Progress(true)
			}
			return a, nil
		}
	}
	a, keyPEM, err := f.enrol(ctx, c, name, opts.KeyType)
	if err != nil {
		return nil, err
	}
	if opts.Store != nil {
		if err := opts.Store.Save(a, keyPEM); err != nil {
			return nil, err
		}
	}
	if opts.Progress != nil {
		opts.Progress(false)
	}
	return a, nil
}

package memstore

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"maps"
	"math/big"
	"slices"
	"sync"

	"github.com/compilefarm/compilefarm/pkg/farm"
	"github.com/compilefarm/compilefarm/pkg/pki"
)

// CAStore is a farm.CAStore in memory: the store of fast tests of the CA.
// Lock is a real lock (one holder at a time, waiting until ctx ends), and
// the conditions of Create, PutSigned, DeleteSigned and PutCRL hold
// whether or not the caller holds it. Safe for concurrent use; see
// NewCAStore.
type CAStore struct {
	lock chan struct{} // holds a token while Lock is held

	mu         sync.Mutex
	certPEM    []byte
	crlPEM     []byte
	crlNumber  *big.Int
	nextSerial *big.Int
	issued     []farm.CertIssued
	requests   map[string][]byte
	signed     map[string]heldCert
	servers    map[string]heldCert
}

// heldCert is a stored certificate with what the conditions read of it.
type heldCert struct {
	pem  []byte
	cert *x509.Certificate
}

var _ farm.CAStore = (*CAStore)(nil)

// NewCAStore returns a store without a CA.
func NewCAStore() *CAStore {
	return &CAStore{
		lock:     make(chan struct{}, 1),
		requests: map[string][]byte{},
		signed:   map[string]heldCert{},
		servers:  map[string]heldCert{},
	}
}

// Lock waits for the store's lock until ctx ends.
func (s *CAStore) Lock(ctx context.Context) (func(), error) {
	if err := farm.CheckCALock(ctx); err != nil {
		return nil, err
	}
	select {
	case s.lock <- struct{}{}:
		var once sync.Once
		return func() { once.Do(func() { <-s.lock }) }, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("lock CA store: %w", ctx.Err())
	}
}

// CACert returns the CA certificate; ErrNotFound before Create.
func (s *CAStore) CACert(ctx context.Context) ([]byte, error) {
	if err := farm.CheckCACert(ctx); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.certPEM == nil {
		return nil, fmt.Errorf("read CA certificate: %w", farm.ErrNotFound)
	}
	return bytes.Clone(s.certPEM), nil
}

// Create records g; ErrConflict when there is a CA.
func (s *CAStore) Create(ctx context.Context, g farm.CAGenesis) error {
	if err := farm.CheckCACreate(ctx, &g); err != nil {
		return err
	}
	number, err := crlNumber(g.CRLPEM)
	if err != nil {
		return fmt.Errorf("create CA: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.certPEM != nil {
		return fmt.Errorf("create CA: %w", farm.ErrConflict)
	}
	s.certPEM, s.crlPEM, s.crlNumber = bytes.Clone(g.CertPEM), bytes.Clone(g.CRLPEM), number
	s.nextSerial = new(big.Int).Set(g.NextSerial)
	s.issued = append(s.issued, g.Issued)
	return nil
}

// crlNumber reads the CRL number of a PEM CRL.
func crlNumber(crlPEM []byte) (*big.Int, error) {
	block, _ := pem.Decode(crlPEM)
	if block == nil {
		return nil, fmt.Errorf("the CRL is not PEM: %w", farm.ErrInvalid)
	}
	rl, err := x509.ParseRevocationList(block.Bytes)
	if err != nil || rl.Number == nil {
		return nil, fmt.Errorf("the CRL has no readable CRL number (%v): %w", err, farm.ErrInvalid)
	}
	return rl.Number, nil
}

// Check reports whether there is a CA.
func (s *CAStore) Check(ctx context.Context) error {
	if err := farm.CheckCACheck(ctx); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.nextSerial == nil {
		return fmt.Errorf("check CA store: no serial counter: %w", farm.ErrNotFound)
	}
	return nil
}

// NextSerial takes the next serial number.
func (s *CAStore) NextSerial(ctx context.Context) (*big.Int, error) {
	if err := farm.CheckCANextSerial(ctx); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.nextSerial == nil {
		return nil, fmt.Errorf("take a serial number: no CA: %w", farm.ErrNotFound)
	}
	n := new(big.Int).Set(s.nextSerial)
	s.nextSerial.Add(s.nextSerial, big.NewInt(1))
	return n, nil
}

// RecordIssued adds e to the inventory.
func (s *CAStore) RecordIssued(ctx context.Context, e farm.CertIssued) error {
	if err := farm.CheckCARecordIssued(ctx, &e); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.issued = append(s.issued, e)
	return nil
}

// CRL returns the current CRL; ErrNotFound before Create.
func (s *CAStore) CRL(ctx context.Context) ([]byte, error) {
	if err := farm.CheckCACRL(ctx); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.crlPEM == nil {
		return nil, fmt.Errorf("read CRL: %w", farm.ErrNotFound)
	}
	return bytes.Clone(s.crlPEM), nil
}

// PutCRL replaces the CRL if the current one's number is prev.
func (s *CAStore) PutCRL(ctx context.Context, crlPEM []byte, number, prev *big.Int) error {
	if err := farm.CheckCAPutCRL(ctx, crlPEM, number, prev); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.crlNumber == nil || s.crlNumber.Cmp(prev) != 0 {
		return fmt.Errorf("replace CRL number %s: the current CRL has number %v: %w", prev, s.crlNumber, farm.ErrConflict)
	}
	s.crlPEM, s.crlNumber = bytes.Clone(crlPEM), new(big.Int).Set(number)
	return nil
}

// Request returns certname's pending request.
func (s *CAStore) Request(ctx context.Context, certname string) ([]byte, error) {
	if err := farm.CheckCARequest(ctx, certname); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.requests[certname]
	if !ok {
		return nil, fmt.Errorf("read certificate request of %s: %w", certname, farm.ErrNotFound)
	}
	return bytes.Clone(b), nil
}

// PutRequest stores certname's request.
func (s *CAStore) PutRequest(ctx context.Context, certname string, csrPEM []byte) error {
	if err := farm.CheckCAPutRequest(ctx, certname, csrPEM); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests[certname] = bytes.Clone(csrPEM)
	return nil
}

// DeleteRequest removes certname's request.
func (s *CAStore) DeleteRequest(ctx context.Context, certname string) error {
	if err := farm.CheckCADeleteRequest(ctx, certname); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.requests, certname)
	return nil
}

// Requests returns every pending request.
func (s *CAStore) Requests(ctx context.Context) (map[string][]byte, error) {
	if err := farm.CheckCARequests(ctx); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string][]byte, len(s.requests))
	for name, b := range s.requests {
		out[name] = bytes.Clone(b)
	}
	return out, nil
}

// Signed returns certname's certificate.
func (s *CAStore) Signed(ctx context.Context, certname string) ([]byte, error) {
	if err := farm.CheckCASigned(ctx, certname); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	h, ok := s.signed[certname]
	if !ok {
		return nil, fmt.Errorf("read certificate of %s: %w", certname, farm.ErrNotFound)
	}
	return bytes.Clone(h.pem), nil
}

// PutSigned stores certname's certificate if it holds the one with serial
// replace (none, when replace is nil).
func (s *CAStore) PutSigned(ctx context.Context, certname string, certPEM []byte, replace *big.Int) error {
	if err := farm.CheckCAPutSigned(ctx, certname, certPEM, replace); err != nil {
		return err
	}
	h, err := parseHeld(certPEM)
	if err != nil {
		return fmt.Errorf("store certificate of %s: %w", certname, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	cur, holds := s.signed[certname]
	switch {
	case replace == nil && holds:
		return fmt.Errorf("store certificate of %s: it holds certificate %s: %w", certname, pki.FormatSerial(cur.cert.SerialNumber), farm.ErrConflict)
	case replace != nil && !holds:
		return fmt.Errorf("replace certificate %s of %s: it holds none: %w", pki.FormatSerial(replace), certname, farm.ErrConflict)
	case replace != nil && cur.cert.SerialNumber.Cmp(replace) != 0:
		return fmt.Errorf("replace certificate %s of %s: it holds certificate %s: %w", pki.FormatSerial(replace), certname, pki.FormatSerial(cur.cert.SerialNumber), farm.ErrConflict)
	}
	s.signed[certname] = h
	return nil
}

func parseHeld(certPEM []byte) (heldCert, error) {
	cert, err := pki.ParseCertPEM(certPEM)
	if err != nil {
		return heldCert{}, fmt.Errorf("%w: %w", err, farm.ErrInvalid)
	}
	return heldCert{pem: bytes.Clone(certPEM), cert: cert}, nil
}

// DeleteSigned removes certname's certificate if its serial is serial.
func (s *CAStore) DeleteSigned(ctx context.Context, certname string, serial *big.Int) error {
	if err := farm.CheckCADeleteSigned(ctx, certname, serial); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	cur, holds := s.signed[certname]
	if !holds {
		return nil
	}
	if cur.cert.SerialNumber.Cmp(serial) != 0 {
		return fmt.Errorf("delete certificate %s of %s: it holds certificate %s: %w", pki.FormatSerial(serial), certname, pki.FormatSerial(cur.cert.SerialNumber), farm.ErrConflict)
	}
	delete(s.signed, certname)
	return nil
}

// SignedCerts returns every held certificate.
func (s *CAStore) SignedCerts(ctx context.Context) (map[string][]byte, error) {
	if err := farm.CheckCASignedCerts(ctx); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string][]byte, len(s.signed))
	for name, h := range s.signed {
		out[name] = bytes.Clone(h.pem)
	}
	return out, nil
}

// PutServerCert records a front door's certificate.
func (s *CAStore) PutServerCert(ctx context.Context, certname string, certPEM []byte) error {
	if err := farm.CheckCAPutServerCert(ctx, certname, certPEM); err != nil {
		return err
	}
	h, err := parseHeld(certPEM)
	if err != nil {
		return fmt.Errorf("store server certificate of %s: %w", certname, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.servers[certname] = h
	return nil
}

// ServerCerts returns the front doors' certificates carrying dnsName (all
// of them for "").
func (s *CAStore) ServerCerts(ctx context.Context, dnsName string) ([][]byte, error) {
	if err := farm.CheckCAServerCerts(ctx, dnsName); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var out [][]byte
	for _, name := range slices.Sorted(maps.Keys(s.servers)) {
		h := s.servers[name]
		if dnsName == "" || slices.Contains(h.cert.DNSNames, dnsName) {
			out = append(out, bytes.Clone(h.pem))
		}
	}
	return out, nil
}

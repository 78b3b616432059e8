package caproxy

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net/http"
	"time"

	"github.com/compilefarm/compilefarm/internal/atomicfile"
)

// crlState is one verified CRL (or bundle of CRLs, one per CA of the
// upstream's chain); swapped whole, never modified.
type crlState struct {
	pem        []byte
	numbers    map[string]*big.Int // issuer (raw subject) → CRL number
	revoked    map[string]struct{} // serial (hex)
	entries    int
	nextUpdate time.Time // earliest of the CRLs'
	fetched    time.Time // when it last came from (or matched) the upstream
}

// parseCRL parses a PEM CRL or CRL bundle and checks that each CRL is
// signed by a CA certificate this proxy trusts.
func (c *CA) parseCRL(data []byte) (*crlState, error) {
	st := &crlState{pem: bytes.Clone(data), numbers: map[string]*big.Int{}, revoked: map[string]struct{}{}}
	for rest := data; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type != "X509 CRL" {
			continue
		}
		rl, err := x509.ParseRevocationList(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("parse CRL: %w", err)
		}
		signed := false
		for _, ca := range c.caCerts {
			if bytes.Equal(ca.RawSubject, rl.RawIssuer) && rl.CheckSignatureFrom(ca) == nil {
				signed = true
				break
			}
		}
		if !signed {
			return nil, fmt.Errorf("CRL of %q is not signed by the trusted upstream CA certificate", rl.Issuer.String())
		}
		number := rl.Number
		if number == nil {
			number = new(big.Int)
		}
		st.numbers[string(rl.RawIssuer)] = number
		for _, e := range rl.RevokedCertificateEntries {
			st.revoked[e.SerialNumber.Text(16)] = struct{}{}
			st.entries++
		}
		if !rl.NextUpdate.IsZero() && (st.nextUpdate.IsZero() || rl.NextUpdate.Before(st.nextUpdate)) {
			st.nextUpdate = rl.NextUpdate
		}
	}
	if len(st.numbers) == 0 {
		return nil, errors.New("no PEM X509 CRL")
	}
	return st, nil
}

// olderThan reports whether st has a lower CRL number than cur for some CA.
func (st *crlState) olderThan(cur *crlState) bool {
	for issuer, n := range cur.numbers {
		if m, ok := st.numbers[issuer]; ok && m.Cmp(n) < 0 {
			return true
		}
	}
	return false
}

// RefreshCRL fetches the CRL from the upstream CA now, verifies it and,
// unless it is older than the one held, makes it current and keeps it in
// Dir. It runs every Options.CRLRefresh in the background; call it to pick
// up a revocation at once. On failure the last good CRL stays current.
func (c *CA) RefreshCRL(ctx context.Context) error {
	c.refreshMu.Lock()
	defer c.refreshMu.Unlock()
	cur := c.crl.Load()
	var ims http.Header
	if cur != nil && c.crlModified != "" {
		// Only a changed CRL comes back: large sites' CRLs are megabytes.
		ims = http.Header{"If-Modified-Since": {c.crlModified}}
	}
	status, hdr, body, err := c.doHeader(ctx, c.client, http.MethodGet, "/puppet-ca/v1/certificate_revocation_list/ca", nil, ims)
	if err == nil && status != http.StatusOK && status != http.StatusNotModified {
		err = upstreamError(status, body)
	}
	if err != nil {
		return fmt.Errorf("fetch CRL: %w", err)
	}
	if status == http.StatusNotModified || (cur != nil && bytes.Equal(cur.pem, body)) {
		if status == http.StatusOK {
			c.crlModified = hdr.Get("Last-Modified")
		}
		next := *cur
		next.fetched = time.Now()
		c.crl.Store(&next)
		return nil
	}
	st, err := c.parseCRL(body)
	if err != nil {
		return fmt.Errorf("CRL from upstream CA %s: %w", c.upstream, err)
	}
	if cur != nil && st.olderThan(cur) {
		return fmt.Errorf("CRL from upstream CA %s is older (lower CRL number) than the one held; keeping that", c.upstream)
	}
	st.fetched = time.Now()
	if !st.nextUpdate.IsZero() && st.fetched.After(st.nextUpdate) {
		c.log.Warn("the upstream CA's CRL is past its next update; the CA should publish a new one", "next_update", st.nextUpdate)
	}
	if err := atomicfile.Write(c.path(fileCRL), body, 0o600); err != nil {
		c.log.Error("could not keep the CRL", "file", c.path(fileCRL), "err", err)
	}
	c.crl.Store(st)
	c.crlModified = hdr.Get("Last-Modified")
	c.log.Info("CRL updated from the upstream CA", "revoked", st.entries, "crl_numbers", crlNumbers(st))
	return nil
}

func crlNumbers(st *crlState) []string {
	var out []string
	for _, n := range st.numbers {
		out = append(out, n.String())
	}
	return out
}

func (c *CA) refreshLoop(ctx context.Context) {
	defer close(c.done)
	t := time.NewTicker(c.opts.CRLRefresh)
	defer t.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		err := c.RefreshCRL(ctx)
		switch {
		case err != nil && ctx.Err() != nil:
			return
		case err != nil:
			age := "never"
			if st := c.crl.Load(); st != nil && !st.fetched.IsZero() {
				age = time.Since(st.fetched).Round(time.Second).String()
			}
			c.log.Error("could not refresh the CRL from the upstream CA; serving the last good copy", "err", err, "last_good_age", age)
			failing = true
		case failing:
			c.log.Info("CRL refresh from the upstream CA works again")
			failing = false
		}
	}
}

// CRL returns the last good CRL of the upstream CA (PEM), refreshed every
// Options.CRLRefresh.
func (c *CA) CRL(ctx context.Context) ([]byte, error) {
	st := c.crl.Load()
	if st == nil {
		return nil, fmt.Errorf("no CRL from upstream CA %s yet", c.upstream)
	}
	return bytes.Clone(st.pem), nil
}

// IsRevoked reports whether the upstream CA's CRL, as last fetched, lists
// the certificate with this serial. It answers from memory.
func (c *CA) IsRevoked(serial *big.Int) bool {
	st := c.crl.Load()
	if st == nil || serial == nil {
		return false
	}
	_, ok := st.revoked[serial.Text(16)]
	return ok
}

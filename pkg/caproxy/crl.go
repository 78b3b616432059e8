package caproxy

import (
	"bytes"
	"context"
	"crypto/x509"
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
	// since is when this proxy began to serve it: agents that downloaded
	// the CRL from here before then hold an older one.
	since time.Time
	// etag and lastModified are the upstream's validators for it ("" when
	// not given), sent back to revalidate.
	etag, lastModified string
}

// conditions are the headers that let the upstream answer 304 when st is
// still its CRL: If-None-Match, which is exact, when the upstream gave an
// ETag, else If-Modified-Since with its Last-Modified. None for nil or
// without validators (Puppet Server gives none): the CRL is fetched whole.
func (st *crlState) conditions() http.Header {
	switch {
	case st == nil:
		return nil
	case st.etag != "":
		return http.Header{"If-None-Match": {st.etag}}
	case st.lastModified != "":
		return http.Header{"If-Modified-Since": {st.lastModified}}
	}
	return nil
}

// parseCRL parses a PEM CRL or CRL bundle and checks that each CRL is
// signed by a CA certificate this proxy trusts.
func (c *CA) parseCRL(data []byte) (*crlState, error) {
	st := &crlState{pem: bytes.Clone(data), numbers: map[string]*big.Int{}, revoked: map[string]struct{}{}}
	for der := range pemBlocks(data, "X509 CRL") {
		rl, err := x509.ParseRevocationList(der)
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
	// Only a changed CRL comes back: large sites' CRLs are megabytes.
	status, hdr, body, err := c.doHeader(ctx, c.client, http.MethodGet, "/puppet-ca/v1/certificate_revocation_list/ca", nil, cur.conditions())
	switch {
	case err != nil:
	case status == http.StatusNotModified && cur == nil:
		err = fmt.Errorf("upstream CA %s answered 304 Not Modified to a request for its CRL without conditions", c.upstream)
	case status != http.StatusOK && status != http.StatusNotModified:
		err = upstreamError(status, body)
	}
	if err != nil {
		return fmt.Errorf("fetch CRL: %w", err)
	}
	now := time.Now()
	if status == http.StatusNotModified || (cur != nil && bytes.Equal(cur.pem, body)) {
		next := *cur
		next.fetched = now
		if status == http.StatusOK {
			next.etag, next.lastModified = hdr.Get("ETag"), hdr.Get("Last-Modified")
		}
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
	st.fetched, st.since = now, now
	st.etag, st.lastModified = hdr.Get("ETag"), hdr.Get("Last-Modified")
	if !st.nextUpdate.IsZero() && st.fetched.After(st.nextUpdate) {
		c.log.Warn("the upstream CA's CRL is past its next update; the CA should publish a new one", "next_update", st.nextUpdate)
	}
	if err := atomicfile.Write(c.path(fileCRL), body, 0o600); err != nil {
		c.log.Error("could not keep the CRL", "file", c.path(fileCRL), "err", err)
	}
	c.crl.Store(st)
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
	b, _, err := c.CRLSince(ctx)
	return b, err
}

// CRLSince is CRL, with when this proxy began to serve that CRL (fetched
// it, or kept it in Dir): later than the upstream signed it, by up to
// Options.CRLRefresh. A front door dates the CRL no earlier, so an agent
// that downloaded the previous CRL here after the upstream signed this one
// still gets this one when it asks If-Modified-Since.
func (c *CA) CRLSince(ctx context.Context) ([]byte, time.Time, error) {
	st := c.crl.Load()
	if st == nil {
		return nil, time.Time{}, fmt.Errorf("no CRL from upstream CA %s yet", c.upstream)
	}
	return bytes.Clone(st.pem), st.since, nil
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

package frontdoor

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/compilefarm/compilefarm/pkg/farm"
)

// CA answers are plain text, as Puppet Server's CA service gives them.

func textError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "text/plain")
	w.WriteHeader(status)
	fmt.Fprint(w, msg)
}

func writePEM(w http.ResponseWriter, b []byte) {
	w.Header().Set("Content-Type", "text/plain")
	w.Write(b)
}

// puppetMessage is a CA error carrying the body Puppet Server answers with
// (our CA's refusals, an upstream CA's answers), without the context the
// error gathered on its way up.
type puppetMessage interface {
	error
	PuppetMessage() string
}

func (s *Server) caError(w http.ResponseWriter, r *http.Request, what, name string, err error) {
	switch {
	case errors.Is(err, farm.ErrNotFound):
		textError(w, http.StatusNotFound, fmt.Sprintf("Could not find %s %s", what, name))
	case errors.Is(err, farm.ErrInvalid), errors.Is(err, farm.ErrConflict):
		msg := err.Error()
		if pm, ok := errors.AsType[puppetMessage](err); ok {
			msg = pm.PuppetMessage()
		}
		textError(w, http.StatusBadRequest, msg)
	case errors.Is(err, errTooLarge):
		textError(w, http.StatusRequestEntityTooLarge, err.Error())
	default:
		s.log().Error("CA request failed", "path", r.URL.Path, "err", err)
		w.Header().Set("Retry-After", "5")
		textError(w, http.StatusServiceUnavailable, "CA unavailable: "+err.Error())
	}
}

func (s *Server) getCertificate(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	var (
		b   []byte
		err error
	)
	if name == "ca" {
		b, err = s.CA.CACertificate(r.Context())
	} else if err = farm.ValidateCertname(name); err == nil {
		b, err = s.CA.Certificate(r.Context(), name)
	}
	if err != nil {
		s.caError(w, r, "certificate", name, err)
		return
	}
	writePEM(w, b)
}

// getCRL answers the CRL, or 304 to an agent that holds it already: a
// large site's CRL is megabytes, and agents with crl_refresh_interval ask
// again and again with If-Modified-Since. See crlVersion for the rule.
func (s *Server) getCRL(w http.ResponseWriter, r *http.Request) {
	b, since, err := s.currentCRL(r.Context())
	if err != nil {
		s.caError(w, r, "certificate_revocation_list", "ca", err)
		return
	}
	v := newCRLVersion(b, since)
	h := w.Header()
	h.Set("ETag", v.etag)
	if v.notModified(r.Header) {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	if lm := v.lastModified; !lm.IsZero() {
		if now := time.Now(); lm.After(now) {
			lm = now // never later than the answer's Date (RFC 9110, 8.8.2.1)
		}
		h.Set("Last-Modified", lm.UTC().Format(http.TimeFormat))
	}
	h.Set("Content-Type", "text/plain")
	// A zero modtime: ServeContent neither sets Last-Modified nor answers
	// If-Modified-Since; notModified did.
	http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(b))
}

// crlSettle is how long after it was made a CRL still counts as new to an
// agent asking If-Modified-Since. It covers what separates the moment a
// CRL is signed from the moment an agent records that it downloaded the
// one before: the store write that publishes the CRL to every front door,
// a download in flight meanwhile, and agents whose clock runs a little
// ahead. An agent that downloads the CRL within it downloads it again at
// its next refresh, once.
const crlSettle = 10 * time.Second

// servedCRL is a CA that may have begun to serve its current CRL later than
// the CRL was made: a proxy, which fetches the upstream's CRL now and then.
// An agent may have downloaded the previous CRL from it after the current
// one was made.
type servedCRL interface {
	// CRLSince returns the CRL (PEM) and when this CA began to serve it.
	CRLSince(ctx context.Context) ([]byte, time.Time, error)
}

// currentCRL returns the CA's CRL and when it began to be served, if the CA
// tells (zero otherwise: the CRL's own date stands).
func (s *Server) currentCRL(ctx context.Context) ([]byte, time.Time, error) {
	if sc, ok := s.CA.(servedCRL); ok {
		return sc.CRLSince(ctx)
	}
	b, err := s.CA.CRL(ctx)
	return b, time.Time{}, err
}

// crlVersion identifies the CRL a front door serves, for conditional
// requests.
//
// Puppet's agent asks If-Modified-Since with the time, by its own clock, at
// which it last downloaded or checked its CRL (the file's mtime), not with
// Last-Modified; Puppet Server answers 304 unless its CRL file changed
// after that. So lastModified must be later than the moment the CRL was
// made, to the second: an agent that downloaded the previous CRL in the
// same second, before this one was signed, still gets this one. It is the
// CRL's own date (crlDate: every front door sharing a CA store agrees on
// it), or when this front door began to serve the CRL if that is later,
// plus crlSettle. The ETag is exact: a proxy revalidates with
// If-None-Match and is never misled by two CRLs of one second.
type crlVersion struct {
	lastModified time.Time // zero: unknown, If-Modified-Since never matches
	etag         string    // strong, from the CRL's bytes
}

func newCRLVersion(crlPEM []byte, since time.Time) crlVersion {
	sum := sha256.Sum256(crlPEM)
	v := crlVersion{etag: `"` + hex.EncodeToString(sum[:16]) + `"`}
	made := crlDate(crlPEM)
	if since.After(made) {
		made = since
	}
	if !made.IsZero() {
		v.lastModified = made.Add(crlSettle)
	}
	return v
}

// crlDate is when a CRL was made, as it tells: the newest of its
// thisUpdate and its revocation dates. A CA dates the revocation that a new
// CRL adds when it signs the CRL (Puppet Server's CA and ours; ours
// backdates thisUpdate, Puppet's by a second); older compilefarm versions
// dated thisUpdate at or after signing. Zero when crlPEM holds no CRL.
func crlDate(crlPEM []byte) time.Time {
	block, _ := pem.Decode(crlPEM)
	if block == nil {
		return time.Time{}
	}
	rl, err := x509.ParseRevocationList(block.Bytes)
	if err != nil {
		return time.Time{}
	}
	made := rl.ThisUpdate
	for _, e := range rl.RevokedCertificateEntries {
		if e.RevocationTime.After(made) {
			made = e.RevocationTime
		}
	}
	return made
}

// notModified reports whether a request's conditions say the client holds
// this CRL: If-None-Match naming its ETag, or, without If-None-Match (RFC
// 9110, 13.2.2), If-Modified-Since at or after lastModified in whole
// seconds.
func (v crlVersion) notModified(h http.Header) bool {
	if inm := h.Values("If-None-Match"); len(inm) > 0 {
		for _, list := range inm {
			for tag := range strings.SplitSeq(list, ",") {
				tag = strings.TrimSpace(tag)
				if tag == "*" || strings.TrimPrefix(tag, "W/") == v.etag {
					return true
				}
			}
		}
		return false
	}
	ims, err := http.ParseTime(h.Get("If-Modified-Since"))
	if err != nil || v.lastModified.IsZero() {
		return false
	}
	return !v.lastModified.Truncate(time.Second).After(ims)
}

func (s *Server) putCSR(w http.ResponseWriter, r *http.Request) {
	// A fresh agent waits for the server to close the connection after its
	// CSR (see shared/puppet-protocol/README.md): close it at once.
	w.Header().Set("Connection", "close")
	name := r.PathValue("name")
	if err := farm.ValidateCertname(name); err != nil {
		s.caError(w, r, "certificate_request", name, err)
		return
	}
	body, err := readBody(r, 64<<10)
	if err != nil {
		s.caError(w, r, "certificate_request", name, err)
		return
	}
	if err := s.CA.SubmitCSR(r.Context(), name, body); err != nil {
		s.log().Warn("certificate request refused", "node", name, "remote", r.RemoteAddr, "err", err)
		s.caError(w, r, "certificate_request", name, err)
		return
	}
	s.log().Info("certificate request accepted", "node", name, "remote", r.RemoteAddr)
	w.Header().Set("Content-Type", "text/plain")
	w.WriteHeader(http.StatusOK)
}

func (s *Server) getCSR(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	err := farm.ValidateCertname(name)
	var b []byte
	if err == nil {
		b, err = s.CA.CertificateRequest(r.Context(), name)
	}
	if err != nil {
		s.caError(w, r, "certificate_request", name, err)
		return
	}
	writePEM(w, b)
}

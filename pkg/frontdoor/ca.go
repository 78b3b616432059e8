package frontdoor

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
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

// getCRL answers the CRL with Last-Modified set to its thisUpdate, and 304
// to an agent whose If-Modified-Since (crl_refresh_interval) is not older:
// a large site's CRL is megabytes.
func (s *Server) getCRL(w http.ResponseWriter, r *http.Request) {
	b, err := s.CA.CRL(r.Context())
	if err != nil {
		s.caError(w, r, "certificate_revocation_list", "ca", err)
		return
	}
	var modified time.Time
	if block, _ := pem.Decode(b); block != nil {
		if rl, err := x509.ParseRevocationList(block.Bytes); err == nil {
			modified = rl.ThisUpdate
		}
	}
	w.Header().Set("Content-Type", "text/plain")
	http.ServeContent(w, r, "", modified, bytes.NewReader(b))
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

package frontdoor

import (
	"crypto/x509"
	"encoding/asn1"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
)

// OperatorPrefix is where the front door serves the operator API
// (pkg/admin's routes): /compilefarm/admin/v1/..., for client certificates
// from the farm's CA carrying pp_cli_auth only.
const OperatorPrefix = "/compilefarm"

// oidPPCliAuth is Puppet's pp_cli_auth: Puppet Server lets a certificate
// carrying it with the value "true" use its CA admin API
// (certificate_status), and the front door its operator API.
var oidPPCliAuth = asn1.ObjectIdentifier{1, 3, 6, 1, 4, 1, 34380, 1, 3, 39}

// IsOperator reports whether cert carries pp_cli_auth=true (a UTF8String,
// or another ASN.1 string, as Puppet writes extension values; or the raw
// value). It does not verify cert.
func IsOperator(cert *x509.Certificate) bool {
	for _, e := range cert.Extensions {
		if !e.Id.Equal(oidPPCliAuth) {
			continue
		}
		var raw asn1.RawValue
		if rest, err := asn1.Unmarshal(e.Value, &raw); err == nil && len(rest) == 0 && raw.Class == asn1.ClassUniversal {
			return string(raw.Bytes) == "true"
		}
		return string(e.Value) == "true"
	}
	return false
}

// operator lets through requests whose client certificate is valid (the
// farm's CA, not revoked) and an operator's (pp_cli_auth), with the prefix
// taken off the path, to the operator API. The refusals say, in the
// operator API's JSON error shape, what an operator does about them.
func (s *Server) operator(h http.Handler) http.HandlerFunc {
	h = http.StripPrefix(OperatorPrefix, h)
	return func(w http.ResponseWriter, r *http.Request) {
		const howTo = "create an operator certificate on the broker's host with `broker ca generate NAME --operator --out DIR` " +
			"(or sign a request for pp_cli_auth with `broker ca sign NAME --allow-authorization-extensions`) and call with " +
			"--cert DIR/NAME.cert.pem --key DIR/NAME.key.pem --ca-cert DIR/ca.pem"
		if peerCert(r) == nil {
			s.operatorRefused(w, r, http.StatusUnauthorized, "no client certificate", "the operator API needs a client certificate: "+howTo)
			return
		}
		c, why := s.clientCert(r)
		if why != "" {
			s.operatorRefused(w, r, http.StatusForbidden, why,
				fmt.Sprintf("the client certificate was refused (%s); if it was revoked or is from another CA, %s", why, howTo))
			return
		}
		if !IsOperator(c) {
			s.operatorRefused(w, r, http.StatusForbidden, "no pp_cli_auth",
				fmt.Sprintf("certificate %q is not an operator's: it lacks Puppet's pp_cli_auth extension (1.3.6.1.4.1.34380.1.3.39); %s",
					c.Subject.CommonName, howTo))
			return
		}
		s.log().Info("operator request", "node", c.Subject.CommonName, "method", r.Method, "path", r.URL.Path)
		h.ServeHTTP(w, r)
	}
}

func (s *Server) operatorRefused(w http.ResponseWriter, r *http.Request, status int, why, msg string) {
	s.log().Warn("operator API refused", "path", r.URL.Path, "method", r.Method, "remote", r.RemoteAddr, "why", why)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]string{"error": strings.TrimSpace(msg), "kind": "forbidden"})
}

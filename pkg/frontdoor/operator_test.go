package frontdoor

import (
	"crypto/ecdsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/compilefarm/compilefarm/pkg/admin"
	"github.com/compilefarm/compilefarm/pkg/ca"
	"github.com/compilefarm/compilefarm/pkg/farm"
	"github.com/compilefarm/compilefarm/pkg/farm/farmtest"
)

// operatorAPI is the operator API over the rig's CA, as broker dev and
// serve build it.
func operatorAPI(a *ca.CA) http.Handler {
	mux := http.NewServeMux()
	(&admin.Server{CA: a}).Register(mux)
	return mux
}

// operatorCert has the rig's CA issue an operator certificate (pp_cli_auth)
// for name, as `broker ca generate NAME --operator` does, and keeps it
// in r.certs.
func (r *rig) operatorCert(name string) {
	r.t.Helper()
	ctx := r.t.Context()
	csr, key := farmtest.NewCSRWith(r.t, name, farmtest.PPCliAuth)
	if err := r.ca.SubmitCSR(ctx, name, csr); err != nil {
		r.t.Fatal(err)
	}
	if _, err := r.ca.Certificate(ctx, name); err == nil {
		r.t.Fatalf("autosign signed a request for pp_cli_auth")
	}
	if err := r.ca.SignWith(ctx, name, farm.SignOptions{AllowAuthorizationExtensions: true}); err != nil {
		r.t.Fatal(err)
	}
	certPEM, err := r.ca.Certificate(ctx, name)
	if err != nil {
		r.t.Fatal(err)
	}
	der, _ := x509.MarshalECPrivateKey(key.(*ecdsa.PrivateKey))
	c, err := tls.X509KeyPair(certPEM, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}))
	if err != nil {
		r.t.Fatal(err)
	}
	r.certs[name] = c
}

func TestOperatorAPI(t *testing.T) {
	r := newRig(t)
	r.operatorCert("ops.example.test")
	r.operatorCert("gone.example.test")
	if err := r.ca.Revoke(t.Context(), "gone.example.test"); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		client   string // certname of the client certificate; "" none
		method   string
		path     string
		want     int // 0: the handshake is refused
		wantBody string
	}{
		{"no client certificate", "", "GET", "/compilefarm/admin/v1/ca/certs", http.StatusUnauthorized, "broker ca generate NAME --operator"},
		{"an agent's certificate", "agent1.example.test", "GET", "/compilefarm/admin/v1/ca/certs", http.StatusForbidden,
			`certificate \"agent1.example.test\" is not an operator's: it lacks Puppet's pp_cli_auth`},
		{"an agent may not sign", "agent1.example.test", "POST", "/compilefarm/admin/v1/ca/sign/agent2.example.test", http.StatusForbidden, "pp_cli_auth"},
		{"an operator lists", "ops.example.test", "GET", "/compilefarm/admin/v1/ca/certs", http.StatusOK, `"name":"ops.example.test"`},
		{"an operator revokes", "ops.example.test", "POST", "/compilefarm/admin/v1/ca/revoke/agent2.example.test", http.StatusOK, `"revoked":"agent2.example.test"`},
		{"a revoked operator", "gone.example.test", "GET", "/compilefarm/admin/v1/ca/certs", 0, ""},
		{"no route outside the prefix", "ops.example.test", "GET", "/admin/v1/ca/certs", http.StatusNotFound, "HANDLER_NOT_FOUND"},
		{"an unknown operator route", "ops.example.test", "GET", "/compilefarm/admin/v1/nothing", http.StatusNotFound, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := r.client(tt.client)
			req, err := http.NewRequestWithContext(t.Context(), tt.method, r.srv.URL+tt.path, nil)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := c.Do(req)
			if tt.want == 0 {
				if err == nil {
					resp.Body.Close()
					if resp.StatusCode != http.StatusForbidden {
						t.Fatalf("%s %s with a revoked certificate: %s, want a refused handshake or 403", tt.method, tt.path, resp.Status)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("%s %s: %v", tt.method, tt.path, err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tt.want || !strings.Contains(string(b), tt.wantBody) {
				t.Fatalf("%s %s = %s %s, want %d with %q", tt.method, tt.path, resp.Status, b, tt.want, tt.wantBody)
			}
		})
	}
}

func TestIsOperator(t *testing.T) {
	ext := func(v []byte) *x509.Certificate {
		return &x509.Certificate{Extensions: []pkix.Extension{{Id: oidPPCliAuth, Value: v}}}
	}
	tests := []struct {
		name string
		cert *x509.Certificate
		want bool
	}{
		{"UTF8String true", ext([]byte{0x0c, 4, 't', 'r', 'u', 'e'}), true},
		{"IA5String true", ext([]byte{0x16, 4, 't', 'r', 'u', 'e'}), true},
		{"raw true", ext([]byte("true")), true},
		{"UTF8String false", ext([]byte{0x0c, 5, 'f', 'a', 'l', 's', 'e'}), false},
		{"no extension", &x509.Certificate{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := IsOperator(tt.cert); got != tt.want {
				t.Errorf("IsOperator = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestOperatorRevokedOnAnOpenConnection: an operator certificate revoked
// while its connection stays open is refused on that connection too.
func TestOperatorRevokedOnAnOpenConnection(t *testing.T) {
	r := newRig(t)
	r.operatorCert("late.example.test")
	c := r.client("late.example.test")
	get := func() int {
		resp, err := c.Get(r.srv.URL + "/compilefarm/admin/v1/ca/certs")
		if err != nil {
			t.Fatalf("GET: %v", err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := get(); got != http.StatusOK {
		t.Fatalf("before the revocation: %d, want 200", got)
	}
	if err := r.ca.Revoke(t.Context(), "late.example.test"); err != nil {
		t.Fatal(err)
	}
	if got := get(); got != http.StatusForbidden {
		t.Fatalf("after the revocation, on the same connection: %d, want 403", got)
	}
}

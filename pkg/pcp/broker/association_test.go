package broker

import (
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/compilefarm/compilefarm/internal/pcpclients"
	"github.com/compilefarm/compilefarm/pkg/pcp/message"
)

// TestAssociation plays the v1 association cases of pcp-broker's tests
// with a Go client: refusals get success false with the reason, then the
// close 4002 "association unsuccessful".
func TestAssociation(t *testing.T) {
	t.Parallel()
	tb := startBroker(t, pcpclients.NewPKI(t), Options{})
	tests := []struct {
		name   string
		path   string
		cert   string
		sender string
		reason string // "" for success
	}{
		{"good", "/pcp/", "node1", "pcp://node1/agent", ""},
		{"good with the type in the path", "/pcp/controller", "node2", "pcp://node2/controller", ""},
		{"without the trailing slash", "/pcp", "node3", "pcp://node3/agent", ""},
		{"sender is not the certificate", "/pcp/", "node4", "pcp://other/agent", "Message not authenticated"},
		{"type server", "/pcp/", "node5", "pcp://node5/server", "'server' type connections not accepted"},
		{"type compilefarm-task", "/pcp/", "node7", "pcp://node7/compilefarm-task", "'compilefarm-task' type connections not accepted"},
		{"the broker's own heartbeat URI", "/pcp/", "broker1", "pcp://broker1/compilefarm-task", "'compilefarm-task' type connections not accepted"},
		{"type differs from the path's", "/pcp/agent", "node6", "pcp://node6/controller", "is not the one this connection named"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := dial(t, tb, identity(t, tb.pki, tt.cert), tt.path)
			ok, reason := c.tryAssociate(tt.sender)
			if tt.reason == "" {
				if !ok {
					t.Fatalf("refused: %s", reason)
				}
				waitFor(t, "the association to be registered", func() bool { return tb.local(tt.sender) != nil })
				return
			}
			if ok || !strings.Contains(reason, tt.reason) {
				t.Fatalf("success %v, reason %q; want a refusal saying %q", ok, reason, tt.reason)
			}
			if ce := c.expectClose(5 * time.Second); ce.Code != CloseAssociationFailed || ce.Text != "association unsuccessful" {
				t.Fatalf("closed with %d %q, want 4002 association unsuccessful", ce.Code, ce.Text)
			}
		})
	}
}

// TestAssociateTwice: a second associate_request on an associated session
// is refused and closes it, as pcp-broker does.
func TestAssociateTwice(t *testing.T) {
	t.Parallel()
	tb := startBroker(t, pcpclients.NewPKI(t), Options{})
	c := v1Client(t, tb, "twice", "agent")
	ok, reason := c.tryAssociate("pcp://twice/agent")
	if ok || reason != "Session already associated" {
		t.Fatalf("second association: %v %q", ok, reason)
	}
	if ce := c.expectClose(5 * time.Second); ce.Code != CloseAssociationFailed {
		t.Fatalf("closed with %d", ce.Code)
	}
}

// TestBeforeAssociation: a v1 message other than an associate_request
// before association is refused with an error_message; the session can
// still associate.
func TestBeforeAssociation(t *testing.T) {
	t.Parallel()
	tb := startBroker(t, pcpclients.NewPKI(t), Options{})
	c := dial(t, tb, identity(t, tb.pki, "early"), "/pcp/")
	id := newID()
	c.sendMsg(&message.Message{ID: id, MessageType: "http://puppetlabs.com/rpc_blocking_request", Sender: "pcp://early/agent",
		Targets: []string{"pcp://early/agent"}, Data: []byte(`{}`)})
	m := c.read()
	if m.MessageType != msgError || m.InReplyTo != id || !strings.Contains(string(m.Data), "Session not associated") {
		t.Fatalf("got %s %s", m.MessageType, m.Data)
	}
	c.associate("pcp://early/agent")
}

// TestSuperseded: a second connection with the same URI closes the first
// with 4000 "superseded" and receives its messages.
func TestSuperseded(t *testing.T) {
	t.Parallel()
	tb := startBroker(t, pcpclients.NewPKI(t), Options{})
	first := v1Client(t, tb, "dup", "agent")
	second := v1Client(t, tb, "dup", "agent")
	if ce := first.expectClose(5 * time.Second); ce.Code != CloseSuperseded || ce.Text != "superseded" {
		t.Fatalf("first closed with %d %q", ce.Code, ce.Text)
	}
	ctl := v1Client(t, tb, "ctl", "controller")
	ctl.sendMsg(&message.Message{ID: newID(), MessageType: "http://puppetlabs.com/rpc_blocking_request", Sender: ctl.uri,
		Targets: []string{"pcp://dup/agent"}, Data: []byte(`{"x":1}`)})
	if m := second.read(); m.Sender != ctl.uri {
		t.Fatalf("second got %+v", m)
	}
	if st := tb.Stats(); st.Associated != 2 {
		t.Errorf("associated %d, want 2", st.Associated)
	}
}

type revokedSet map[string]bool

func (r revokedSet) IsRevoked(s *big.Int) bool { return r[s.String()] }

// TestRefusedBeforeUpgrade: what the handler refuses with plain text
// before the websocket upgrade.
func TestRefusedBeforeUpgrade(t *testing.T) {
	t.Parallel()
	cert := func(cn string, serial int64) *tls.ConnectionState {
		leaf := &x509.Certificate{Subject: pkix.Name{CommonName: cn}, SerialNumber: big.NewInt(serial)}
		return &tls.ConnectionState{PeerCertificates: []*x509.Certificate{leaf}, VerifiedChains: [][]*x509.Certificate{{leaf}}}
	}
	unverified := cert("node", 1)
	unverified.VerifiedChains = nil
	tests := []struct {
		name   string
		path   string
		tls    *tls.ConnectionState
		status int
		says   string
	}{
		{"no TLS", "/pcp/", nil, http.StatusUnauthorized, "client certificate is required"},
		{"no certificate", "/pcp/", &tls.ConnectionState{}, http.StatusUnauthorized, "client certificate is required"},
		{"certificate not verified", "/pcp/", unverified, http.StatusUnauthorized, "not verified"},
		{"no common name", "/pcp/", cert("", 1), http.StatusForbidden, "common name"},
		{"wildcard common name", "/pcp2/agent", cert("*", 1), http.StatusForbidden, "common name"},
		{"revoked", "/pcp/", cert("node", 666), http.StatusForbidden, "revoked"},
		{"v2 type server", "/pcp2/server", cert("node", 1), http.StatusForbidden, "'server' type"},
		{"v1 type server", "/pcp/server", cert("node", 1), http.StatusForbidden, "'server' type"},
		{"v2 type compilefarm-task", "/pcp2/compilefarm-task", cert("node", 1), http.StatusForbidden, "'compilefarm-task' type"},
		{"v1 type compilefarm-task", "/pcp/compilefarm-task", cert("node", 1), http.StatusForbidden, "'compilefarm-task' type"},
		{"v2 without type", "/pcp2/", cert("node", 1), http.StatusBadRequest, "/pcp2/<client type>"},
		{"not a websocket", "/pcp/", cert("node", 1), http.StatusBadRequest, ""},
		{"unknown path", "/other", cert("node", 1), http.StatusNotFound, ""},
	}
	b, err := New(Options{Name: "t", Revocations: revokedSet{"666": true}, Log: testLog()})
	if err != nil {
		t.Fatal(err)
	}
	h := b.Handler()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", tt.path, nil)
			r.TLS = tt.tls
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != tt.status || !strings.Contains(w.Body.String(), tt.says) {
				t.Fatalf("%d %q, want %d saying %q", w.Code, w.Body.String(), tt.status, tt.says)
			}
		})
	}
	if st := b.Stats(); st.Connections != 0 || st.Rejected < 8 {
		t.Errorf("stats %+v", st)
	}

	// With VerifyPeer, the broker verifies what crypto/tls only requested.
	checked, err := New(Options{Name: "t", Log: testLog(), VerifyPeer: func(certs []*x509.Certificate) error {
		if certs[0].Subject.CommonName == "forged" {
			return errors.New("not issued by the farm's CA")
		}
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	for cn, want := range map[string]int{"forged": http.StatusForbidden, "node": http.StatusBadRequest} {
		r := httptest.NewRequest("GET", "/pcp/", nil)
		r.TLS = cert(cn, 1)
		r.TLS.VerifiedChains = nil
		w := httptest.NewRecorder()
		checked.Handler().ServeHTTP(w, r)
		if w.Code != want {
			t.Errorf("%s: %d %s, want %d", cn, w.Code, w.Body, want)
		}
	}
}

// TestConnectionLimit: over MaxConnections the upgrade gets 503 with a
// clear message; a closed connection frees its place.
func TestConnectionLimit(t *testing.T) {
	t.Parallel()
	pki := pcpclients.NewPKI(t)
	tb := startBroker(t, pki, Options{MaxConnections: 2})
	a := v1Client(t, tb, "l1", "agent")
	v2Client(t, tb, "l2", "agent")
	_, resp, err := tryDial(t, tb, pki.ClientTLS(t, identity(t, pki, "l3")), "/pcp2/agent")
	if err == nil || resp == nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("third connection: %v %v", err, resp)
	}
	_ = a.ws.Close()
	waitFor(t, "the closed connection to free its place", func() bool { return tb.Stats().Connections == 1 })
	v2Client(t, tb, "l3", "agent")
}

package broker

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/websocket"
)

// Handler serves the websocket endpoints: GET /pcp, /pcp/ and /pcp/<type>
// (PCP v1) and /pcp2/<type> (PCP v2). The client's identity is the common
// name of its TLS certificate (r.TLS.PeerCertificates[0]); the caller's TLS
// configuration verifies the certificate (RequireAndVerifyClientCert), or
// Options.VerifyPeer does.
// Refusals happen before the upgrade, as plain text: 401 without a
// certificate, 403 for a revoked one, no common name or the type "server"
// or "compilefarm-task", 400 for a bad client type, 503 over the
// connection limit or while the broker shuts down.
func (b *Broker) Handler() http.Handler {
	mux := http.NewServeMux()
	v1 := func(w http.ResponseWriter, r *http.Request) { b.serveWS(w, r, 1, r.PathValue("type")) }
	mux.HandleFunc("GET /pcp", v1)
	mux.HandleFunc("GET /pcp/{$}", v1)
	mux.HandleFunc("GET /pcp/{type}", v1)
	mux.HandleFunc("GET /pcp2/{type}", func(w http.ResponseWriter, r *http.Request) {
		b.serveWS(w, r, 2, r.PathValue("type"))
	})
	mux.HandleFunc("GET /pcp2/{$}", func(w http.ResponseWriter, r *http.Request) {
		b.refuse(w, r, http.StatusBadRequest, "PCP v2 connects to /pcp2/<client type>, such as /pcp2/agent", "")
	})
	return mux
}

var bufferPool sync.Pool

var upgrader = websocket.Upgrader{
	HandshakeTimeout: 10 * time.Second,
	ReadBufferSize:   4096,
	WriteBufferSize:  4096,
	WriteBufferPool:  &bufferPool,
	// PCP clients are not browsers; identity is the client certificate.
	CheckOrigin: func(*http.Request) bool { return true },
}

func (b *Broker) refuse(w http.ResponseWriter, r *http.Request, code int, why, node string) {
	b.st.refused.Add(1)
	b.log.Info("pcp: connection refused", "node", node, "remote", r.RemoteAddr, "path", r.URL.Path, "status", code, "reason", why)
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(code)
	fmt.Fprintln(w, why)
}

// validType reports whether typ can be the client type of a PCP URI.
func validType(typ string) bool {
	return typ != "" && !strings.ContainsAny(typ, "/* \t\r\n") && len(typ) <= 128
}

func (b *Broker) serveWS(w http.ResponseWriter, r *http.Request, version int, pathType string) {
	if b.stopping.Load() {
		b.refuse(w, r, http.StatusServiceUnavailable, "the PCP broker is shutting down; reconnect to another", "")
		return
	}
	if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
		b.refuse(w, r, http.StatusUnauthorized, "a client certificate is required (PCP identifies clients by their certificate's common name)", "")
		return
	}
	cert := r.TLS.PeerCertificates[0]
	cn := cert.Subject.CommonName
	if b.o.VerifyPeer != nil {
		if err := b.o.VerifyPeer(r.TLS.PeerCertificates); err != nil {
			b.refuse(w, r, http.StatusForbidden, "the client certificate is not valid: "+err.Error(), cn)
			return
		}
	} else if len(r.TLS.VerifiedChains) == 0 {
		b.refuse(w, r, http.StatusUnauthorized, "the client certificate was not verified (the broker's TLS configuration must require and verify client certificates)", cn)
		return
	}
	switch {
	case cn == "" || strings.ContainsAny(cn, "/* \t\r\n"):
		b.refuse(w, r, http.StatusForbidden, "the client certificate's common name cannot be used in a PCP URI", cn)
		return
	case b.o.Revocations != nil && b.o.Revocations.IsRevoked(cert.SerialNumber):
		b.refuse(w, r, http.StatusForbidden, "the client certificate is revoked", cn)
		return
	case reservedType(pathType):
		b.refuse(w, r, http.StatusForbidden, "'"+pathType+"' type connections not accepted", cn)
		return
	case pathType != "" && !validType(pathType):
		b.refuse(w, r, http.StatusBadRequest, fmt.Sprintf("%q is not a PCP client type", pathType), cn)
		return
	}
	if n := b.open.Add(1); n > int64(b.o.MaxConnections) {
		b.open.Add(-1)
		b.refuse(w, r, http.StatusServiceUnavailable, fmt.Sprintf("the PCP broker holds its maximum of %d connections; retry later or connect to another", b.o.MaxConnections), cn)
		return
	}
	ws, err := upgrader.Upgrade(w, r, nil)
	if err != nil { // the upgrader has answered the client
		b.open.Add(-1)
		b.st.refused.Add(1)
		b.log.Info("pcp: websocket upgrade failed", "node", cn, "remote", r.RemoteAddr, "err", err)
		return
	}
	c := &conn{
		b:        b,
		ws:       ws,
		cn:       cn,
		serial:   cert.SerialNumber,
		version:  version,
		pathType: pathType,
		out:      make(chan []byte, b.o.WriteQueue),
		closing:  make(chan closeFrame, 1),
		quit:     make(chan struct{}),
	}
	c.touch()
	b.mu.Lock()
	b.conns[c] = struct{}{}
	b.mu.Unlock()
	if version == 1 {
		b.st.v1.Add(1)
	} else {
		b.st.v2.Add(1)
	}
	b.log.Info("pcp: client connected", "node", cn, "remote", r.RemoteAddr, "version", version, "path", r.URL.Path)
	b.wg.Add(2)
	go c.writeLoop()
	if version == 2 {
		// v2 has no association: the URI comes from the certificate and
		// the path.
		uri := "pcp://" + cn + "/" + pathType
		c.uri.Store(&uri)
		b.register(c)
	}
	if b.stopping.Load() { // Run ended while this connection was set up
		c.kick(CloseGoingAway, "broker shutting down")
	}
	go c.serve()
}

// dropConn forgets a connection whose reader ended.
func (b *Broker) dropConn(c *conn) {
	b.mu.Lock()
	_, ok := b.conns[c]
	delete(b.conns, c)
	b.mu.Unlock()
	if !ok {
		return
	}
	b.unregister(c)
	b.open.Add(-1)
	if c.version == 1 {
		b.st.v1.Add(-1)
	} else {
		b.st.v2.Add(-1)
	}
}

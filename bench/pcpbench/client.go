package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"

	"github.com/compilefarm/compilefarm/pkg/pcp/message"
)

// The PCP message types the bench sends and answers (pcp-specifications,
// PXP), as pxp-agent and ruby-pcp-client spell them.
const (
	typeAssociateRequest  = "http://puppetlabs.com/associate_request"
	typeAssociateResponse = "http://puppetlabs.com/associate_response"
	typeBlockingRequest   = "http://puppetlabs.com/rpc_blocking_request"
	typeBlockingResponse  = "http://puppetlabs.com/rpc_blocking_response"
	serverURI             = "pcp:///server"
)

// pxp-agent's timeouts (its configuration defaults): opening the websocket
// (TCP, TLS and the HTTP upgrade) and waiting for the associate_response.
const (
	connectionTimeout  = 5 * time.Second
	associationTimeout = 15 * time.Second
	// writeTimeout bounds one websocket write of the bench's clients.
	writeTimeout = 10 * time.Second
)

// opensslGroups are the key exchange groups pxp-agent offers through
// OpenSSL 1.1.1 or 3.0 by default (X25519's key share first): no
// post-quantum hybrid, which Go's client would offer first and which costs
// the broker more per handshake.
var opensslGroups = []tls.CurveID{tls.X25519, tls.CurveP256, tls.CurveP384, tls.CurveP521}

// identity is one bench client: its PCP URI and the certificate whose CN
// the URI names.
type identity struct {
	uri  string
	cert tls.Certificate
}

// dialer opens v1 PCP connections to one broker, the way pxp-agent does:
// wss://ADDR/pcp/, TLS with the client's certificate (full handshakes,
// no session resumption), then an associate_request with an envelope
// only, as pxp-agent sends it.
type dialer struct {
	url   string
	roots *x509.CertPool
	codec message.Codec
	// bufs holds write buffers between writes: connections that write
	// rarely share them instead of holding one each.
	bufs *sync.Pool
	// tlsVersion is the TLS version of the last connection opened.
	tlsVersion atomic.Uint32
}

func newDialer(addr string, roots *x509.CertPool) *dialer {
	return &dialer{url: "wss://" + addr + "/pcp/", roots: roots, bufs: &sync.Pool{}}
}

// errAssociation is a refused or unanswered association.
var errAssociation = errors.New("association failed")

// connect opens a websocket for id and associates it, within pxp-agent's
// timeouts. ctx cancels it.
func (d *dialer) connect(ctx context.Context, id identity) (*websocket.Conn, error) {
	wd := websocket.Dialer{
		TLSClientConfig: &tls.Config{
			MinVersion:       tls.VersionTLS12,
			RootCAs:          d.roots,
			Certificates:     []tls.Certificate{id.cert},
			CurvePreferences: opensslGroups,
		},
		HandshakeTimeout: connectionTimeout,
		// Small buffers: the driver holds as many connections as the
		// broker, on the same machine; PCP messages here are small.
		ReadBufferSize:  1024,
		WriteBufferSize: 1024,
		WriteBufferPool: d.bufs,
	}
	dctx, cancel := context.WithTimeout(ctx, connectionTimeout)
	defer cancel()
	ws, resp, err := wd.DialContext(dctx, d.url, http.Header{})
	if err != nil {
		if resp != nil {
			return nil, fmt.Errorf("websocket upgrade: %s: %w", resp.Status, err)
		}
		return nil, err
	}
	if tc, ok := ws.NetConn().(*tls.Conn); ok {
		d.tlsVersion.Store(uint32(tc.ConnectionState().Version))
	}
	if err := d.associate(ws, id); err != nil {
		ws.Close()
		return nil, err
	}
	return ws, nil
}

// associate sends the associate_request and reads the associate_response.
func (d *dialer) associate(ws *websocket.Conn, id identity) error {
	req := &message.Message{
		ID:          newID(),
		MessageType: typeAssociateRequest,
		Sender:      id.uri,
		Targets:     []string{serverURI},
		Expires:     time.Now().Add(associationTimeout),
	}
	if err := d.send(ws, req); err != nil {
		return fmt.Errorf("%w: sending the associate_request: %v", errAssociation, err)
	}
	ws.SetReadDeadline(time.Now().Add(associationTimeout))
	defer ws.SetReadDeadline(time.Time{})
	for range 16 { // the response, maybe after a few others (bounded)
		_, frame, err := ws.ReadMessage()
		if err != nil {
			return fmt.Errorf("%w: waiting for the associate_response: %v", errAssociation, err)
		}
		m, err := d.codec.DecodeV1(frame)
		if err != nil {
			return fmt.Errorf("%w: the broker's answer: %v", errAssociation, err)
		}
		if m.MessageType != typeAssociateResponse {
			continue
		}
		var data struct {
			ID      string `json:"id"`
			Success bool   `json:"success"`
			Reason  string `json:"reason"`
		}
		if err := json.Unmarshal(m.Data, &data); err != nil {
			return fmt.Errorf("%w: associate_response data %q: %v", errAssociation, m.Data, err)
		}
		if !data.Success {
			return fmt.Errorf("%w: refused: %s", errAssociation, data.Reason)
		}
		if data.ID != req.ID {
			return fmt.Errorf("%w: associate_response for %q, the request was %q", errAssociation, data.ID, req.ID)
		}
		return nil
	}
	return fmt.Errorf("%w: no associate_response among the first 16 messages", errAssociation)
}

// send encodes m as v1 and writes it as one binary frame. Callers that
// write from several goroutines serialise their calls.
func (d *dialer) send(ws *websocket.Conn, m *message.Message) error {
	frame, err := d.codec.EncodeV1(m)
	if err != nil {
		return err
	}
	ws.SetWriteDeadline(time.Now().Add(writeTimeout))
	return ws.WriteMessage(websocket.BinaryMessage, frame)
}

// newID is a random UUID (version 4), as pxp-agent's message ids are.
func newID() string {
	var b [16]byte
	hi, lo := rand.Uint64(), rand.Uint64()
	for i := range 8 {
		b[i], b[8+i] = byte(hi>>(8*i)), byte(lo>>(8*i))
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

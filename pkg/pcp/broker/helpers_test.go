package broker

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/compilefarm/compilefarm/internal/pcpclients"
	"github.com/compilefarm/compilefarm/pkg/farm"
	"github.com/compilefarm/compilefarm/pkg/pcp/message"
)

// testBroker is a Broker served over real TLS on 127.0.0.1:0 with Run
// going, stopped at the end of the test.
type testBroker struct {
	*Broker
	pki  *pcpclients.PKI
	addr string // 127.0.0.1:port
}

func (tb *testBroker) wss(path string) string { return "wss://" + tb.addr + path }

// testLog is where brokers log in tests: nothing unless PCP_TEST_LOG is set.
func testLog() *slog.Logger {
	if os.Getenv("PCP_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// startBroker serves a broker with o (Name defaults to "broker1") and
// certificates from pki.
func startBroker(t testing.TB, pki *pcpclients.PKI, o Options) *testBroker {
	t.Helper()
	if o.Name == "" {
		o.Name = "broker1"
	}
	if o.Log == nil {
		o.Log = testLog()
	}
	b, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	tb := serveOnly(t, pki, b)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("Run did not return 10s after its context ended")
		}
	})
	return tb
}

// serveOnly serves b's handler over TLS on 127.0.0.1:0 (without Run).
func serveOnly(t testing.TB, pki *pcpclients.PKI, b *Broker) *testBroker {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: b.Handler(), TLSConfig: pki.ServerTLS(t, "pcp-broker.test"),
		ReadHeaderTimeout: 10 * time.Second, ErrorLog: log.New(io.Discard, "", 0)}
	go func() { _ = srv.ServeTLS(ln, "", "") }()
	t.Cleanup(func() { _ = srv.Close() })
	return &testBroker{Broker: b, pki: pki, addr: ln.Addr().String()}
}

func presence(uri, task string) farm.Presence {
	return farm.Presence{URI: uri, Task: task, Expires: time.Now().Add(time.Minute)}
}

// wsClient is a Go websocket test client speaking raw PCP frames.
type wsClient struct {
	t       testing.TB
	ws      *websocket.Conn
	version int
	uri     string
}

// dial connects id to path (/pcp/, /pcp2/agent...). version is taken from
// the path.
func dial(t testing.TB, tb *testBroker, id pcpclients.Identity, path string) *wsClient {
	t.Helper()
	c, resp, err := tryDial(t, tb, tb.pki.ClientTLS(t, id), path)
	if err != nil {
		body := ""
		if resp != nil {
			b, _ := io.ReadAll(resp.Body)
			body = resp.Status + ": " + string(b)
		}
		t.Fatalf("dial %s: %v %s", path, err, body)
	}
	return c
}

func tryDial(t testing.TB, tb *testBroker, cfg *tls.Config, path string) (*wsClient, *http.Response, error) {
	d := websocket.Dialer{TLSClientConfig: cfg, HandshakeTimeout: 10 * time.Second}
	ws, resp, err := d.Dial(tb.wss(path), nil)
	if err != nil {
		return nil, resp, err
	}
	t.Cleanup(func() { _ = ws.Close() })
	v := 1
	if strings.HasPrefix(path, "/pcp2/") {
		v = 2
	}
	return &wsClient{t: t, ws: ws, version: v}, resp, nil
}

// sendMsg encodes m for the client's version and writes it.
func (c *wsClient) sendMsg(m *message.Message) {
	c.t.Helper()
	var data []byte
	var err error
	typ := websocket.BinaryMessage
	if c.version == 1 {
		if m.Expires.IsZero() {
			m.Expires = time.Now().Add(10 * time.Second)
		}
		data, err = message.EncodeV1(m)
	} else {
		typ = websocket.TextMessage
		data, err = message.EncodeV2(m)
	}
	if err != nil {
		c.t.Fatal(err)
	}
	c.raw(typ, data)
}

func (c *wsClient) raw(typ int, data []byte) {
	c.t.Helper()
	if err := c.ws.WriteMessage(typ, data); err != nil {
		c.t.Fatalf("write: %v", err)
	}
}

// read returns the next message, failing the test after 5 s.
func (c *wsClient) read() *message.Message {
	c.t.Helper()
	m, err := c.tryRead(5 * time.Second)
	if err != nil {
		c.t.Fatalf("read: %v", err)
	}
	return m
}

func (c *wsClient) tryRead(d time.Duration) (*message.Message, error) {
	_ = c.ws.SetReadDeadline(time.Now().Add(d))
	_, data, err := c.ws.ReadMessage()
	if err != nil {
		return nil, err
	}
	if c.version == 1 {
		m, err := message.DecodeV1(data)
		if err == nil {
			normalizeV1(m)
		}
		return m, err
	}
	return message.DecodeV2(data)
}

// readType reads until a message of type typ (other types are skipped).
func (c *wsClient) readType(typ string) *message.Message {
	c.t.Helper()
	for range 20 {
		m := c.read()
		if m.MessageType == typ {
			return m
		}
	}
	c.t.Fatalf("no %s in 20 messages", typ)
	return nil
}

// expectClose reads until the connection closes and returns the close
// error (code 1006 when it ended without a close frame).
func (c *wsClient) expectClose(d time.Duration) *websocket.CloseError {
	c.t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		_ = c.ws.SetReadDeadline(deadline)
		_, _, err := c.ws.ReadMessage()
		if err == nil {
			continue
		}
		var ce *websocket.CloseError
		if errors.As(err, &ce) {
			return ce
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			break
		}
		return &websocket.CloseError{Code: websocket.CloseAbnormalClosure, Text: err.Error()}
	}
	c.t.Fatalf("the connection was not closed within %v", d)
	return nil
}

// associate associates a v1 client as uri and checks the answer.
func (c *wsClient) associate(uri string) {
	c.t.Helper()
	ok, reason := c.tryAssociate(uri)
	if !ok {
		c.t.Fatalf("association as %s refused: %s", uri, reason)
	}
	c.uri = uri
}

func (c *wsClient) tryAssociate(uri string) (bool, string) {
	c.t.Helper()
	id := newID()
	c.sendMsg(&message.Message{ID: id, MessageType: msgAssociateRequest, Sender: uri, Targets: []string{ServerURI}, Data: []byte{}})
	m := c.readType(msgAssociateResponse)
	var resp struct {
		ID      string `json:"id"`
		Success bool   `json:"success"`
		Reason  string `json:"reason"`
	}
	if err := json.Unmarshal(m.Data, &resp); err != nil {
		c.t.Fatal(err)
	}
	if resp.ID != id || m.InReplyTo != id {
		c.t.Fatalf("associate_response for %q/%q, want %q", resp.ID, m.InReplyTo, id)
	}
	return resp.Success, resp.Reason
}

// v1Client dials /pcp/ as certname and associates as pcp://certname/typ.
func v1Client(t testing.TB, tb *testBroker, certname, typ string) *wsClient {
	t.Helper()
	c := dial(t, tb, identity(t, tb.pki, certname), "/pcp/")
	c.associate("pcp://" + certname + "/" + typ)
	return c
}

// v2Client dials /pcp2/<typ> as certname.
func v2Client(t testing.TB, tb *testBroker, certname, typ string) *wsClient {
	t.Helper()
	c := dial(t, tb, identity(t, tb.pki, certname), "/pcp2/"+typ)
	c.uri = "pcp://" + certname + "/" + typ
	// The broker registers a v2 client right after the upgrade, which the
	// client may see first.
	waitFor(t, c.uri+"'s registration", func() bool { return tb.local(c.uri) != nil })
	return c
}

var (
	idMu  sync.Mutex
	idMap = map[*pcpclients.PKI]map[string]pcpclients.Identity{}
)

// identity returns the certificate of certname from pki, signing it once.
func identity(t testing.TB, pki *pcpclients.PKI, certname string) pcpclients.Identity {
	t.Helper()
	idMu.Lock()
	defer idMu.Unlock()
	if id, ok := idMap[pki][certname]; ok {
		return id
	}
	id := pki.Identity(t, certname)
	if idMap[pki] == nil {
		idMap[pki] = map[string]pcpclients.Identity{}
	}
	idMap[pki][certname] = id
	return id
}

// waitFor polls cond every 10 ms for up to 10 s.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func jsonData(t testing.TB, m *message.Message, v any) {
	t.Helper()
	if err := json.Unmarshal(m.Data, v); err != nil {
		t.Fatalf("data of %s %q: %v", m.MessageType, m.Data, err)
	}
}

package broker

import (
	"bytes"
	"math/big"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/compilefarm/compilefarm/internal/pcpclients"
	"github.com/compilefarm/compilefarm/pkg/pcp/message"
)

// TestBrokenFrames: frames that do not decode get an error_message and
// leave the connection usable; an oversized message closes it with 1009;
// a websocket protocol violation closes it with 1002. Other connections
// never notice.
func TestBrokenFrames(t *testing.T) {
	t.Parallel()
	tb := startBroker(t, pcpclients.NewPKI(t), Options{MaxMessageSize: 4096})
	bystander := v1Client(t, tb, "bystander", "agent")
	ctl := v1Client(t, tb, "ctl", "controller")
	decodeErrors := []struct {
		name    string
		path    string
		typ     int
		payload []byte
	}{
		{"v1 empty", "/pcp/", websocket.BinaryMessage, []byte{}},
		{"v1 bad version", "/pcp/", websocket.BinaryMessage, []byte{2, 1, 0, 0, 0, 2, '{', '}'}},
		{"v1 truncated chunk", "/pcp/", websocket.BinaryMessage, []byte{1, 1, 0, 0, 9, 9, '{'}},
		{"v1 envelope not JSON", "/pcp/", websocket.BinaryMessage, []byte{1, 1, 0, 0, 0, 3, 'a', 'b', 'c'}},
		{"v1 as text", "/pcp/", websocket.TextMessage, []byte(`{"id":"x"}`)},
		{"v2 not JSON", "/pcp2/agent", websocket.TextMessage, []byte(`{{{`)},
		{"v2 no id", "/pcp2/agent", websocket.TextMessage, []byte(`{"message_type":"x"}`)},
		{"v2 bad target", "/pcp2/agent", websocket.TextMessage, []byte(`{"id":"1","message_type":"x","target":"nope"}`)},
		{"v2 binary garbage", "/pcp2/agent", websocket.BinaryMessage, []byte{0, 1, 2, 0xff}},
	}
	for i, tt := range decodeErrors {
		t.Run(tt.name, func(t *testing.T) {
			cn := "broken" + string(rune('a'+i))
			c := dial(t, tb, identity(t, tb.pki, cn), tt.path)
			c.raw(tt.typ, tt.payload)
			m := c.read()
			if m.MessageType != msgError || !strings.Contains(string(m.Data), "Could not decode message") {
				t.Fatalf("got %s %s", m.MessageType, m.Data)
			}
			// Still usable.
			if c.version == 1 {
				c.associate("pcp://" + cn + "/agent")
			} else {
				c.uri = "pcp://" + cn + "/agent"
			}
			c.sendMsg(&message.Message{ID: newID(), MessageType: "x", Sender: c.uri, Targets: []string{ctl.uri}, Data: []byte(`{}`)})
			if m := ctl.read(); m.Sender != c.uri {
				t.Fatalf("ctl got %+v", m)
			}
		})
	}
	t.Run("oversized", func(t *testing.T) {
		c := v1Client(t, tb, "big", "agent")
		c.sendMsg(&message.Message{ID: newID(), MessageType: "x", Sender: c.uri, Targets: []string{ctl.uri}, Data: bytes.Repeat([]byte("a"), 8000)})
		if ce := c.expectClose(5 * time.Second); ce.Code != CloseTooBig {
			t.Fatalf("closed with %d %q", ce.Code, ce.Text)
		}
	})
	t.Run("protocol violation", func(t *testing.T) {
		c := v1Client(t, tb, "rude", "agent")
		// An unmasked frame with a reserved opcode, written under the
		// websocket library.
		if _, err := c.ws.NetConn().Write([]byte{0x83, 0x01, 'x'}); err != nil {
			t.Fatal(err)
		}
		if ce := c.expectClose(5 * time.Second); ce.Code != websocket.CloseProtocolError {
			t.Fatalf("closed with %d %q", ce.Code, ce.Text)
		}
	})
	// The bystander was never disturbed.
	ctl.sendMsg(&message.Message{ID: newID(), MessageType: rpcRequest, Sender: ctl.uri, Targets: []string{bystander.uri}, Data: []byte(`{}`)})
	if m := bystander.read(); m.Sender != ctl.uri {
		t.Fatalf("bystander got %+v", m)
	}
}

// TestIdleTimeout: a connection that sends nothing is closed (1001 "idle
// timeout"); websocket pings keep another open, and are answered.
func TestIdleTimeout(t *testing.T) {
	t.Parallel()
	const idle = time.Second
	tb := startBroker(t, pcpclients.NewPKI(t), Options{IdleTimeout: idle})
	silent := v1Client(t, tb, "silent", "agent")
	pinger := v2Client(t, tb, "pinger", "agent")
	var pongs atomic.Int32
	pinger.ws.SetPongHandler(func(string) error { pongs.Add(1); return nil })
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				_ = pinger.ws.WriteControl(websocket.PingMessage, []byte("hi"), time.Now().Add(time.Second))
			}
		}
	}()
	// Reading delivers the pongs to the handler.
	readDone := make(chan error, 1)
	go func() {
		_ = pinger.ws.SetReadDeadline(time.Now().Add(30 * time.Second))
		_, _, err := pinger.ws.ReadMessage()
		readDone <- err
	}()
	if ce := silent.expectClose(10 * time.Second); ce.Code != CloseGoingAway || ce.Text != "idle timeout" {
		t.Fatalf("silent closed with %d %q", ce.Code, ce.Text)
	}
	// The pinger has outlived several timeouts.
	waitFor(t, "pongs", func() bool { return pongs.Load() >= 3 })
	time.Sleep(2 * idle)
	if tb.local(pinger.uri) == nil {
		t.Fatal("the pinging client was closed")
	}
	close(stop)
	wg.Wait()
	if st := tb.Stats(); st.IdleClosed != 1 {
		t.Errorf("idle closed %d", st.IdleClosed)
	}
	_ = pinger.ws.Close()
	<-readDone
}

type mutableRevocations struct {
	mu      sync.Mutex
	revoked map[string]bool
}

func (r *mutableRevocations) IsRevoked(s *big.Int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.revoked[s.String()]
}

func (r *mutableRevocations) revoke(s *big.Int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.revoked[s.String()] = true
}

// TestRevocationSweep: the periodic check closes the connection whose
// certificate became revoked (1008 "certificate revoked"), and no other.
func TestRevocationSweep(t *testing.T) {
	t.Parallel()
	revs := &mutableRevocations{revoked: map[string]bool{}}
	tb := startBroker(t, pcpclients.NewPKI(t), Options{Revocations: revs, RevocationCheck: 20 * time.Millisecond})
	bad := v1Client(t, tb, "bad", "agent")
	good := v2Client(t, tb, "good", "agent")
	revs.revoke(identity(t, tb.pki, "bad").TLSCertificate(t).Leaf.SerialNumber)
	if ce := bad.expectClose(5 * time.Second); ce.Code != ClosePolicy || ce.Text != "certificate revoked" {
		t.Fatalf("closed with %d %q", ce.Code, ce.Text)
	}
	if _, err := good.tryRead(200 * time.Millisecond); !isTimeout(err) {
		t.Fatalf("the good client's connection: %v", err)
	}
}

func isTimeout(err error) bool {
	ne, ok := err.(interface{ Timeout() bool })
	return ok && ne.Timeout()
}

// TestSlowReader: a client that does not read is disconnected when its
// write queue fills; the sender and routing go on.
func TestSlowReader(t *testing.T) {
	t.Parallel()
	tb := startBroker(t, pcpclients.NewPKI(t), Options{WriteQueue: 4})
	slow := v1Client(t, tb, "slow", "agent")
	fast := v1Client(t, tb, "fast", "agent")
	ctl := v1Client(t, tb, "ctl", "controller")
	big := bytes.Repeat([]byte("x"), 256<<10)
	for i := 0; i < 200 && tb.local(slow.uri) != nil; i++ {
		frame, err := message.EncodeV1(&message.Message{ID: newID(), MessageType: rpcRequest, Sender: ctl.uri,
			Targets: []string{slow.uri}, Expires: time.Now().Add(time.Minute), Data: big})
		if err != nil {
			t.Fatal(err)
		}
		if ctl.ws.WriteMessage(websocket.BinaryMessage, frame) != nil {
			break // ctl, not reading its own answers, was disconnected too
		}
	}
	waitFor(t, "the slow reader's disconnection", func() bool { return tb.local(slow.uri) == nil })
	// (ctl, which did not read its error replies either, may be gone too.)
	ctl2 := v1Client(t, tb, "ctl2", "controller")
	ctl2.sendMsg(&message.Message{ID: newID(), MessageType: rpcRequest, Sender: ctl2.uri, Targets: []string{fast.uri}, Data: []byte(`{}`)})
	if m := fast.read(); m.Sender != ctl2.uri {
		t.Fatalf("fast got %+v", m)
	}
}

// TestGarbageStorm: many connections send random frames and garbage while
// one controller and one agent keep exchanging messages; every exchange
// completes and the broker stays up.
func TestGarbageStorm(t *testing.T) {
	t.Parallel()
	tb := startBroker(t, pcpclients.NewPKI(t), Options{MaxMessageSize: 64 << 10})
	ctl := v1Client(t, tb, "ctl", "controller")
	agent := v2Client(t, tb, "agent", "agent")
	waitFor(t, "registration", func() bool { return tb.local(agent.uri) != nil })
	const noisy = 16
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for i := range noisy {
		wg.Add(1)
		path := []string{"/pcp/", "/pcp2/agent", "/pcp/agent", "/pcp"}[i%4]
		c := dial(t, tb, identity(t, tb.pki, "noise"+string(rune('a'+i))), path)
		go func(c *wsClient, seed uint64) {
			defer wg.Done()
			r := rand.New(rand.NewPCG(seed, 7))
			go func() { // drain answers
				for {
					if _, _, err := c.ws.ReadMessage(); err != nil {
						return
					}
				}
			}()
			for n := 0; n < 300; n++ {
				select {
				case <-stop:
					return
				default:
				}
				frame := randomFrame(r)
				typ := websocket.BinaryMessage
				if r.IntN(2) == 0 {
					typ = websocket.TextMessage
				}
				if r.IntN(50) == 0 {
					frame = bytes.Repeat([]byte{1}, 70<<10) // over the limit: closes this one
				}
				if c.ws.WriteMessage(typ, frame) != nil {
					return
				}
			}
		}(c, uint64(i))
	}
	for i := range 50 {
		id := newID()
		ctl.sendMsg(&message.Message{ID: id, MessageType: rpcRequest, Sender: ctl.uri, Targets: []string{agent.uri}, Data: []byte(`{"n":1}`)})
		m := agent.read()
		if m.ID != id {
			t.Fatalf("exchange %d: agent got %+v", i, m)
		}
		agent.sendMsg(&message.Message{ID: newID(), MessageType: "http://puppetlabs.com/rpc_blocking_response", Targets: []string{ctl.uri}, InReplyTo: id, Data: []byte(`{}`)})
		if r := ctl.read(); r.InReplyTo != id {
			t.Fatalf("exchange %d: controller got %+v", i, r)
		}
	}
	close(stop)
	wg.Wait()
	if st := tb.Stats(); st.Errors == 0 {
		t.Errorf("no decode errors counted: %+v", st)
	}
}

// randomFrame returns garbage, or a mutated valid message.
func randomFrame(r *rand.Rand) []byte {
	switch r.IntN(4) {
	case 0:
		b := make([]byte, r.IntN(300))
		for i := range b {
			b[i] = byte(r.IntN(256))
		}
		return b
	case 1:
		m := &message.Message{ID: "x", MessageType: "t", Sender: "pcp://a/b", Targets: []string{"pcp://*/agent"}, Expires: time.Now(), Data: []byte("{}")}
		b, _ := message.EncodeV1(m)
		for range 1 + r.IntN(4) {
			b[r.IntN(len(b))] = byte(r.IntN(256))
		}
		return b
	case 2:
		return []byte(`{"id":"1","message_type":"http://puppetlabs.com/inventory_request","target":"pcp:///server","data":{"query":["pcp://*/*"]}}`)
	default:
		b := []byte(`{"id":"2","message_type":"x","target":"pcp://agent/agent","data":{"n":` + strings.Repeat("[", r.IntN(20)) + `}}`)
		return b
	}
}

package broker

import (
	"math/big"
	"testing"
	"time"

	"github.com/compilefarm/compilefarm/pkg/pcp/message"
)

// FuzzFrame feeds arbitrary frames to a connection's handler, associated
// or not, v1 or v2: whatever arrives, the broker answers or ignores it and
// never panics. (go test runs the seeds; go test -fuzz=FuzzFrame explores.)
func FuzzFrame(f *testing.F) {
	assoc, _ := message.EncodeV1(&message.Message{ID: "a", MessageType: msgAssociateRequest, Sender: "pcp://fuzz/agent",
		Targets: []string{ServerURI}, Expires: time.Now().Add(time.Hour)})
	req, _ := message.EncodeV1(&message.Message{ID: "b", MessageType: rpcRequest, Sender: "pcp://fuzz/agent",
		Targets: []string{"pcp://*/agent"}, Expires: time.Now().Add(time.Hour), DestinationReport: true, Data: []byte(`{}`)})
	inv, _ := message.EncodeV2(&message.Message{ID: "c", MessageType: msgInventoryRequest, Targets: []string{ServerURI},
		Data: []byte(`{"query":["pcp://*/*"],"subscribe":true}`)})
	for _, seed := range [][]byte{assoc, req, inv, {}, {1}, []byte(`{}`), []byte(`{"id":"x","message_type":"y","target":"pcp://fuzz/agent","data":"z"}`)} {
		f.Add(uint8(1), false, seed)
		f.Add(uint8(2), true, seed)
		f.Add(uint8(1), true, seed)
	}
	f.Fuzz(func(t *testing.T, version uint8, associated bool, data []byte) {
		b, err := New(Options{Name: "fuzz-task", Log: testLog(), MaxMessageSize: 1 << 16})
		if err != nil {
			t.Fatal(err)
		}
		c := &conn{b: b, cn: "fuzz", serial: big.NewInt(1), version: 1 + int(version%2),
			out: make(chan []byte, 1024), closing: make(chan closeFrame, 1), quit: make(chan struct{})}
		if c.version == 2 || associated {
			uri := "pcp://fuzz/agent"
			c.uri.Store(&uri)
			b.register(c)
		}
		b.handleFrame(c, data)
		b.handleFrame(c, data) // a second time: associated now, perhaps
		for len(c.out) > 0 {
			frame := <-c.out
			var err error
			if c.version == 1 {
				_, err = message.DecodeV1(frame)
			} else {
				_, err = message.DecodeV2(frame)
			}
			if err != nil {
				t.Fatalf("the broker wrote a frame that does not decode: %v", err)
			}
		}
	})
}

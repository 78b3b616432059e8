package broker

import (
	"encoding/json"
	"regexp"
	"testing"
	"time"

	"github.com/compilefarm/compilefarm/pkg/pcp/message"
)

// rubyMessageID is ruby-pcp-client's MessageId schema.
var rubyMessageID = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

func TestNewID(t *testing.T) {
	seen := map[string]bool{}
	for range 1000 {
		id := newID()
		if !rubyMessageID.MatchString(id) || seen[id] {
			t.Fatalf("id %q", id)
		}
		seen[id] = true
	}
}

// TestEncodeV1Envelope: what v1 clients get holds only the envelope keys
// ruby-pcp-client's schema allows (it refuses others), in-reply-to spelled
// as v1 spells it, an expiry, and a data chunk.
func TestEncodeV1Envelope(t *testing.T) {
	b, _ := New(Options{Name: "t"})
	m := &message.Message{ID: newID(), MessageType: "http://puppetlabs.com/rpc_blocking_response", Sender: "pcp://a/agent",
		Targets: []string{"pcp://c/controller"}, InReplyTo: newID(), Extra: map[string][]byte{"custom": []byte(`1`)},
		Debug: [][]byte{[]byte(`{}`)}}
	enc, err := b.encodeFor(1, "pcp://c/controller", m)
	if err != nil {
		t.Fatal(err)
	}
	chunks, err := message.Codec{}.ReadChunksV1(enc)
	if err != nil {
		t.Fatal(err)
	}
	var env map[string]any
	if err := json.Unmarshal(chunks[0].Content, &env); err != nil {
		t.Fatal(err)
	}
	allowed := map[string]bool{"id": true, "in-reply-to": true, "sender": true, "targets": true, "message_type": true, "expires": true, "destination_report": true}
	for k := range env {
		if !allowed[k] {
			t.Errorf("envelope key %q is not in ruby-pcp-client's schema", k)
		}
	}
	if env["in-reply-to"] != m.InReplyTo || env["expires"] == nil {
		t.Errorf("envelope %v", env)
	}
	if len(chunks) != 2 || chunks[1].Type() != message.ChunkData {
		t.Errorf("chunks %v, want the envelope and an (empty) data chunk", chunks)
	}
}

// TestEncodeV2: one target (the recipient), JSON data, no expiry; the
// broker's error_message carries its description as the data.
func TestEncodeV2(t *testing.T) {
	b, _ := New(Options{Name: "t"})
	tests := []struct {
		name string
		m    *message.Message
		want string
	}{
		{"multicast", &message.Message{ID: "1", MessageType: "x", Sender: "pcp://c/controller", Targets: []string{"pcp://*/agent", "pcp://b/agent"},
			Expires: time.Now(), DestinationReport: true, Data: []byte(`{"a": 1}`)},
			`{"id":"1","message_type":"x","target":"pcp://a/agent","sender":"pcp://c/controller","data":{"a":1}}`},
		{"error", errorMessageWithID("2", "pcp://a/agent", "not connected: pcp://x/agent"),
			`{"id":"2","message_type":"http://puppetlabs.com/error_message","target":"pcp://a/agent","sender":"pcp:///server","in_reply_to":"m","data":"not connected: pcp://x/agent"}`},
		{"empty data", &message.Message{ID: "3", MessageType: "x", Sender: "pcp://c/controller", Data: []byte{}},
			`{"id":"3","message_type":"x","target":"pcp://a/agent","sender":"pcp://c/controller"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := b.encodeFor(2, "pcp://a/agent", tt.m)
			if err != nil || string(got) != tt.want {
				t.Fatalf("%s %v\nwant %s", got, err, tt.want)
			}
		})
	}
	if _, err := b.encodeFor(2, "pcp://a/agent", &message.Message{ID: "4", MessageType: "x", Data: []byte("not json")}); err == nil {
		t.Fatal("non-JSON data encoded for v2")
	}
}

func errorMessageWithID(id, to, description string) *message.Message {
	m := errorMessage(to, &message.Message{ID: "m"}, description)
	m.ID = id
	return m
}

// TestAuthorize: pcp-broker's default authorization.
func TestAuthorize(t *testing.T) {
	tests := []struct {
		sender, typ string
		targets     []string
		refused     bool
	}{
		{"pcp://c/controller", rpcRequest, []string{"pcp://a/agent"}, false},
		{"pcp://c/controller", "http://puppetlabs.com/rpc_non_blocking_request", []string{"pcp://*/agent"}, false},
		{"pcp://a/agent", rpcRequest, []string{"pcp://b/agent"}, true},
		{"pcp://a/agent", "http://puppetlabs.com/rpc_non_blocking_request", []string{"pcp://*/*"}, true},
		{"pcp://a/agent", rpcRequest, []string{"pcp://c/controller"}, false},
		{"pcp://a/agent", "http://puppetlabs.com/rpc_blocking_response", []string{"pcp://b/agent"}, false},
		{"pcp://a/agent", "http://puppetlabs.com/rpc_provisional_response", []string{"pcp://c/controller"}, false},
		{"pcp://a/server", "x", []string{"pcp://c/controller"}, true},
	}
	for _, tt := range tests {
		why := authorize(&message.Message{Sender: tt.sender, MessageType: tt.typ, Targets: tt.targets})
		if (why != "") != tt.refused {
			t.Errorf("%s %s → %v: %q", tt.sender, tt.typ, tt.targets, why)
		}
	}
}

func TestPattern(t *testing.T) {
	tests := []struct {
		pattern, uri string
		match        bool
	}{
		{"pcp://*/agent", "pcp://a/agent", true},
		{"pcp://*/agent", "pcp://a/controller", false},
		{"pcp://a/*", "pcp://a/x", true},
		{"pcp://a/*", "pcp://b/x", false},
		{"pcp://*/*", "pcp://b/x", true},
		{"pcp://a/agent", "pcp://a/agent", true},
	}
	for _, tt := range tests {
		p, err := parsePattern(tt.pattern)
		if err != nil || p.matches(tt.uri) != tt.match {
			t.Errorf("%s matches %s: %v (%v)", tt.pattern, tt.uri, !tt.match, err)
		}
	}
}

package message

import (
	"bytes"
	"encoding/binary"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

// frame builds a v1 message from descriptors and contents, as a client would.
func frame(chunks ...any) []byte {
	b := []byte{Version1}
	for i := 0; i < len(chunks); i += 2 {
		b = append(b, chunks[i].(byte))
		content := []byte(chunks[i+1].(string))
		b = binary.BigEndian.AppendUint32(b, uint32(len(content)))
		b = append(b, content...)
	}
	return b
}

const (
	env   = byte(ChunkEnvelope)
	data  = byte(ChunkData)
	debug = byte(ChunkDebug)
)

// An associate request as cpp-pcp-client's Connector::createEnvelope writes
// it (fields in its order), with its data chunk.
const cppAssociateEnvelope = `{"id":"4f0c2b4e-5d0a-4b1c-9c51-1a0e3f5c8d21","message_type":"http://puppetlabs.com/associate_request","targets":["pcp:///server"],"expires":"2026-11-26T04:30:00.123Z","sender":"pcp://node1.example.com/agent"}`

func TestDecodeV1Clients(t *testing.T) {
	expires := time.Date(2026, 11, 26, 4, 30, 0, 123e6, time.UTC)
	tests := []struct {
		name  string
		in    []byte
		want  *Message
		canon bool // EncodeV1 gives back the same bytes
	}{{
		name:  "cpp-pcp-client associate request",
		in:    frame(env, cppAssociateEnvelope, data, ""),
		canon: true,
		want: &Message{
			ID:          "4f0c2b4e-5d0a-4b1c-9c51-1a0e3f5c8d21",
			MessageType: "http://puppetlabs.com/associate_request",
			Targets:     []string{"pcp:///server"},
			Expires:     expires,
			Sender:      "pcp://node1.example.com/agent",
			Data:        []byte{},
		},
	}, {
		// ruby-pcp-client's Message#encode always frames a data and a debug
		// chunk, empty when unset; Time#iso8601 has no fraction.
		name: "ruby-pcp-client inventory request",
		in: frame(env, `{"id":"a1","message_type":"http://puppetlabs.com/inventory_request","targets":["pcp:///server"],"sender":"pcp://ctl.example.com/ruby-pcp-client-1234","expires":"2026-11-26T04:30:00Z"}`,
			data, `{"query":["pcp://*/agent"]}`, debug, ""),
		want: &Message{
			ID:          "a1",
			MessageType: "http://puppetlabs.com/inventory_request",
			Targets:     []string{"pcp:///server"},
			Expires:     expires.Truncate(time.Second),
			Sender:      "pcp://ctl.example.com/ruby-pcp-client-1234",
			Data:        []byte(`{"query":["pcp://*/agent"]}`),
			Debug:       [][]byte{{}},
		},
	}, {
		name: "every field, an offset time, extra fields and two debug chunks",
		in: frame(env, ` { "destination_report" : true, "in_reply_to":"x", "in-reply-to" : "y", "id":"m","message_type":"t","targets":["pcp://*/agent","pcp://a/b"],"expires":"2026-11-26T05:30:00+01:00","sender":"pcp://n/agent","z":{ "a" : [1, 2] } }`,
			debug, `{"hops":[]}`, data, "\x00\xff", debug, "2"),
		want: &Message{
			ID: "m", MessageType: "t", Targets: []string{"pcp://*/agent", "pcp://a/b"},
			Expires: expires.Truncate(time.Second), Sender: "pcp://n/agent", InReplyTo: "x",
			DestinationReport: true, Data: []byte("\x00\xff"),
			Debug: [][]byte{[]byte(`{"hops":[]}`), []byte("2")},
			Extra: map[string][]byte{"in-reply-to": []byte(`"y"`), "z": []byte(`{"a":[1,2]}`)},
		},
	}, {
		name:  "no data chunk, empty targets",
		in:    frame(env, `{"id":"m","message_type":"t","targets":[],"expires":"2026-11-26T04:30:00Z","sender":"pcp:///server"}`),
		canon: true,
		want:  &Message{ID: "m", MessageType: "t", Targets: []string{}, Expires: expires.Truncate(time.Second), Sender: "pcp:///server"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := DecodeV1(tt.in)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("DecodeV1:\n got %+v\nwant %+v", got, tt.want)
			}
			enc, err := EncodeV1(got)
			if err != nil {
				t.Fatal(err)
			}
			if tt.canon && !bytes.Equal(enc, tt.in) {
				t.Errorf("EncodeV1 is not canonical:\n got %q\nwant %q", enc, tt.in)
			}
			again, err := DecodeV1(enc)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(again, got) {
				t.Errorf("round trip:\n got %+v\nwant %+v", again, got)
			}
		})
	}
}

func TestDecodeV1Errors(t *testing.T) {
	good := func(replace, with string) []byte {
		return frame(env, strings.Replace(cppAssociateEnvelope, replace, with, 1))
	}
	tests := []struct {
		name string
		in   []byte
		kind error
		msg  string
	}{
		{"empty", nil, ErrFrame, "empty"},
		{"version 2", []byte{2, 1, 0, 0, 0, 2, '{', '}'}, ErrVersion, "version byte is 2"},
		{"version 0", []byte{0}, ErrVersion, "not 1"},
		{"version only", []byte{1}, ErrFrame, "no envelope"},
		{"truncated header", []byte{1, 1, 0, 0}, ErrFrame, "truncated"},
		{"truncated second header", append(frame(env, cppAssociateEnvelope), 2, 0), ErrFrame, "chunk 2 is truncated"},
		{"size beyond the end", []byte{1, 1, 0, 0, 0, 9, '{', '}'}, ErrFrame, "declares 9 bytes, 2 remain"},
		{"size 2^32-1", append(frame(env, cppAssociateEnvelope), 2, 0xff, 0xff, 0xff, 0xff), ErrFrame, "declares 4294967295"},
		{"unknown type 4", append(frame(env, cppAssociateEnvelope), 4, 0, 0, 0, 0), ErrFrame, "unknown type 4"},
		{"unknown type 0", []byte{1, 0, 0, 0, 0, 0}, ErrFrame, "unknown type 0"},
		{"debug first", frame(debug, "{}"), ErrFrame, "first chunk is a debug"},
		{"two envelopes", frame(env, cppAssociateEnvelope, env, cppAssociateEnvelope), ErrFrame, "second envelope"},
		{"two data chunks", frame(env, cppAssociateEnvelope, data, "", debug, "", data, ""), ErrFrame, "chunk 4 is a second data"},
		{"envelope not JSON", frame(env, "{"), ErrEnvelope, "not valid JSON"},
		{"envelope null", frame(env, "null"), ErrEnvelope, "not a JSON object"},
		{"envelope an array", frame(env, "[]"), ErrEnvelope, "not valid JSON"},
		{"no id", good(`"id":"4f0c2b4e-5d0a-4b1c-9c51-1a0e3f5c8d21",`, ""), ErrEnvelope, `"id" is missing`},
		{"empty id", good(`"4f0c2b4e-5d0a-4b1c-9c51-1a0e3f5c8d21"`, `""`), ErrEnvelope, `"id" is empty`},
		{"id a number", good(`"4f0c2b4e-5d0a-4b1c-9c51-1a0e3f5c8d21"`, `7`), ErrEnvelope, `"id" is not a string`},
		{"ID upper case", good(`"id"`, `"ID"`), ErrEnvelope, `"id" is missing`},
		{"message_type null", good(`"http://puppetlabs.com/associate_request"`, `null`), ErrEnvelope, `"message_type" is not a string`},
		{"no targets", good(`"targets":["pcp:///server"],`, ""), ErrEnvelope, `"targets" is missing`},
		{"targets null", good(`["pcp:///server"]`, "null"), ErrEnvelope, `"targets" is not an array`},
		{"targets a string", good(`["pcp:///server"]`, `"pcp:///server"`), ErrEnvelope, `"targets" is not an array`},
		{"target not a URI", good(`"pcp:///server"`, `"https://x/server"`), ErrEnvelope, "does not start with pcp://"},
		{"target without type", good(`"pcp:///server"`, `"pcp://node1/"`), ErrEnvelope, "not pcp://<common name>/<client type>"},
		{"target with a path", good(`"pcp:///server"`, `"pcp://a/b/c"`), ErrEnvelope, "item 0"},
		{"no sender", good(`,"sender":"pcp://node1.example.com/agent"`, ""), ErrEnvelope, `"sender" is missing`},
		{"sender empty", good(`"pcp://node1.example.com/agent"`, `""`), ErrEnvelope, `"sender"`},
		{"no expires", good(`"expires":"2026-11-26T04:30:00.123Z",`, ""), ErrEnvelope, `"expires" is missing`},
		{"expires not ISO 8601", good(`2026-11-26T04:30:00.123Z`, `next tuesday`), ErrEnvelope, "not an ISO 8601"},
		{"expires without zone", good(`2026-11-26T04:30:00.123Z`, `2026-11-26T04:30:00`), ErrEnvelope, "not an ISO 8601"},
		{"expires before year 0", good(`2026-11-26T04:30:00.123Z`, `0000-01-01T00:00:00+01:00`), ErrEnvelope, "out of range"},
		{"destination_report a string", good(`}`, `,"destination_report":"yes"}`), ErrEnvelope, `"destination_report" is not a boolean`},
		{"in_reply_to a number", good(`}`, `,"in_reply_to":1}`), ErrEnvelope, `"in_reply_to" is not a string`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := DecodeV1(tt.in)
			if !errors.Is(err, tt.kind) || !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("DecodeV1 = %+v, %v; want %v containing %q", m, err, tt.kind, tt.msg)
			}
		})
	}
}

func TestMaxMessageSize(t *testing.T) {
	m := &Message{ID: "m", MessageType: "t", Sender: "pcp://a/b", Expires: time.Unix(0, 0), Data: make([]byte, 100)}
	b, err := EncodeV1(m)
	if err != nil {
		t.Fatal(err)
	}
	small := Codec{MaxMessageSize: len(b) - 1}
	if _, err := small.DecodeV1(b); !errors.Is(err, ErrTooLarge) {
		t.Errorf("DecodeV1 over the limit: %v, want ErrTooLarge", err)
	}
	if _, err := small.EncodeV1(m); !errors.Is(err, ErrTooLarge) {
		t.Errorf("EncodeV1 over the limit: %v, want ErrTooLarge", err)
	}
	if _, err := (Codec{MaxMessageSize: len(b)}).DecodeV1(b); err != nil {
		t.Errorf("DecodeV1 at the limit: %v", err)
	}
	if _, err := (Codec{MaxMessageSize: -1}).DecodeV1(b); err != nil {
		t.Errorf("DecodeV1 without a limit: %v", err)
	}
	huge := make([]byte, DefaultMaxMessageSize+1)
	huge[0] = Version1
	if _, err := DecodeV1(huge); !errors.Is(err, ErrTooLarge) {
		t.Errorf("DecodeV1 of DefaultMaxMessageSize+1 bytes: %v, want ErrTooLarge", err)
	}
}

func TestEncodeV1(t *testing.T) {
	m := &Message{
		ID: "m", MessageType: "t", Sender: "pcp://a/agent", Targets: []string{"pcp:///server"},
		Expires:   time.Date(2026, 11, 26, 5, 30, 0, 500, time.FixedZone("CET", 3600)),
		InReplyTo: "r", DestinationReport: true, Data: []byte("d"), Debug: [][]byte{[]byte("g")},
		Extra: map[string][]byte{"b": []byte(` [ 1 ] `), "a": []byte(`"s"`)},
	}
	got, err := EncodeV1(m)
	if err != nil {
		t.Fatal(err)
	}
	want := frame(env, `{"id":"m","message_type":"t","targets":["pcp:///server"],"expires":"2026-11-26T04:30:00.0000005Z","sender":"pcp://a/agent","in_reply_to":"r","destination_report":true,"a":"s","b":[1]}`,
		data, "d", debug, "g")
	if !bytes.Equal(got, want) {
		t.Errorf("EncodeV1:\n got %q\nwant %q", got, want)
	}

	bad := []struct {
		name string
		edit func(*Message)
		msg  string
	}{
		{"no id", func(m *Message) { m.ID = "" }, "id is required"},
		{"no sender", func(m *Message) { m.Sender = "" }, "sender is required"},
		{"bad sender", func(m *Message) { m.Sender = "pcp://x" }, "the sender"},
		{"bad target", func(m *Message) { m.Targets = []string{"x"} }, "target 0"},
		{"no expiry", func(m *Message) { m.Expires = time.Time{} }, "expiry is required"},
		{"year 10000", func(m *Message) { m.Expires = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC) }, "no RFC 3339 form"},
		{"extra shadows a field", func(m *Message) { m.Extra = map[string][]byte{"sender": []byte(`"x"`)} }, `field "sender"`},
		{"extra not JSON", func(m *Message) { m.Extra = map[string][]byte{"x": []byte(`{`)} }, "not valid JSON"},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			c := *m
			tt.edit(&c)
			if _, err := EncodeV1(&c); !errors.Is(err, ErrEnvelope) || !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("EncodeV1 = %v, want ErrEnvelope containing %q", err, tt.msg)
			}
		})
	}
}

func TestParseURI(t *testing.T) {
	tests := []struct {
		in   string
		want URI
		ok   bool
	}{
		{"pcp://node1.example.com/agent", URI{"node1.example.com", "agent"}, true},
		{"pcp:///server", URI{"", "server"}, true},
		{"pcp://*/*", URI{"*", "*"}, true},
		{"pcp://node1/", URI{}, false},
		{"pcp://node1", URI{}, false},
		{"pcp://a/b/c", URI{}, false},
		{"PCP://a/b", URI{}, false},
		{"", URI{}, false},
	}
	for _, tt := range tests {
		got, err := ParseURI(tt.in)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("ParseURI(%q) = %+v, %v; want %+v, ok %v", tt.in, got, err, tt.want, tt.ok)
		}
		if tt.ok && got.String() != tt.in {
			t.Errorf("URI.String() = %q, want %q", got.String(), tt.in)
		}
	}
}

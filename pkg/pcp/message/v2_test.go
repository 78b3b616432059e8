package message

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

const uuid = "b9835b34-52d0-4f81-b026-a3941333e082"

// v2Vectors: clj-pcp-common's v2 vectors (github.com/puppetlabs/clj-pcp-common,
// test/puppetlabs/pcp/message_v2_test.clj, encode-test and decode-test), then
// messages shaped by pcp-specifications' versions/2.0 (message.md,
// inventory.md, error_handling.md), which give schemas rather than whole
// messages. canon marks input that EncodeV2 reproduces byte for byte.
var v2Vectors = []struct {
	name  string
	in    string
	want  *Message
	canon bool
}{
	{
		name:  "clj-pcp-common encode-test",
		in:    `{"id":"` + uuid + `","message_type":"","data":[1,2,3]}`,
		want:  &Message{ID: uuid, Data: []byte("[1,2,3]")},
		canon: true,
	},
	{
		name: "clj-pcp-common decode-test",
		in:   `{"data":[1,2,3],"id":"` + uuid + `","message_type":""}`,
		want: &Message{ID: uuid, Data: []byte("[1,2,3]")},
	},
	{
		name: "inventory request with subscription",
		in:   `{"id":"` + uuid + `","message_type":"http://puppetlabs.com/inventory_request","target":"pcp:///server","sender":"pcp://ctl.example.com/controller","data":{"query":["pcp://*/agent"],"subscribe":true}}`,
		want: &Message{ID: uuid, MessageType: "http://puppetlabs.com/inventory_request", Targets: []string{"pcp:///server"},
			Sender: "pcp://ctl.example.com/controller", Data: []byte(`{"query":["pcp://*/agent"],"subscribe":true}`)},
		canon: true,
	},
	{
		name: "inventory response",
		in:   `{"id":"2","message_type":"http://puppetlabs.com/inventory_response","target":"pcp://ctl.example.com/controller","sender":"pcp:///server","in_reply_to":"` + uuid + `","data":{"uris":["pcp://node1.example.com/agent"]}}`,
		want: &Message{ID: "2", MessageType: "http://puppetlabs.com/inventory_response", Targets: []string{"pcp://ctl.example.com/controller"},
			Sender: "pcp:///server", InReplyTo: uuid, Data: []byte(`{"uris":["pcp://node1.example.com/agent"]}`)},
		canon: true,
	},
	{
		name: "inventory update, spaced out",
		in:   "{ \"id\" : \"3\",\n \"message_type\": \"http://puppetlabs.com/inventory_update\",\n \"data\": { \"changes\": [ {\"client\": \"pcp://node1.example.com/agent\", \"change\": -1} ] } }",
		want: &Message{ID: "3", MessageType: "http://puppetlabs.com/inventory_update",
			Data: []byte(`{"changes":[{"client":"pcp://node1.example.com/agent","change":-1}]}`)},
	},
	{
		name: "error message, a string",
		in:   `{"id":"4","message_type":"http://puppetlabs.com/error_message","sender":"pcp:///server","in_reply_to":"` + uuid + `","data":"not connected"}`,
		want: &Message{ID: "4", MessageType: "http://puppetlabs.com/error_message", Sender: "pcp:///server", InReplyTo: uuid,
			Data: []byte(`"not connected"`)},
		canon: true,
	},
	{
		name:  "no data, an extra field",
		in:    `{"id":"5","message_type":"t","zz":{"a":null}}`,
		want:  &Message{ID: "5", MessageType: "t", Extra: map[string][]byte{"zz": []byte(`{"a":null}`)}},
		canon: true,
	},
	{
		name:  "data null",
		in:    `{"id":"6","message_type":"t","data":null}`,
		want:  &Message{ID: "6", MessageType: "t", Data: []byte("null")},
		canon: true,
	},
}

func TestV2Vectors(t *testing.T) {
	for _, tt := range v2Vectors {
		t.Run(tt.name, func(t *testing.T) {
			got, err := DecodeV2([]byte(tt.in))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("DecodeV2:\n got %+v\nwant %+v", got, tt.want)
			}
			enc, err := EncodeV2(got)
			if err != nil {
				t.Fatal(err)
			}
			if tt.canon && string(enc) != tt.in {
				t.Errorf("EncodeV2 is not canonical:\n got %s\nwant %s", enc, tt.in)
			}
			again, err := DecodeV2(enc)
			if err != nil || !reflect.DeepEqual(again, got) {
				t.Errorf("round trip: %+v, %v; want %+v", again, err, got)
			}
		})
	}
}

func TestDecodeV2Errors(t *testing.T) {
	tests := []struct {
		name, in string
		kind     error
		msg      string
	}{
		{"empty", "", ErrFrame, "not a JSON object"},
		{"an array", `[{"id":"1","message_type":"t"}]`, ErrFrame, "not a JSON object"},
		{"null", `null`, ErrFrame, "not a JSON object"},
		{"a v1 message", "\x01\x01\x00\x00\x00\x02{}", ErrFrame, "not a JSON object"},
		{"not JSON", `{"id":`, ErrEnvelope, "not valid JSON"},
		{"trailing garbage", `{"id":"1","message_type":"t"} x`, ErrEnvelope, "not valid JSON"},
		{"no id", `{"message_type":"t"}`, ErrEnvelope, `"id" is missing`},
		{"empty id", `{"id":"","message_type":"t"}`, ErrEnvelope, `"id" is empty`},
		{"no message_type", `{"id":"1"}`, ErrEnvelope, `"message_type" is missing`},
		{"message_type an object", `{"id":"1","message_type":{}}`, ErrEnvelope, `"message_type" is not a string`},
		{"target a list", `{"id":"1","message_type":"t","target":["pcp://a/b"]}`, ErrEnvelope, `"target" is not a string`},
		{"target not a URI", `{"id":"1","message_type":"t","target":"pcp://a"}`, ErrEnvelope, `"target"`},
		{"target empty", `{"id":"1","message_type":"t","target":""}`, ErrEnvelope, `"target"`},
		{"sender not a URI", `{"id":"1","message_type":"t","sender":"node1"}`, ErrEnvelope, `"sender"`},
		{"in_reply_to null", `{"id":"1","message_type":"t","in_reply_to":null}`, ErrEnvelope, `"in_reply_to" is not a string`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := DecodeV2([]byte(tt.in))
			if !errors.Is(err, tt.kind) || !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("DecodeV2 = %+v, %v; want %v containing %q", m, err, tt.kind, tt.msg)
			}
		})
	}
}

func TestEncodeV2(t *testing.T) {
	base := Message{ID: "1", MessageType: "t"}
	bad := []struct {
		name string
		edit func(*Message)
		msg  string
	}{
		{"two targets", func(m *Message) { m.Targets = []string{"pcp://a/b", "pcp://c/d"} }, "one target, not 2"},
		{"data not JSON", func(m *Message) { m.Data = []byte("lol") }, "data is not valid JSON"},
		{"no id", func(m *Message) { m.ID = "" }, "id is required"},
		{"extra shadows data", func(m *Message) { m.Extra = map[string][]byte{"data": []byte("1")} }, `field "data"`},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			m := base
			tt.edit(&m)
			if _, err := EncodeV2(&m); !errors.Is(err, ErrEnvelope) || !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("EncodeV2 = %v, want ErrEnvelope containing %q", err, tt.msg)
			}
		})
	}

	// v1-only fields are left out; data is compacted.
	m := base
	m.Expires, m.DestinationReport, m.Debug = m.Expires.AddDate(2026, 0, 0), true, [][]byte{[]byte("x")}
	m.Data = []byte(" { \"a\" : 1 } ")
	got, err := EncodeV2(&m)
	if want := `{"id":"1","message_type":"t","data":{"a":1}}`; err != nil || string(got) != want {
		t.Errorf("EncodeV2 = %s, %v; want %s", got, err, want)
	}

	big := Message{ID: "m", MessageType: "t", Data: []byte(`"` + strings.Repeat("x", 300) + `"`)}
	b, err := EncodeV2(&big)
	if err != nil {
		t.Fatal(err)
	}
	small := Codec{MaxMessageSize: len(b) - 1}
	if _, err := small.DecodeV2(b); !errors.Is(err, ErrTooLarge) {
		t.Errorf("DecodeV2 over the limit: %v, want ErrTooLarge", err)
	}
	if _, err := small.EncodeV2(&big); !errors.Is(err, ErrTooLarge) {
		t.Errorf("EncodeV2 over the limit: %v, want ErrTooLarge", err)
	}
}

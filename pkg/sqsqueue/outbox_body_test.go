package sqsqueue

import (
	"bytes"
	"encoding/base64"
	"errors"
	"testing"

	"github.com/compilefarm/compilefarm/pkg/farm"
)

// TestOutboxBodyEncoding pins which bodies travel as they are: SQS text,
// as AWS documents it (characters above U+FFFF included, though fauxqs
// refuses them, so no emulator test sends one).
func TestOutboxBodyEncoding(t *testing.T) {
	for _, tc := range []struct {
		name string
		body string
		text bool
	}{
		{"JSON", `{"command":"replace facts","payload":{"é":"日本"}}`, true},
		{"tab, newline, carriage return", "a\tb\nc\r", true},
		{"above U+FFFF", "smile \U0001F600", true},
		{"last private-use", "\uE000\uFFFD", true},
		{"NUL", "a\x00b", false},
		{"other control character", "a\x1bb", false},
		{"U+FFFE", "a\uFFFEb", false},
		{"U+FFFF", "a\uFFFF", false},
		{"invalid UTF-8", "a\xffb", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := farm.OutboxMessage{Group: "g", Body: []byte(tc.body)}
			body, attrs, err := encodeOutboxBody(m)
			if err != nil {
				t.Fatal(err)
			}
			if tc.text {
				if body != tc.body || attrs != nil {
					t.Fatalf("SQS text travels as %q with %v, want as it is", body, attrs)
				}
				return
			}
			if body != base64.StdEncoding.EncodeToString(m.Body) || attrs[AttrEncoding].StringValue == nil || *attrs[AttrEncoding].StringValue != "base64" {
				t.Fatalf("a body that is not SQS text travels as %q with %v, want base64 marked so", body, attrs)
			}
		})
	}
	binary := bytes.Repeat([]byte{0xff}, MaxOutboxBinaryBody)
	body, _, err := encodeOutboxBody(farm.OutboxMessage{Group: "g", Body: binary})
	if err != nil || len(body)+outboxAttrRoom > maxSQSMessage {
		t.Fatalf("the largest binary body encodes to %d bytes (%v), want at most %d", len(body), err, maxSQSMessage-outboxAttrRoom)
	}
	if _, _, err := encodeOutboxBody(farm.OutboxMessage{Group: "g", Body: append(binary, 0xff)}); !errors.Is(err, farm.ErrInvalid) {
		t.Fatalf("a binary body over MaxOutboxBinaryBody: %v, want ErrInvalid", err)
	}
	text := bytes.Repeat([]byte("x"), farm.MaxOutboxBody)
	if body, _, err := encodeOutboxBody(farm.OutboxMessage{Group: "g", Body: text}); err != nil || len(body)+outboxAttrRoom > maxSQSMessage {
		t.Fatalf("the largest text body encodes to %d bytes (%v), want room for a dead letter's attributes", len(body), err)
	}
}

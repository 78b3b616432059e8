package message

import (
	"bytes"
	"reflect"
	"testing"
)

// The seed corpus is in testdata/fuzz/FuzzDecodeV1 and FuzzDecodeV2 (the
// vectors of vectors_test.go, v1_test.go and v2_test.go, and any crasher
// found); plain go test runs the seeds only. Fuzz with, for example,
//
//	go test -run '^$' -fuzz FuzzDecodeV1 -fuzztime 60s ./pkg/pcp/message

// unlimited re-encodes without a size limit: escaping may make the canonical
// form longer than the input.
var unlimited = Codec{MaxMessageSize: -1}

// FuzzDecodeV1: DecodeV1 never panics, and a message it accepts encodes to
// bytes that decode to an equal message and encode to the same bytes again.
func FuzzDecodeV1(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := DecodeV1(b)
		if err != nil {
			return
		}
		enc, err := unlimited.EncodeV1(m)
		if err != nil {
			t.Fatalf("EncodeV1 of a decoded message: %v\nmessage %+v", err, m)
		}
		again, err := unlimited.DecodeV1(enc)
		if err != nil {
			t.Fatalf("DecodeV1 of an encoded message: %v\nbytes %q", err, enc)
		}
		if !reflect.DeepEqual(again, m) {
			t.Fatalf("round trip changed the message:\n got %+v\nwant %+v", again, m)
		}
		if enc2, err := unlimited.EncodeV1(again); err != nil || !bytes.Equal(enc2, enc) {
			t.Fatalf("EncodeV1 is not canonical: %q, %v; first %q", enc2, err, enc)
		}
	})
}

// FuzzDecodeV2: the same properties for DecodeV2 and EncodeV2.
func FuzzDecodeV2(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := DecodeV2(b)
		if err != nil {
			return
		}
		enc, err := unlimited.EncodeV2(m)
		if err != nil {
			t.Fatalf("EncodeV2 of a decoded message: %v\nmessage %+v", err, m)
		}
		again, err := unlimited.DecodeV2(enc)
		if err != nil {
			t.Fatalf("DecodeV2 of an encoded message: %v\nbytes %s", err, enc)
		}
		if !reflect.DeepEqual(again, m) {
			t.Fatalf("round trip changed the message:\n got %+v\nwant %+v", again, m)
		}
		if enc2, err := unlimited.EncodeV2(again); err != nil || !bytes.Equal(enc2, enc) {
			t.Fatalf("EncodeV2 is not canonical: %s, %v; first %s", enc2, err, enc)
		}
	})
}

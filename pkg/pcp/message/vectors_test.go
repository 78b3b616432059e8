package message

import (
	"bytes"
	"errors"
	"testing"
)

// v1Vectors are the byte vectors published in clj-pcp-common's tests
// (github.com/puppetlabs/clj-pcp-common, test/puppetlabs/pcp/message_v1_test.clj,
// encode-test and decode-test), re-typed. Their envelope is "{}" (that suite
// turns schema validation off for brevity), so they pin the framing:
// ReadChunksV1 must split them as listed and AppendChunksV1 give back the
// same bytes, while DecodeV1 refuses the empty envelope as clj-pcp-common's
// decode does ("it insists on a complete envelope").
var v1Vectors = []struct {
	name   string
	in     []byte
	chunks []Chunk
}{
	{
		name:   "null message",
		in:     []byte{1, 1, 0, 0, 0, 2, 123, 125},
		chunks: []Chunk{{1, []byte("{}")}},
	},
	{
		name:   "empty data chunk",
		in:     []byte{1, 1, 0, 0, 0, 2, 123, 125, 2, 0, 0, 0, 0},
		chunks: []Chunk{{1, []byte("{}")}, {2, []byte{}}},
	},
	{
		name:   "debug as the final chunk",
		in:     []byte{1, 1, 0, 0, 0, 2, 123, 125, 2, 0, 0, 0, 0, 3, 0, 0, 0, 4, 115, 111, 109, 101},
		chunks: []Chunk{{1, []byte("{}")}, {2, []byte{}}, {3, []byte("some")}},
	},
	{
		name:   "data chunk",
		in:     []byte{1, 1, 0, 0, 0, 2, 123, 125, 2, 0, 0, 0, 4, 104, 97, 104, 97},
		chunks: []Chunk{{1, []byte("{}")}, {2, []byte("haha")}},
	},
	{
		name:   "data is accessible",
		in:     []byte{1, 1, 0, 0, 0, 2, 123, 125, 2, 0, 0, 0, 3, 108, 111, 108},
		chunks: []Chunk{{1, []byte("{}")}, {2, []byte("lol")}},
	},
	{
		name:   "debug is accessible",
		in:     []byte{1, 1, 0, 0, 0, 2, 123, 125, 2, 0, 0, 0, 0, 3, 0, 0, 0, 3, 108, 111, 108},
		chunks: []Chunk{{1, []byte("{}")}, {2, []byte{}}, {3, []byte("lol")}},
	},
	// encode-descriptor-test / decode-descriptor-test: the high four bits
	// are flags (2r10000001 is the envelope type with flag unused1).
	{
		name:   "descriptor with one flag",
		in:     []byte{1, 0b10000001, 0, 0, 0, 2, 123, 125},
		chunks: []Chunk{{0b10000001, []byte("{}")}},
	},
	{
		name:   "descriptor with two flags",
		in:     []byte{1, 0b10010001, 0, 0, 0, 2, 123, 125},
		chunks: []Chunk{{0b10010001, []byte("{}")}},
	},
}

func TestV1Vectors(t *testing.T) {
	for _, tt := range v1Vectors {
		t.Run(tt.name, func(t *testing.T) {
			chunks, err := Codec{}.ReadChunksV1(tt.in)
			if err != nil {
				t.Fatal(err)
			}
			if len(chunks) != len(tt.chunks) {
				t.Fatalf("ReadChunksV1: %d chunks, want %d", len(chunks), len(tt.chunks))
			}
			for i, c := range chunks {
				w := tt.chunks[i]
				if c.Descriptor != w.Descriptor || !bytes.Equal(c.Content, w.Content) || c.Type() != ChunkType(w.Descriptor&0x0f) {
					t.Errorf("chunk %d = %#x %q, want %#x %q", i+1, c.Descriptor, c.Content, w.Descriptor, w.Content)
				}
			}
			if got := AppendChunksV1(nil, chunks); !bytes.Equal(got, tt.in) {
				t.Errorf("AppendChunksV1 = %v, want %v", got, tt.in)
			}
			if _, err := DecodeV1(tt.in); !errors.Is(err, ErrEnvelope) {
				t.Errorf("DecodeV1 with the envelope {}: %v, want ErrEnvelope", err)
			}
		})
	}
}

// v1ErrorVectors are the malformed messages of clj-pcp-common's decode-test
// (same file), with the kind of error each must give here.
var v1ErrorVectors = []struct {
	name string
	in   []byte
	kind error
}{
	{"it only handles version 1 messages", []byte{2}, ErrVersion},
	{"it insists on envelope chunk first", []byte{1, 2, 0, 0, 0, 2, 123, 125}, ErrFrame},
	{"it insists on a well-formed envelope", []byte{1, 1, 0, 0, 0, 1, 123}, ErrEnvelope},
	{"it insists on a complete envelope", []byte{1, 1, 0, 0, 0, 2, 123, 125}, ErrEnvelope},
	// The length -1 as a signed int: far beyond the remaining bytes.
	{"chunk length -1", []byte{1, 1, 0, 0, 0, 2, 123, 125, 2, 0xff, 0xff, 0xff, 0xff}, ErrFrame},
	{"chunk length 5000", []byte{1, 1, 0, 0, 0, 2, 123, 125, 2, 0, 0, 19, 136, 0}, ErrFrame},
}

func TestV1ErrorVectors(t *testing.T) {
	for _, tt := range v1ErrorVectors {
		t.Run(tt.name, func(t *testing.T) {
			if m, err := DecodeV1(tt.in); !errors.Is(err, tt.kind) {
				t.Errorf("DecodeV1 = %+v, %v; want %v", m, err, tt.kind)
			}
		})
	}
}

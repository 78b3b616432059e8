package message

import (
	"encoding/binary"
	"fmt"
	"time"
)

// Version1 is the version byte that starts every v1 message.
const Version1 = 1

// ChunkType is the low four bits of a v1 chunk descriptor.
type ChunkType byte

// The v1 chunk types.
const (
	ChunkEnvelope ChunkType = 1
	ChunkData     ChunkType = 2
	ChunkDebug    ChunkType = 3
)

func (t ChunkType) String() string {
	switch t {
	case ChunkEnvelope:
		return "envelope"
	case ChunkData:
		return "data"
	case ChunkDebug:
		return "debug"
	}
	return fmt.Sprintf("unknown (%d)", byte(t))
}

// Chunk is one v1 chunk as it is on the wire.
type Chunk struct {
	// Descriptor holds the type in its low four bits and reserved flags in
	// its high four bits (no client sets them; they are kept as read).
	Descriptor byte
	// Content is the chunk's bytes; it aliases the decoded input.
	Content []byte
}

// Type returns the chunk's type.
func (c Chunk) Type() ChunkType { return ChunkType(c.Descriptor & 0x0f) }

const chunkHeader = 5 // descriptor byte and 4-byte big-endian size

// ReadChunksV1 splits a v1 message into its chunks without reading the
// envelope: the version byte must be 1, the first chunk an envelope, then at
// most one data chunk and any number of debug chunks (in any order, as the
// C++ client accepts), each complete. Most callers want DecodeV1.
func (c Codec) ReadChunksV1(b []byte) ([]Chunk, error) {
	if err := c.checkSize("v1", len(b)); err != nil {
		return nil, err
	}
	if len(b) == 0 {
		return nil, fmt.Errorf("pcp v1: %w: the message is empty", ErrFrame)
	}
	if b[0] != Version1 {
		return nil, fmt.Errorf("pcp v1: %w: the version byte is %d, not 1", ErrVersion, b[0])
	}
	var chunks []Chunk
	hasData := false
	for off := 1; off < len(b); {
		n := len(chunks) + 1
		if len(b)-off < chunkHeader {
			return nil, fmt.Errorf("pcp v1: %w: chunk %d is truncated: its header needs %d bytes, %d remain", ErrFrame, n, chunkHeader, len(b)-off)
		}
		desc := b[off]
		size := binary.BigEndian.Uint32(b[off+1:])
		off += chunkHeader
		if uint64(size) > uint64(len(b)-off) {
			return nil, fmt.Errorf("pcp v1: %w: chunk %d declares %d bytes, %d remain", ErrFrame, n, size, len(b)-off)
		}
		ch := Chunk{Descriptor: desc, Content: b[off : off+int(size) : off+int(size)]}
		off += int(size)
		switch t := ch.Type(); {
		case t != ChunkEnvelope && t != ChunkData && t != ChunkDebug:
			return nil, fmt.Errorf("pcp v1: %w: chunk %d has the unknown type %d (descriptor 0x%02x)", ErrFrame, n, byte(t), desc)
		case n == 1 && t != ChunkEnvelope:
			return nil, fmt.Errorf("pcp v1: %w: the first chunk is a %s chunk, not the envelope", ErrFrame, t)
		case n > 1 && t == ChunkEnvelope:
			return nil, fmt.Errorf("pcp v1: %w: chunk %d is a second envelope", ErrFrame, n)
		case t == ChunkData && hasData:
			return nil, fmt.Errorf("pcp v1: %w: chunk %d is a second data chunk", ErrFrame, n)
		case t == ChunkData:
			hasData = true
		}
		chunks = append(chunks, ch)
	}
	if len(chunks) == 0 {
		return nil, fmt.Errorf("pcp v1: %w: there is no envelope chunk after the version byte", ErrFrame)
	}
	return chunks, nil
}

// AppendChunksV1 appends the version byte and the chunks to dst, as they are.
func AppendChunksV1(dst []byte, chunks []Chunk) []byte {
	dst = append(dst, Version1)
	for _, ch := range chunks {
		dst = append(dst, ch.Descriptor)
		dst = binary.BigEndian.AppendUint32(dst, uint32(len(ch.Content)))
		dst = append(dst, ch.Content...)
	}
	return dst
}

func appendChunk(dst []byte, t ChunkType, content []byte) []byte {
	dst = append(dst, byte(t))
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(content)))
	return append(dst, content...)
}

// The envelope fields of v1, in the order EncodeV1 writes them (the C++
// client's order).
var v1Fields = []string{"id", "message_type", "targets", "expires", "sender", "in_reply_to", "destination_report"}

// DecodeV1 decodes a v1 message. The envelope must be a JSON object with
// the string fields id, message_type, expires (RFC 3339, the ISO 8601 form
// every client sends) and sender (a PCP URI), and targets, an array of PCP
// URIs; in_reply_to (a string) and destination_report (a boolean) are
// optional, and other fields go to Extra. The result does not alias b.
func (c Codec) DecodeV1(b []byte) (*Message, error) {
	chunks, err := c.ReadChunksV1(b)
	if err != nil {
		return nil, err
	}
	m, err := decodeEnvelopeV1(chunks[0].Content)
	if err != nil {
		return nil, err
	}
	for _, ch := range chunks[1:] {
		content := append([]byte{}, ch.Content...)
		if ch.Type() == ChunkData {
			m.Data = content
		} else {
			m.Debug = append(m.Debug, content)
		}
	}
	return m, nil
}

func decodeEnvelopeV1(text []byte) (*Message, error) {
	o, err := parseObject("v1", "the envelope", text)
	if err != nil {
		return nil, err
	}
	m, err := decodeCommon(o)
	if err != nil {
		return nil, err
	}
	if m.Targets, err = o.uris("targets"); err != nil {
		return nil, err
	}
	expires, err := o.str("expires", true)
	if err != nil {
		return nil, err
	}
	t, err := time.Parse(time.RFC3339Nano, expires)
	if err != nil {
		return nil, o.errorf("the field \"expires\" is not an ISO 8601 timestamp: %q", expires)
	}
	if y := t.UTC().Year(); y < 0 || y > 9999 {
		return nil, o.errorf("the field \"expires\" is out of range: %q", expires)
	}
	m.Expires = t.UTC()
	if m.Sender, err = o.uri("sender", true); err != nil {
		return nil, err
	}
	if m.InReplyTo, err = o.str("in_reply_to", false); err != nil {
		return nil, err
	}
	if m.DestinationReport, err = o.boolean("destination_report"); err != nil {
		return nil, err
	}
	m.Extra = o.rest()
	return m, nil
}

// EncodeV1 encodes m as a v1 message: the envelope (fields in a fixed order,
// in_reply_to and destination_report only when set, then Extra by name),
// the data chunk if Data is not nil, and one debug chunk per Debug entry.
// It refuses a message that DecodeV1 would refuse.
func (c Codec) EncodeV1(m *Message) ([]byte, error) {
	return c.AppendV1(nil, m)
}

// AppendV1 is EncodeV1 appending to dst.
func (c Codec) AppendV1(dst []byte, m *Message) ([]byte, error) {
	if err := checkCommon("v1", m); err != nil {
		return nil, err
	}
	if m.Sender == "" {
		return nil, fmt.Errorf("pcp v1: %w: the sender is required", ErrEnvelope)
	}
	if m.Expires.IsZero() {
		return nil, fmt.Errorf("pcp v1: %w: the expiry is required", ErrEnvelope)
	}
	if y := m.Expires.UTC().Year(); y < 0 || y > 9999 {
		return nil, fmt.Errorf("pcp v1: %w: the expiry's year %d has no RFC 3339 form", ErrEnvelope, y)
	}
	start := len(dst)
	dst = append(dst, Version1, byte(ChunkEnvelope), 0, 0, 0, 0)
	w := newWriter(dst)
	w.str("id", m.ID)
	w.str("message_type", m.MessageType)
	targets := m.Targets
	if targets == nil {
		targets = []string{}
	}
	w.strs("targets", targets)
	w.str("expires", m.Expires.UTC().Format(time.RFC3339Nano))
	w.str("sender", m.Sender)
	if m.InReplyTo != "" {
		w.str("in_reply_to", m.InReplyTo)
	}
	if m.DestinationReport {
		w.raw("destination_report", []byte("true"))
	}
	if err := w.extra("v1", m.Extra, v1Fields); err != nil {
		return nil, err
	}
	dst = w.close()
	binary.BigEndian.PutUint32(dst[start+2:], uint32(len(dst)-start-6))
	if m.Data != nil {
		dst = appendChunk(dst, ChunkData, m.Data)
	}
	for _, d := range m.Debug {
		dst = appendChunk(dst, ChunkDebug, d)
	}
	if err := c.checkSize("v1", len(dst)-start); err != nil {
		return nil, err
	}
	return dst, nil
}

// decodeCommon reads the fields both versions have first: id, a string
// that is not empty, and message_type, a string.
func decodeCommon(o object) (*Message, error) {
	m := &Message{}
	var err error
	if m.ID, err = o.str("id", true); err != nil {
		return nil, err
	}
	if m.ID == "" {
		return nil, o.errorf("the field \"id\" is empty")
	}
	if m.MessageType, err = o.str("message_type", true); err != nil {
		return nil, err
	}
	return m, nil
}

// checkCommon refuses what both versions' decoders refuse.
func checkCommon(version string, m *Message) error {
	if m.ID == "" {
		return fmt.Errorf("pcp %s: %w: the id is required", version, ErrEnvelope)
	}
	if m.Sender != "" {
		if _, err := ParseURI(m.Sender); err != nil {
			return fmt.Errorf("pcp %s: %w: the sender: %v", version, ErrEnvelope, err)
		}
	}
	for i, t := range m.Targets {
		if _, err := ParseURI(t); err != nil {
			return fmt.Errorf("pcp %s: %w: target %d: %v", version, ErrEnvelope, i, err)
		}
	}
	return nil
}

// DecodeV1 decodes a v1 message with the default Codec.
func DecodeV1(b []byte) (*Message, error) { return Codec{}.DecodeV1(b) }

// EncodeV1 encodes a v1 message with the default Codec.
func EncodeV1(m *Message) ([]byte, error) { return Codec{}.EncodeV1(m) }

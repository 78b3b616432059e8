package message

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// The fields of a v2 message, in the order EncodeV2 writes them.
var v2Fields = []string{"id", "message_type", "target", "sender", "in_reply_to", "data"}

// DecodeV2 decodes a v2 message, one JSON object (a websocket text frame):
// id and message_type are required strings; target and sender, when
// present, are PCP URIs; in_reply_to is a string; data is any JSON value,
// kept as compact text in Data; other fields go to Extra. Targets holds the
// target, if any. The result does not alias b.
func (c Codec) DecodeV2(b []byte) (*Message, error) {
	if err := c.checkSize("v2", len(b)); err != nil {
		return nil, err
	}
	if t := bytes.TrimLeft(b, " \t\r\n"); len(t) == 0 || t[0] != '{' {
		return nil, fmt.Errorf("pcp v2: %w: the frame is not a JSON object", ErrFrame)
	}
	o, err := parseObject("v2", "the message", b)
	if err != nil {
		return nil, err
	}
	m, err := decodeCommon(o)
	if err != nil {
		return nil, err
	}
	_, hasTarget := o.fields["target"]
	target, err := o.uri("target", false)
	if err != nil {
		return nil, err
	}
	if hasTarget {
		m.Targets = []string{target}
	}
	if m.Sender, err = o.uri("sender", false); err != nil {
		return nil, err
	}
	if m.InReplyTo, err = o.str("in_reply_to", false); err != nil {
		return nil, err
	}
	if raw, ok := o.take("data"); ok {
		var buf bytes.Buffer
		_ = json.Compact(&buf, raw)
		m.Data = buf.Bytes()
	}
	m.Extra = o.rest()
	return m, nil
}

// EncodeV2 encodes m as a v2 message: one compact JSON object, fields in a
// fixed order, target, sender and in_reply_to only when set, data when Data
// is not nil, then Extra by name. It refuses what DecodeV2 would refuse and
// what v2 cannot say: more than one target, an expiry, a destination report
// or debug chunks are not in v2, so it refuses more than one target and
// Data that is not JSON, and leaves Expires, DestinationReport and Debug out.
func (c Codec) EncodeV2(m *Message) ([]byte, error) {
	return c.AppendV2(nil, m)
}

// AppendV2 is EncodeV2 appending to dst.
func (c Codec) AppendV2(dst []byte, m *Message) ([]byte, error) {
	if err := checkCommon("v2", m); err != nil {
		return nil, err
	}
	if len(m.Targets) > 1 {
		return nil, fmt.Errorf("pcp v2: %w: a v2 message has one target, not %d", ErrEnvelope, len(m.Targets))
	}
	if m.Data != nil && !json.Valid(m.Data) {
		return nil, fmt.Errorf("pcp v2: %w: the data is not valid JSON", ErrEnvelope)
	}
	start := len(dst)
	w := newWriter(dst)
	w.str("id", m.ID)
	w.str("message_type", m.MessageType)
	if len(m.Targets) == 1 {
		w.str("target", m.Targets[0])
	}
	if m.Sender != "" {
		w.str("sender", m.Sender)
	}
	if m.InReplyTo != "" {
		w.str("in_reply_to", m.InReplyTo)
	}
	if m.Data != nil {
		var buf bytes.Buffer
		_ = json.Compact(&buf, m.Data)
		w.raw("data", buf.Bytes())
	}
	if err := w.extra("v2", m.Extra, v2Fields); err != nil {
		return nil, err
	}
	dst = w.close()
	if err := c.checkSize("v2", len(dst)-start); err != nil {
		return nil, err
	}
	return dst, nil
}

// DecodeV2 decodes a v2 message with the default Codec.
func DecodeV2(b []byte) (*Message, error) { return Codec{}.DecodeV2(b) }

// EncodeV2 encodes a v2 message with the default Codec.
func EncodeV2(m *Message) ([]byte, error) { return Codec{}.EncodeV2(m) }

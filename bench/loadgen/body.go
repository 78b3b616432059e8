package main

import (
	"fmt"
	"strings"

	"github.com/compilefarm/compilefarm/bench/internal/agentwire"
)

// bodyTemplate is one node's catalog request body, with the places a
// request may change in place (same length, so no re-encoding).
type bodyTemplate struct {
	node string
	body []byte
	// uuidAt is the offset of transaction_uuid's 36-character value.
	uuidAt int
	// stampAt is the offset of the 9 fractional-second digits of the facts
	// document's timestamp inside the (twice encoded) facts parameter: the
	// digits encode to themselves, so they can be overwritten in place to
	// make each upload's facts differ the way an agent's next run does.
	stampAt int
}

// newBodyTemplate builds node's catalog request from the recorded one.
func newBodyTemplate(recorded []byte, node, environment string) (*bodyTemplate, error) {
	fields, err := agentwire.SplitForm(string(recorded))
	if err != nil {
		return nil, err
	}
	doc, err := agentwire.DecodeFacts(recorded)
	if err != nil {
		return nil, err
	}
	doc, err = agentwire.RenameFacts(doc, node)
	if err != nil {
		return nil, err
	}
	// Split the document around the timestamp's fractional seconds.
	stampKey := `"timestamp":"`
	i := strings.LastIndex(doc, stampKey)
	if i < 0 {
		return nil, fmt.Errorf("the facts document has no timestamp")
	}
	dot := strings.IndexByte(doc[i+len(stampKey):], '.')
	if dot < 0 || len(doc) < i+len(stampKey)+dot+10 {
		return nil, fmt.Errorf("the facts timestamp has no fractional seconds")
	}
	fracAt := i + len(stampKey) + dot + 1
	for _, c := range doc[fracAt : fracAt+9] {
		if c < '0' || c > '9' {
			return nil, fmt.Errorf("the facts timestamp has fewer than 9 fractional digits")
		}
	}
	t := &bodyTemplate{node: node, uuidAt: -1, stampAt: -1}
	var b strings.Builder
	for n, f := range fields {
		if n > 0 {
			b.WriteByte('&')
		}
		b.WriteString(f.Name)
		b.WriteByte('=')
		switch f.Name {
		case "facts":
			pre := agentwire.Escape(agentwire.Escape(doc[:fracAt]))
			t.stampAt = b.Len() + len(pre)
			b.WriteString(pre)
			b.WriteString(agentwire.Escape(agentwire.Escape(doc[fracAt:])))
		case "environment", "configured_environment":
			b.WriteString(agentwire.Escape(environment))
		case "transaction_uuid":
			if len(f.Value) != 36 {
				return nil, fmt.Errorf("transaction_uuid %q is not a UUID", f.Value)
			}
			t.uuidAt = b.Len()
			b.WriteString(f.Value)
		default:
			b.WriteString(f.Value)
		}
	}
	if t.stampAt < 0 || t.uuidAt < 0 {
		return nil, fmt.Errorf("the recorded request lacks facts or transaction_uuid")
	}
	t.body = []byte(b.String())
	return t, nil
}

// fill copies the template into buf (reused across requests), giving the
// request its own transaction UUID and, when fresh, a facts timestamp of its
// own (so the facts differ from the last upload only in volatile data).
func (t *bodyTemplate) fill(buf []byte, seq uint64, fresh bool) []byte {
	buf = append(buf[:0], t.body...)
	// A UUID-shaped, per-request value: 8-4-4-4-12 hex digits.
	u := fmt.Sprintf("%08x-%04x-4%03x-8%03x-%012x", uint32(seq>>32), uint16(seq>>16), uint16(seq)&0xfff, 0, seq)
	copy(buf[t.uuidAt:], u)
	if fresh {
		copy(buf[t.stampAt:], fmt.Sprintf("%09d", seq%1_000_000_000))
	}
	return buf
}

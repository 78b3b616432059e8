package facts

import (
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/compilefarm/compilefarm/internal/jsonscan"
	"github.com/compilefarm/compilefarm/pkg/farm"
)

// DecodeOnlyEncoded is DecodeOnly for the facts of a catalog request as
// they are sent: raw is the value of the form's facts parameter, the
// document URL-encoded twice. It skips what sel does not select in place,
// without unescaping it (most of a document, most of which a catalog never
// reads), and unescapes only the selected values, the keys on the way and
// the name, timestamp and expiration.
//
// It may refuse any input (handled false), and does for anything it does
// not expect: a plain '+', ';', quote, backslash or bracket (see
// special), an escape it does not read (see encodedByte), malformed JSON
// (DecodeOnly says what is wrong with it). When handled is true, raw
// unescapes twice, and the Document, and whether there is an error, are
// what DecodeOnly(certname, d, sel) returns for d the double-unescaped raw
// (as unescapeTwice, or url.QueryUnescape twice, gives it); the Document
// holds no part of raw.
func DecodeOnlyEncoded(certname string, raw []byte, sel *Selection) (doc Document, handled bool, err error) {
	if sel == nil {
		return Document{}, false, nil
	}
	var d Document
	keep := func(e error) {
		if err == nil {
			err = e
		}
	}
	s := &encodedScanner{b: raw}
	// What follows is DecodeOnly's walk, member for member, on the encoded
	// bytes.
	s.object(func(key []byte) {
		switch member := strings.ToLower(string(key)); member {
		case "values":
			if c, _ := s.peek(); c == 'n' {
				s.skip()
				d.Values = nil
				return
			}
			if d.Values == nil {
				d.Values = map[string]any{}
			}
			switch c, _ := s.peek(); {
			case c != '{':
				s.skip()
				keep(errors.New("values is not an object"))
			case sel.whole:
				s.decodeValue(&d.Values, keep)
			default:
				s.decodeSelected(sel, d.Values, keep)
			}
		case "name", "timestamp", "expiration":
			if raw := s.raw(); raw != nil {
				keep(d.setHeader(member, raw))
			}
		default:
			s.skip()
		}
	})
	s.end()
	if s.refused {
		// Malformed JSON included: DecodeOnly says what is wrong with it,
		// at offsets in the decoded document; and the scan did not look
		// at the escapes after where it stopped.
		return Document{}, false, nil
	}
	if err != nil {
		return Document{}, true, fmt.Errorf("facts for %s are not a JSON facts object: %v: %w", certname, err, farm.ErrInvalid)
	}
	d, err = d.forNode(certname)
	return d, true, err
}

// catalogFormOnly is DecodeOnlyEncoded for the facts of a catalog request
// body: handled only when ParseCatalogForm accepts the body (one facts
// parameter, the rest a valid form, facts in JSON), so that when handled
// the result is DecodeOnly's on ParseCatalogForm(body).Facts. The rest of
// the form is a few hundred bytes, parsed as ParseCatalogForm parses it.
func catalogFormOnly(certname string, body []byte, sel *Selection) (doc Document, handled bool, err error) {
	start, end, ok := formParam(body, "facts")
	if !ok {
		return Document{}, false, nil
	}
	rest := make([]byte, 0, len(body)-(end-start))
	rest = append(rest, body[:start-len("facts=")]...)
	rest = append(rest, body[end:]...)
	form, err := url.ParseQuery(string(rest))
	if _, more := form["facts"]; err != nil || more || checkFactsFormat(form) != nil {
		return Document{}, false, nil
	}
	return DecodeOnlyEncoded(certname, body[start:end], sel)
}

// special are the bytes that are not plain document bytes for the
// scanner: '%' starts an escape, and it refuses the others. A plain '+' is
// a space and a ';' is refused by url.ParseQuery. A plain quote, backslash
// or bracket would make the document's structure more than its escapes;
// agents escape them all, so that in what is skipped only '%' needs a
// look.
var special = [256]bool{'%': true, '+': true, ';': true, '"': true, '\\': true, '{': true, '}': true, '[': true, ']': true}

// encodedByte decodes the document byte whose double encoding starts at
// b[i], and returns it with the length of its encoding, 0 for an encoding
// the fast path does not read. The encodings read are those for which the
// two unescapings are one byte at a time (the inner escape's digits plain):
//
//	c       c itself, when not special
//	%25HH   the byte HH (the inner escape: how agents send punctuation)
//	%2B     a space (an inner '+')
//	%HH     the byte HH, other than '%' and '+'
//
// Anything else (a bad or truncated escape, an inner escape whose digits
// are escaped too) is refused; unescapeTwice decodes it, or says it is bad.
func encodedByte(b []byte, i int) (byte, int) {
	c := b[i]
	if c != '%' {
		if special[c] {
			return 0, 0
		}
		return c, 1
	}
	if i+2 >= len(b) || hexValue[b[i+1]] < 0 || hexValue[b[i+2]] < 0 {
		return 0, 0
	}
	switch c = byte(hexValue[b[i+1]]<<4 | hexValue[b[i+2]]); c {
	case '%':
		if i+4 >= len(b) || hexValue[b[i+3]] < 0 || hexValue[b[i+4]] < 0 {
			return 0, 0
		}
		return byte(hexValue[b[i+3]]<<4 | hexValue[b[i+4]]), 5
	case '+':
		return ' ', 3
	}
	return c, 3
}

// appendDecoded appends to dst the document bytes encoded in enc, which
// the scanner has read already (every escape in it is one encodedByte
// reads).
func appendDecoded(dst, enc []byte) []byte {
	for i := 0; i < len(enc); {
		if c := enc[i]; c != '%' {
			dst = append(dst, c)
			i++
			continue
		}
		c, n := escapedByte(enc, i)
		if n == 0 {
			panic("facts: appendDecoded on bytes the scanner did not read")
		}
		dst = append(dst, c)
		i += n
	}
	return dst
}

// encodedScanner walks a double-encoded JSON document as jsonscan.Scanner
// walks a decoded one: the same structure is checked at the same places
// (so that it stops where jsonscan stops, on the same documents), but
// rather than say what is wrong it refuses the document, for DecodeOnly
// to say. Only keys and the values it returns are unescaped.
type encodedScanner struct {
	b       []byte
	i       int
	refused bool
	key     []byte // the last key, unescaped (reused)
	val     []byte // the last raw value, unescaped (reused)
}

// refuse stops the scan: the document is malformed or encoded in a way
// the scanner does not read.
func (s *encodedScanner) refuse() {
	s.refused = true
	s.i = len(s.b)
}

// peek skips white space and returns the next document byte and the
// length of its encoding; 0, 0 at the end or once refused. As with
// jsonscan's Peek, a NUL byte is returned as 0 too, and is no value.
func (s *encodedScanner) peek() (byte, int) {
	for s.i < len(s.b) {
		c, n := encodedByte(s.b, s.i)
		switch {
		case n == 0:
			s.refuse()
			return 0, 0
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			s.i += n
		default:
			return c, n
		}
	}
	return 0, 0
}

// object is jsonscan.Scanner.Object: field is called with each member's
// key (valid during the call) and must consume its value.
func (s *encodedScanner) object(field func(key []byte)) {
	c, n := s.peek()
	if c != '{' {
		s.refuse()
		return
	}
	s.i += n
	if c, n := s.peek(); c == '}' {
		s.i += n
		return
	}
	for !s.refused {
		k := s.readKey()
		c, n := s.peek()
		if c != ':' {
			s.refuse()
			return
		}
		s.i += n
		start := s.i
		field(k)
		if !s.refused && s.i == start {
			s.refuse()
			return
		}
		switch c, n := s.peek(); c {
		case ',':
			s.i += n
		case '}':
			s.i += n
			return
		default:
			s.refuse()
			return
		}
	}
}

// readKey reads an object key and returns it unescaped (valid until the
// next key), as jsonscan's does: its escapes decoded by jsonscan itself.
func (s *encodedScanner) readKey() []byte {
	c, n := s.peek()
	if c != '"' {
		s.refuse()
		return nil
	}
	start := s.i + n
	end, next, escaped := s.stringEnd(start)
	if end < 0 {
		s.refuse()
		return nil
	}
	s.i = next
	if !escaped {
		s.key = appendDecoded(s.key[:0], s.b[start:end])
		return s.key
	}
	s.key = append(s.key[:0], '"')
	s.key = appendDecoded(s.key, s.b[start:end])
	s.key = append(s.key, '"')
	js := jsonscan.New(s.key)
	k := js.String()
	if js.Err() != nil || js.Offset() != len(s.key) {
		s.refuse()
		return nil
	}
	return k
}

// stringEnd finds the end of the string whose content's encoding starts
// at i: where its closing quote's encoding starts (end, -1 when the string
// does not end or is refused) and ends (next), and whether the content
// has a backslash. With no plain quote or backslash in the document, only
// escapes can be either (see skipString). A backslash escapes the next
// byte, whatever it is (jsonscan's rule: a quote after an odd number of
// backslashes).
func (s *encodedScanner) stringEnd(i int) (end, next int, escaped bool) {
	b := s.b
	for {
		for i < len(b) && !special[b[i]] {
			i++
		}
		if i >= len(b) {
			return -1, 0, false
		}
		end = i
		c, n := escapedByte(b, end)
		if n == 0 {
			s.refuse()
			return -1, 0, false
		}
		i = end + n
		switch c {
		case '"':
			return end, i, escaped
		case '\\':
			escaped = true
			if i >= len(b) {
				return -1, 0, false
			}
			_, n := encodedByte(b, i)
			if n == 0 {
				s.refuse()
				return -1, 0, false
			}
			i += n
		}
	}
}

// escapedByte is encodedByte, the usual %25HH read first (it is most of
// the bytes a skip looks at).
func escapedByte(b []byte, i int) (byte, int) {
	if b[i] == '%' && i+4 < len(b) && b[i+1] == '2' && b[i+2] == '5' {
		h, l := hexValue[b[i+3]], hexValue[b[i+4]]
		if h|l < 0 {
			return 0, 0
		}
		return byte(h<<4 | l), 5
	}
	return encodedByte(b, i)
}

// skip is jsonscan.Scanner.Skip: it consumes the next value, checking its
// structure as jsonscan does and no more.
func (s *encodedScanner) skip() {
	c, n := s.peek()
	switch c {
	case '"':
		if s.i = skipString(s.b, s.i+n); s.i < 0 {
			s.refuse()
		}
	case '{', '[':
		s.skipContainer()
	case 0, ',', ':', '}', ']':
		s.refuse()
	default: // number, true, false, null
		start := s.i
		for s.i < len(s.b) {
			c, n := encodedByte(s.b, s.i)
			if n == 0 {
				s.refuse()
				return
			}
			if !scalarByte[c] {
				break
			}
			s.i += n
		}
		if s.i == start {
			s.refuse()
		}
	}
}

// scalarByte is jsonscan's: the bytes that may make up a number, true,
// false or null.
var scalarByte = func() (t [256]bool) {
	for _, c := range []byte("0123456789+-.eEtrufalsn") {
		t[c] = true
	}
	return t
}()

// skipContainer consumes the object or array that starts at s.i, as
// jsonscan's does: brackets must balance and match, strings end; the rest
// is not looked at.
func (s *encodedScanner) skipContainer() {
	if s.i = skipEncoded(s.b, s.i); s.i < 0 {
		s.refuse()
	}
}

// skipEncoded returns where the object or array whose opening bracket's
// encoding is at i ends; -1 when it does not end, is nested more than 64
// deep, or has an escape encodedByte does not read. It is the skip of
// (nearly) every byte of a document: with no plain quote, backslash or
// bracket in it, its structure is all in its escapes, which skipEncoded
// checks as encodedByte does and decodes no further than it must.
func skipEncoded(b []byte, i int) int {
	var objects uint64 // per open level, from bit 0: an object
	depth := 0
	for {
		// Between strings: escaped punctuation and the plain bytes of
		// numbers and literals.
		for i < len(b) && !special[b[i]] {
			i++
		}
		if i >= len(b) {
			return -1
		}
		c, n := escapedByte(b, i)
		if n == 0 {
			return -1
		}
		i += n
		switch c {
		case '"':
			if i = skipString(b, i); i < 0 {
				return -1
			}
		case '{', '[':
			if depth == 64 {
				return -1
			}
			objects = objects&^(1<<depth) | boolBit(c == '{')<<depth
			depth++
		case '}', ']':
			if depth == 0 {
				return -1 // not reached: skipEncoded starts at an opening bracket
			}
			depth--
			if (objects>>depth&1 == 1) != (c == '}') {
				return -1
			}
			if depth == 0 {
				return i
			}
		}
	}
}

// skipString returns where the string whose content's encoding starts at
// i ends (after its closing quote's encoding), or -1 as skipEncoded. Its
// loop is most of the time a skip takes: plain letters, and %25HH escapes
// whose HH are checked for hex digits and compared with those of a quote
// (22) or backslash (5C), not decoded. Plain bytes are passed over one by
// one: they come a few at a time between escapes, too few for
// bytes.IndexByte to pay for its call (measured: no faster on the
// recorded facts). A backslash escapes the next byte, whatever it is
// (jsonscan's rule: a quote after an odd number of backslashes).
func skipString(b []byte, i int) int {
	for {
		for i < len(b) && !special[b[i]] {
			i++
		}
		if i+4 < len(b) && b[i] == '%' && b[i+1] == '2' && b[i+2] == '5' {
			x, y := b[i+3], b[i+4]
			if hexValue[x]|hexValue[y] < 0 {
				return -1
			}
			i += 5
			switch {
			case x == '2' && y == '2':
				return i
			case x == '5' && (y == 'C' || y == 'c'):
				if i = skipEscaped(b, i); i < 0 {
					return -1
				}
			}
			continue
		}
		if i >= len(b) {
			return -1
		}
		c, n := encodedByte(b, i) // other escapes (%2B, %22...), or refused
		if n == 0 {
			return -1
		}
		i += n
		switch c {
		case '"':
			return i
		case '\\':
			if i = skipEscaped(b, i); i < 0 {
				return -1
			}
		}
	}
}

// skipEscaped returns where the byte after a backslash, encoded at i,
// ends (-1 when it is refused or missing).
func skipEscaped(b []byte, i int) int {
	if i >= len(b) {
		return -1
	}
	if _, n := encodedByte(b, i); n > 0 {
		return i + n
	}
	return -1
}

// boolBit is 1 for true, 0 for false: a level's bit in skipEncoded.
func boolBit(v bool) uint64 {
	if v {
		return 1
	}
	return 0
}

// raw consumes the next value and returns it unescaped (valid until the
// next raw value), nil when refused.
func (s *encodedScanner) raw() []byte {
	s.peek()
	start := s.i
	s.skip()
	if s.refused {
		return nil
	}
	s.val = appendDecoded(s.val[:0], s.b[start:s.i])
	return s.val
}

// decodeValue is decodeValue on the next value, unescaped: encoding/json
// copies what it keeps, so nothing decoded refers to the scanner's bytes.
func (s *encodedScanner) decodeValue(v any, fail func(error)) {
	raw := s.raw()
	if raw == nil {
		return
	}
	js := jsonscan.New(raw)
	decodeValue(js, v, fail)
	js.End()
	if js.Err() != nil {
		// jsonscan reads the value otherwise than the scanner did: not
		// expected, but then the scanner's answer is not DecodeOnly's.
		s.refuse()
	}
}

// decodeSelected is decodeSelected on the encoded document.
func (s *encodedScanner) decodeSelected(sel *Selection, m map[string]any, fail func(error)) {
	s.object(func(key []byte) {
		c := sel.children[string(key)]
		if c == nil {
			s.skip()
			return
		}
		k := string(key) // the key's bytes are reused by the next key
		if p, _ := s.peek(); !c.whole && p == '{' {
			sub := map[string]any{}
			s.decodeSelected(c, sub, fail)
			m[k] = sub
			return
		}
		var v any
		s.decodeValue(&v, fail)
		m[k] = v
	})
}

// end is jsonscan.Scanner.End: nothing but white space may follow.
func (s *encodedScanner) end() {
	s.peek()
	if s.i < len(s.b) {
		s.refuse()
	}
}

package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// scanner reads JSON text byte by byte, decoding only what its caller asks
// for and skipping the rest at the speed of bytes.IndexByte: what a
// simulated agent reads of a catalog (names, titles, tags, sources) is a
// small part of its bytes, most of which are file contents. It is used on
// answers from the broker, so it checks structure as far as it reads and
// never panics on malformed input, but it does not validate what it skips
// as strictly as encoding/json.
type scanner struct {
	b   []byte
	i   int
	err error
}

var errSyntax = errors.New("malformed JSON")

func (s *scanner) fail(what string) {
	if s.err == nil {
		s.err = fmt.Errorf("%w at byte %d: %s", errSyntax, s.i, what)
	}
	s.i = len(s.b)
}

func (s *scanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// peek is the next non-space byte (0 at the end).
func (s *scanner) peek() byte {
	s.ws()
	if s.i >= len(s.b) {
		return 0
	}
	return s.b[s.i]
}

// expect consumes byte c.
func (s *scanner) expect(c byte) {
	if s.peek() != c {
		s.fail(fmt.Sprintf("want %q", c))
		return
	}
	s.i++
}

// object calls field for each key of the object that comes next, the
// scanner standing before the key's value, which field must consume. The
// key's bytes are valid only during the call.
func (s *scanner) object(field func(key []byte)) {
	s.expect('{')
	if s.peek() == '}' {
		s.i++
		return
	}
	for s.err == nil {
		k := s.strBytes()
		s.expect(':')
		field(k)
		switch s.peek() {
		case ',':
			s.i++
		case '}':
			s.i++
			return
		default:
			s.fail("want , or } in an object")
		}
	}
}

// array calls elem for each element of the array that comes next; elem
// must consume it.
func (s *scanner) array(elem func()) {
	s.expect('[')
	if s.peek() == ']' {
		s.i++
		return
	}
	for s.err == nil {
		elem()
		switch s.peek() {
		case ',':
			s.i++
		case ']':
			s.i++
			return
		default:
			s.fail("want , or ] in an array")
		}
	}
}

// strEnd is the index of the closing quote of the string whose content
// starts at i, and whether the content has escapes.
func (s *scanner) strEnd(i int) (int, bool) {
	escaped := false
	for {
		j := bytes.IndexByte(s.b[i:], '"')
		if j < 0 {
			return -1, false
		}
		end := i + j
		// The quote is escaped when an odd number of backslashes precede it.
		n := 0
		for k := end - 1; k >= i && s.b[k] == '\\'; k-- {
			n++
		}
		if !escaped {
			escaped = bytes.IndexByte(s.b[i:end], '\\') >= 0
		}
		if n%2 == 0 {
			return end, escaped
		}
		i = end + 1
	}
}

// str reads a string.
func (s *scanner) str() string { return string(s.strBytes()) }

// strBytes reads a string: its content in the input when it has no
// escapes, else decoded into a new slice.
func (s *scanner) strBytes() []byte {
	if s.peek() != '"' {
		s.fail("want a string")
		return nil
	}
	start := s.i + 1
	end, escaped := s.strEnd(start)
	if end < 0 {
		s.fail("unterminated string")
		return nil
	}
	s.i = end + 1
	if !escaped {
		return s.b[start:end]
	}
	v, ok := unquote(s.b[start:end])
	if !ok {
		s.i = start
		s.fail("bad escape in a string")
	}
	return v
}

// strOrNull reads a string or null (nil).
func (s *scanner) strOrNull() *string {
	if s.peek() == 'n' {
		s.literal("null")
		return nil
	}
	v := s.str()
	return &v
}

// intOrNull reads an integer or null (nil).
func (s *scanner) intOrNull() *int {
	raw := s.raw()
	if string(raw) == "null" || s.err != nil {
		return nil
	}
	n, err := strconv.Atoi(string(raw))
	if err != nil {
		s.fail("want an integer")
		return nil
	}
	return &n
}

// boolean reads true or false.
func (s *scanner) boolean() bool {
	if s.peek() == 't' {
		s.literal("true")
		return true
	}
	s.literal("false")
	return false
}

func (s *scanner) literal(lit string) {
	s.ws()
	if !bytes.HasPrefix(s.b[s.i:], []byte(lit)) {
		s.fail("want " + lit)
		return
	}
	s.i += len(lit)
}

// raw consumes the next value and returns its bytes.
func (s *scanner) raw() json.RawMessage {
	s.ws()
	start := s.i
	s.skip()
	if s.err != nil {
		return nil
	}
	return json.RawMessage(s.b[start:s.i])
}

// skip consumes the next value without decoding it.
func (s *scanner) skip() {
	switch c := s.peek(); c {
	case '"':
		end, _ := s.strEnd(s.i + 1)
		if end < 0 {
			s.fail("unterminated string")
			return
		}
		s.i = end + 1
	case '{', '[':
		depth := 0
		for s.i < len(s.b) {
			switch s.b[s.i] {
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					s.i++
					return
				}
			case '"':
				end, _ := s.strEnd(s.i + 1)
				if end < 0 {
					s.fail("unterminated string")
					return
				}
				s.i = end
			}
			s.i++
		}
		s.fail("unterminated " + string(c))
	case 0:
		s.fail("want a value")
	default: // number, true, false, null
		start := s.i
	scalar:
		for ; s.i < len(s.b); s.i++ {
			switch s.b[s.i] {
			case ',', '}', ']', ' ', '\t', '\n', '\r':
				break scalar
			}
		}
		if s.i == start {
			s.fail("want a value")
		}
	}
}

// unquote decodes the content of a JSON string with escapes.
func unquote(b []byte) ([]byte, bool) {
	out := make([]byte, 0, len(b))
	for i := 0; i < len(b); i++ {
		c := b[i]
		if c != '\\' {
			out = append(out, c)
			continue
		}
		i++
		if i >= len(b) {
			return nil, false
		}
		switch b[i] {
		case '"', '\\', '/':
			out = append(out, b[i])
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r, ok := hex4(b, i+1)
			if !ok {
				return nil, false
			}
			i += 4
			if utf16.IsSurrogate(r) {
				r2, ok := rune(0), false
				if i+2 < len(b) && b[i+1] == '\\' && b[i+2] == 'u' {
					r2, ok = hex4(b, i+3)
				}
				if dec := utf16.DecodeRune(r, r2); ok && dec != utf8.RuneError {
					r = dec
					i += 6
				} else {
					r = utf8.RuneError
				}
			}
			out = utf8.AppendRune(out, r)
		default:
			return nil, false
		}
	}
	return out, true
}

func hex4(b []byte, i int) (rune, bool) {
	if i+4 > len(b) {
		return 0, false
	}
	n, err := strconv.ParseUint(string(b[i:i+4]), 16, 32)
	return rune(n), err == nil
}

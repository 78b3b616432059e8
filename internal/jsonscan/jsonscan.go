// Package jsonscan walks a JSON document in memory, decoding only the
// values its caller asks for and skipping the rest without building them:
// the few top-level fields of a 330 KB agent report, or the few facts a
// catalog read out of a node's facts document.
//
// A Scanner checks structure wherever it walks or skips: brackets balance
// and match, strings end, objects have keys, colons and commas, and
// nothing but white space follows the document. It does not check what it
// skips as strictly as encoding/json does (the digits of a number, the
// letters of true, the escapes and control characters inside a string):
// callers that keep or store a document decode it whole first. It never
// panics on malformed input.
package jsonscan

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// ErrSyntax is wrapped by every error a Scanner returns.
var ErrSyntax = errors.New("malformed JSON")

// Scanner reads one JSON document. Its methods consume one value each;
// after the first error every method does nothing and Err returns it.
type Scanner struct {
	b   []byte
	i   int
	err error
}

// New returns a Scanner at the start of doc, which it reads in place:
// doc must not change while the Scanner or what it returned is in use.
func New(doc []byte) *Scanner { return &Scanner{b: doc} }

// Err is the first error met, or nil.
func (s *Scanner) Err() error { return s.err }

// Offset is where the scanner stands in the document.
func (s *Scanner) Offset() int { return s.i }

// Fail records the caller's objection to the value it just read (what it
// wanted instead) as a syntax error at the offset reached: the first error
// stays, and scanning stops.
func (s *Scanner) Fail(what string) { s.fail(what) }

func (s *Scanner) fail(what string) {
	if s.err == nil {
		s.err = fmt.Errorf("%w at byte %d: %s", ErrSyntax, s.i, what)
	}
	s.i = len(s.b)
}

func (s *Scanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// Peek returns the first byte of the next value ('{', '[', '"', 't', 'f',
// 'n', '-' or a digit), or 0 at the end or after an error.
func (s *Scanner) Peek() byte {
	s.ws()
	if s.err != nil || s.i >= len(s.b) {
		return 0
	}
	return s.b[s.i]
}

// Object reads the object that comes next, calling field for each of its
// members with the member's key (unescaped; valid only during the call)
// and the scanner standing before the member's value, which field must
// consume (Skip, Raw, Object, ...). A key that repeats is passed again.
func (s *Scanner) Object(field func(key []byte)) {
	if s.Peek() != '{' {
		s.fail("want an object")
		return
	}
	s.i++
	if s.Peek() == '}' {
		s.i++
		return
	}
	for s.err == nil {
		k := s.key()
		if s.Peek() != ':' {
			s.fail("want : after an object key")
			return
		}
		s.i++
		start := s.i
		field(k)
		if s.err == nil && s.i == start {
			s.fail("the value of an object member was not read")
			return
		}
		switch s.Peek() {
		case ',':
			s.i++
		case '}':
			s.i++
			return
		default:
			s.fail("want , or } in an object")
			return
		}
	}
}

// Array reads the array that comes next, calling elem for each of its
// elements with the scanner standing before it; elem must consume it.
func (s *Scanner) Array(elem func()) {
	if s.Peek() != '[' {
		s.fail("want an array")
		return
	}
	s.i++
	if s.Peek() == ']' {
		s.i++
		return
	}
	for s.err == nil {
		start := s.i
		elem()
		if s.err == nil && s.i == start {
			s.fail("an array element was not read")
			return
		}
		switch s.Peek() {
		case ',':
			s.i++
		case ']':
			s.i++
			return
		default:
			s.fail("want , or ] in an array")
			return
		}
	}
}

// key reads an object key.
func (s *Scanner) key() []byte {
	if s.Peek() != '"' {
		s.fail("want a string key")
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

// Raw consumes the next value and returns its bytes in the document (for
// encoding/json to decode); nil after an error.
func (s *Scanner) Raw() []byte {
	s.ws()
	start := s.i
	s.Skip()
	if s.err != nil {
		return nil
	}
	return s.b[start:s.i]
}

// Skip consumes the next value without decoding it.
func (s *Scanner) Skip() {
	switch c := s.Peek(); c {
	case '"':
		end := stringEnd(s.b, s.i+1)
		if end < 0 {
			s.fail("unterminated string")
			return
		}
		s.i = end + 1
	case '{', '[':
		s.skipContainer()
	case 0:
		s.fail("want a value")
	case ',', ':', '}', ']':
		s.fail("want a value")
	default: // number, true, false, null
		start := s.i
		for s.i < len(s.b) && scalarByte[s.b[s.i]] {
			s.i++
		}
		if s.i == start {
			s.fail("want a value")
		}
	}
}

// scalarByte tells the bytes that may make up a number, true, false or
// null.
var scalarByte = func() (t [256]bool) {
	for _, c := range []byte("0123456789+-.eEtrufalsn") {
		t[c] = true
	}
	return t
}()

// structural tells the bytes skipContainer stops at outside strings.
var structural = func() (t [256]bool) {
	for _, c := range []byte(`"{}[]`) {
		t[c] = true
	}
	return t
}()

// skipContainer consumes the object or array that starts at s.i: bytes
// between strings are looked at one by one (they are few: colons, commas,
// numbers, literals), strings are jumped over by bytes.IndexByte (about
// 1 GB/s on the documents this package is for, which are mostly short
// strings; encoding/json validates them at about 200 MB/s).
// Brackets must balance and match; open ones are kept as bits, one per
// level (1 for an object), in a word up to 64 levels and a slice past it.
func (s *Scanner) skipContainer() {
	var bits uint64 // level k's bracket at bit k
	var deep []bool // levels past 64
	depth := 0
	b := s.b
	i := s.i
	for i < len(b) {
		c := b[i]
		if !structural[c] {
			i++
			continue
		}
		switch c {
		case '"':
			end := stringEnd(b, i+1)
			if end < 0 {
				s.i = i
				s.fail("unterminated string")
				return
			}
			i = end + 1
			continue
		case '{', '[':
			if depth < 64 {
				if c == '{' {
					bits |= 1 << depth
				} else {
					bits &^= 1 << depth
				}
			} else {
				deep = append(deep, c == '{')
			}
			depth++
		case '}', ']':
			depth--
			var obj bool
			if depth < 64 {
				obj = bits&(1<<depth) != 0
			} else {
				obj, deep = deep[len(deep)-1], deep[:len(deep)-1]
			}
			if obj != (c == '}') {
				s.i = i
				s.fail("mismatched " + string(c))
				return
			}
			if depth == 0 {
				s.i = i + 1
				return
			}
		}
		i++
	}
	s.i = i
	s.fail("unterminated object or array")
}

// stringEnd is the index of the closing quote of the string whose content
// starts at i in b, or -1: the next quote not escaped, found by
// bytes.IndexByte.
func stringEnd(b []byte, i int) int {
	for {
		j := bytes.IndexByte(b[i:], '"')
		if j < 0 {
			return -1
		}
		end := i + j
		if end == i || b[end-1] != '\\' {
			return end
		}
		// A quote after backslashes is escaped when they are odd (none of
		// them is the second of a pair that starts before i: i is the
		// start of the content or just after a quote).
		n := 0
		for k := end - 1; k >= i && b[k] == '\\'; k-- {
			n++
		}
		if n%2 == 0 {
			return end
		}
		i = end + 1
	}
}

// strEnd is the index of the closing quote of the string whose content
// starts at i (-1 when it does not end), and whether the content has
// escapes.
func (s *Scanner) strEnd(i int) (int, bool) {
	end := stringEnd(s.b, i)
	if end < 0 {
		return -1, false
	}
	return end, bytes.IndexByte(s.b[i:end], '\\') >= 0
}

// String reads a string value. Its content is in the document when it
// has no escapes, else decoded into new bytes.
func (s *Scanner) String() []byte {
	if s.Peek() != '"' {
		s.fail("want a string")
		return nil
	}
	return s.key()
}

// End checks that nothing but white space is left.
func (s *Scanner) End() {
	s.ws()
	if s.err == nil && s.i < len(s.b) {
		s.fail("data after the document")
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

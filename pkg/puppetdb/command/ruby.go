package command

import (
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/compilefarm/compilefarm/internal/jsonscan"
)

// The termini turn some values into text with Ruby's own methods (an
// event's old and new values with to_s, a metaparameter's elements sorted
// by to_s, a hash key that is not a string). The functions here give the
// same text from the JSON value that Ruby would hold: a JSON integer is an
// Integer, any other JSON number a Float, and arrays and hashes inspect as
// Ruby 3.1 (Debian 12's) writes them.

// rubyToS is Ruby's to_s of the JSON value v: a string itself, nil "",
// arrays and hashes as inspect.
func rubyToS(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case nil:
		return ""
	}
	return rubyInspect(v)
}

// rubyInspect is Ruby's inspect of the JSON value v.
func rubyInspect(v any) string {
	var b strings.Builder
	writeInspect(&b, v)
	return b.String()
}

func writeInspect(b *strings.Builder, v any) {
	switch v := v.(type) {
	case nil:
		b.WriteString("nil")
	case bool:
		b.WriteString(strconv.FormatBool(v))
	case json.Number:
		b.WriteString(rubyNumber(v))
	case string:
		writeInspectString(b, v)
	case []any:
		b.WriteByte('[')
		for i, e := range v {
			if i > 0 {
				b.WriteString(", ")
			}
			writeInspect(b, e)
		}
		b.WriteByte(']')
	case map[string]any:
		// Ruby keeps a hash's insertion order; a JSON object decoded here
		// has lost it, so keys are written sorted.
		b.WriteByte('{')
		for i, k := range sortedKeys(v) {
			if i > 0 {
				b.WriteString(", ")
			}
			writeInspectString(b, k)
			b.WriteString("=>")
			writeInspect(b, v[k])
		}
		b.WriteByte('}')
	default:
		fmt.Fprint(b, v)
	}
}

// Pcore's keys in rich data JSON.
const (
	pcoreType  = "__ptype"
	pcoreValue = "__pvalue"
)

// stringifiedKey is the key ToStringifiedConverter gives a string key of
// a hash: the two Pcore keys are renamed, others kept.
func stringifiedKey(k string) string {
	if k == pcoreType || k == pcoreValue {
		return "reserved key: " + k
	}
	return k
}

// inspectRaw is Ruby's to_s of the value the JSON raw holds as
// ToStringifiedConverter reads it (a hash key "__ptype" or "__pvalue"
// becomes "reserved key: __ptype"), with hashes in their JSON order.
func inspectRaw(raw []byte) (string, error) {
	s := jsonscan.New(raw)
	var b strings.Builder
	if s.Peek() == '"' {
		b.Write(s.String())
	} else if s.Peek() != 'n' {
		writeInspectRaw(&b, s)
	} else {
		s.Skip()
	}
	s.End()
	if err := s.Err(); err != nil {
		return "", err
	}
	return b.String(), nil
}

func writeInspectRaw(b *strings.Builder, s *jsonscan.Scanner) {
	switch s.Peek() {
	case '{':
		b.WriteByte('{')
		n := 0
		s.Object(func(key []byte) {
			if n > 0 {
				b.WriteString(", ")
			}
			n++
			writeInspectString(b, stringifiedKey(string(key)))
			b.WriteString("=>")
			writeInspectRaw(b, s)
		})
		b.WriteByte('}')
	case '[':
		b.WriteByte('[')
		n := 0
		s.Array(func() {
			if n > 0 {
				b.WriteString(", ")
			}
			n++
			writeInspectRaw(b, s)
		})
		b.WriteByte(']')
	case '"':
		writeInspectString(b, string(s.String()))
	case 'n':
		s.Skip()
		b.WriteString("nil")
	default:
		raw := s.Raw()
		if len(raw) > 0 && (raw[0] == 't' || raw[0] == 'f') {
			b.Write(raw)
		} else {
			b.WriteString(rubyNumber(json.Number(raw)))
		}
	}
}

// writeInspectString writes String#inspect of a UTF-8 string.
func writeInspectString(b *strings.Builder, s string) {
	b.WriteByte('"')
	for i, r := range s {
		switch r {
		case '"', '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		case '\f':
			b.WriteString(`\f`)
		case '\v':
			b.WriteString(`\v`)
		case '\b':
			b.WriteString(`\b`)
		case '\a':
			b.WriteString(`\a`)
		case 0x1b:
			b.WriteString(`\e`)
		case '#':
			// "#{", "#$" and "#@" would interpolate in Ruby source.
			if n := i + 1; n < len(s) && (s[n] == '{' || s[n] == '$' || s[n] == '@') {
				b.WriteByte('\\')
			}
			b.WriteByte('#')
		default:
			switch {
			case r == utf8.RuneError && !strings.HasPrefix(s[i:], "\uFFFD"):
				fmt.Fprintf(b, `\x%02X`, s[i])
			case !rubyPrintable(r) && r > 0xffff:
				fmt.Fprintf(b, `\u{%X}`, r)
			case !rubyPrintable(r):
				fmt.Fprintf(b, `\u%04X`, r)
			default:
				b.WriteRune(r)
			}
		}
	}
	b.WriteByte('"')
}

// rubyPrintable is whether String#inspect writes r as it is: not a C0
// control character, DEL, a line or paragraph separator, nor unassigned.
func rubyPrintable(r rune) bool {
	if r < 0x20 || r == 0x7f || r == 0x2028 || r == 0x2029 {
		return false
	}
	return !unicode.Is(unassigned, r)
}

// unassigned is Unicode's category Cn.
var unassigned = unicode.Categories["Cn"]

// rubyNumber is to_s of the number Ruby's JSON parser reads from n: an
// Integer for an integer literal, a Float otherwise.
func rubyNumber(n json.Number) string {
	s := string(n)
	if isIntegerLiteral(s) {
		if s == "-0" {
			return "0"
		}
		return s
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil && !math.IsInf(f, 0) {
		return s
	}
	return rubyFloat(f)
}

func isIntegerLiteral(s string) bool {
	return !strings.ContainsAny(s, ".eE")
}

// rubyFloat is Ruby's Float#to_s: the shortest digits that read back as
// f, in fixed notation when the decimal exponent is from -4 to 15 (0.0001,
// 100000000000000.0), in scientific notation otherwise (1.0e-05, 1.0e+15).
func rubyFloat(f float64) string {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	case f == 0:
		if math.Signbit(f) {
			return "-0.0"
		}
		return "0.0"
	}
	sign := ""
	if f < 0 {
		sign, f = "-", -f
	}
	e := strconv.FormatFloat(f, 'e', -1, 64) // d.ddde±XX
	mant, exp, _ := strings.Cut(e, "e")
	digits := strings.Replace(mant, ".", "", 1)
	x, _ := strconv.Atoi(exp)
	decpt := x + 1 // digits are 0.ddd × 10^decpt
	switch {
	case decpt > 0 && decpt <= 15:
		if len(digits) <= decpt {
			return sign + digits + strings.Repeat("0", decpt-len(digits)) + ".0"
		}
		return sign + digits[:decpt] + "." + digits[decpt:]
	case decpt <= 0 && decpt > -4:
		return sign + "0." + strings.Repeat("0", -decpt) + digits
	}
	frac := digits[1:]
	if frac == "" {
		frac = "0"
	}
	return fmt.Sprintf("%s%s.%se%+03d", sign, digits[:1], frac, decpt-1)
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// Package command builds the payloads of the PuppetDB commands the farm
// sends for the nodes it serves (replace facts v5, replace catalog v9,
// store report v8) exactly as Puppet Server 7 with puppet-terminus-puppetdb
// 7.12.1 builds them for the same agent run: each payload is the one the
// terminus would post to /pdb/cmd/v1, derived from the JSON the farm keeps
// (the agent's facts and report, the catalog it serves, the node's
// exported resources) as the Ruby objects the terminus reads would give it.
//
// The functions are pure and safe for concurrent use. Input that the
// terminus would refuse, or that is not what the farm stores, gives an
// error wrapping farm.ErrInvalid that says what is wrong.
package command

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/compilefarm/compilefarm/pkg/catalog"
	"github.com/compilefarm/compilefarm/pkg/farm"
)

// Command names a PuppetDB command and the version of its payload.
type Command struct {
	Name    string // as PuppetDB names it, e.g. "replace facts"
	Version int
}

// The commands the farm sends, at the versions the terminus sends
// (Puppet::Util::Puppetdb::CommandNames).
var (
	ReplaceFacts   = Command{Name: "replace facts", Version: 5}
	ReplaceCatalog = Command{Name: "replace catalog", Version: 9}
	StoreReport    = Command{Name: "store report", Version: 8}
)

// Param is the command's name as POST /pdb/cmd/v1 takes it in its command
// parameter: "replace_facts".
func (c Command) Param() string { return strings.ReplaceAll(c.Name, " ", "_") }

func (c Command) String() string { return fmt.Sprintf("%s v%d", c.Name, c.Version) }

// WireTime is t in PuppetDB's wire format, as
// Puppet::Util::Puppetdb.to_wire_time writes it: ISO 8601 with
// milliseconds (truncated) and t's offset, "Z" for UTC.
func WireTime(t time.Time) string { return t.Format("2006-01-02T15:04:05.000Z07:00") }

// wireTimeOf is WireTime of the time Ruby's Time.parse reads from s (an
// RFC 3339 time, as agents write them): the offset as written, "Z" kept
// as "Z" and "+00:00" as "+00:00".
func wireTimeOf(s string) (string, time.Time, error) {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return "", time.Time{}, fmt.Errorf("time %q: %v", s, err)
	}
	return formatLike(t, s), t, nil
}

// formatLike writes t in the wire format with the offset written as in
// the time text s.
func formatLike(t time.Time, s string) string {
	zone := t.Format("-07:00")
	if strings.HasSuffix(s, "Z") || strings.HasSuffix(s, "z") {
		zone = "Z"
	}
	return t.Format("2006-01-02T15:04:05.000") + zone
}

// Text input. Ruby's JSON parser keeps bytes that are not UTF-8 in its
// strings; the terminus's Command then finds the payload it wrote invalid
// and, in Puppet::Util::Puppetdb::CharEncoding.coerce_to_utf8, reads the
// whole payload as US-ASCII: every byte that is not ASCII, in any string,
// becomes one U+FFFD. A document that is not UTF-8 is read here with each
// such byte kept as rawByte, and the payload made from it is then passed
// through lossy.

// rawByte stands for a byte that is not UTF-8 (a noncharacter, which no
// real input holds).
const rawByte = '\uFFFE'

// text is a JSON document as Ruby reads it, and whether the payload made
// from it must go through lossy.
func text(doc []byte) ([]byte, bool) {
	if utf8.Valid(doc) {
		return doc, false
	}
	var b bytes.Buffer
	b.Grow(len(doc) + len(doc)/4)
	for len(doc) > 0 {
		r, n := utf8.DecodeRune(doc)
		switch {
		case r == utf8.RuneError && n == 1:
			// A stray byte can only be inside a string in a document
			// Ruby accepts; \ufffe is one character there.
			b.WriteString(`\ufffe`)
		default:
			b.Write(doc[:n])
		}
		doc = doc[n:]
	}
	return b.Bytes(), true
}

// lossy is coerce_to_utf8 of a payload that was not UTF-8: every byte that
// is not ASCII becomes U+FFFD (rawByte, one byte of the input, once).
func lossy(payload []byte) []byte {
	var b bytes.Buffer
	b.Grow(len(payload))
	for len(payload) > 0 {
		r, n := utf8.DecodeRune(payload)
		switch {
		case r < utf8.RuneSelf:
			b.WriteByte(payload[0])
		case r == rawByte:
			b.WriteRune(utf8.RuneError)
		default:
			for range n {
				b.WriteRune(utf8.RuneError)
			}
		}
		payload = payload[n:]
	}
	return b.Bytes()
}

// decode reads one JSON value into v, numbers kept exact.
func decode(doc []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return fmt.Errorf("data after the JSON value")
	}
	return nil
}

// encode writes a payload as JSON (no HTML escaping, as Ruby writes it),
// through lossy when its input was not UTF-8.
func encode(payload any, isLossy bool) ([]byte, error) {
	out, err := catalog.Marshal(payload)
	if err != nil {
		return nil, err
	}
	if isLossy {
		out = lossy(out)
	}
	return out, nil
}

// invalid is an error wrapping farm.ErrInvalid.
func invalid(format string, args ...any) error {
	return fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), farm.ErrInvalid)
}

// orNull is s, or JSON null when it is empty.
func orNull(s string) any {
	if s == "" {
		return nil
	}
	return s
}

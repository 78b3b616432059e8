// Package message is the wire format of PCP, the Puppet Communications
// Protocol: it decodes and encodes the messages a PCP broker exchanges with
// pxp-agent and other clients, in v1's binary chunks and in v2's JSON text.
//
// Decoding checks everything the broker relies on before it routes a message
// (framing, the envelope's required fields, PCP URIs, the expiry timestamp,
// a size limit) and reports a failure as one of the kinds ErrVersion,
// ErrFrame, ErrTooLarge or ErrEnvelope, wrapped with a message that says
// where the input is wrong. Encoding is canonical: a decoded message encodes
// to bytes that decode to an equal Message and encode to the same bytes
// again (not always the input's bytes: JSON spacing, field order and escapes
// are normalised). The functions are safe for concurrent use.
package message

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// DefaultMaxMessageSize is the size limit of a whole encoded message when a
// Codec does not set one: 64 MiB, large enough for any PXP request or
// response (task output included) and small enough that one client cannot
// make the broker hold an unbounded buffer. pcp-broker bounds messages too;
// match its configured limit where both serve the same agents.
const DefaultMaxMessageSize = 64 << 20

// The kinds of decoding failures. Errors returned by this package wrap one of
// them; test with errors.Is.
var (
	// ErrVersion: the version byte of a v1 message is not 1.
	ErrVersion = errors.New("unsupported PCP version")
	// ErrFrame: the v1 chunks are malformed (truncated, a size beyond the
	// end, an unknown, missing, misplaced or repeated chunk), or a v2 frame
	// is not a JSON object.
	ErrFrame = errors.New("malformed PCP message")
	// ErrTooLarge: the message is larger than the codec's limit.
	ErrTooLarge = errors.New("PCP message too large")
	// ErrEnvelope: the envelope is not valid JSON, or a field is missing,
	// has the wrong JSON type, or holds a bad URI or timestamp.
	ErrEnvelope = errors.New("invalid PCP envelope")
)

// Message is one PCP message, in the shape common to v1 and v2.
//
// A v1 envelope names its recipients "targets" (a list) and always carries
// "expires"; a v2 message has at most one "target" and no expiry, and holds
// its data inline as a JSON value. The broker routes either with this one
// type and converts between versions by re-encoding.
type Message struct {
	// ID identifies the message (pxp-agent and pcp-broker use UUIDs).
	ID string
	// MessageType names the schema of the data, for example
	// "http://puppetlabs.com/associate_request".
	MessageType string
	// Sender is the PCP URI of the client or broker that sent the message.
	// Required in v1; optional in v2 (the broker fills it in).
	Sender string
	// Targets are the PCP URIs of the recipients; they may hold wildcards
	// ("pcp://*/agent"). v2 allows at most one; nil when v2 has none.
	Targets []string
	// Expires is when the message stops being deliverable (v1 only; zero
	// in v2). Decoding converts it to UTC.
	Expires time.Time
	// InReplyTo is the ID of the message this one answers, if any.
	InReplyTo string
	// DestinationReport asks the broker to tell the sender which targets
	// the message was delivered to (v1 only).
	DestinationReport bool
	// Data is the content of the v1 data chunk, or the compact JSON text of
	// the v2 "data" field. nil when the message has none; empty but not nil
	// when a v1 message has an empty data chunk (ruby-pcp-client and
	// clj-pcp-common always send one).
	Data []byte
	// Debug holds the contents of the v1 debug chunks, in order (brokers
	// append one per hop). nil when there are none; always nil in v2.
	Debug [][]byte
	// Extra holds envelope fields this package does not interpret, by name,
	// as compact JSON text, so that forwarding a message keeps them (the
	// C++ client's v1 schema, for one, knows an "in-reply-to" spelling).
	// nil when there are none.
	Extra map[string][]byte
}

// Codec decodes and encodes messages under a size limit. The zero Codec
// uses DefaultMaxMessageSize.
type Codec struct {
	// MaxMessageSize is the largest encoded message, in bytes, that the
	// codec decodes or produces. 0 means DefaultMaxMessageSize; a negative
	// value means no limit.
	MaxMessageSize int
}

func (c Codec) checkSize(version string, n int) error {
	limit := c.MaxMessageSize
	if limit == 0 {
		limit = DefaultMaxMessageSize
	}
	if limit > 0 && n > limit {
		return fmt.Errorf("pcp %s: %w: %d bytes, the limit is %d", version, ErrTooLarge, n, limit)
	}
	return nil
}

// URI is a parsed PCP URI, pcp://<common name>/<client type>.
type URI struct {
	// CommonName is the client's certificate CN; empty for the broker
	// itself ("pcp:///server"), "*" as an inventory wildcard.
	CommonName string
	// ClientType is the kind of client, such as "agent" or "controller".
	ClientType string
}

// String returns the URI in its text form.
func (u URI) String() string { return "pcp://" + u.CommonName + "/" + u.ClientType }

// ParseURI parses a PCP URI. As the specification's pattern
// ^pcp://[^/]*/[^/]+$ says, the common name may be empty but the client type
// may not, and neither may contain a slash.
func ParseURI(s string) (URI, error) {
	rest, ok := strings.CutPrefix(s, "pcp://")
	if !ok {
		return URI{}, fmt.Errorf("PCP URI %q does not start with pcp://", s)
	}
	cn, typ, ok := strings.Cut(rest, "/")
	if !ok || typ == "" || strings.Contains(typ, "/") {
		return URI{}, fmt.Errorf("PCP URI %q is not pcp://<common name>/<client type>", s)
	}
	return URI{CommonName: cn, ClientType: typ}, nil
}

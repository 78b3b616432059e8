package main

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
)

// recordedRequest is the body of a real catalog request, recorded from
// puppet agent 7.23.0 (see /work/shared/puppet-protocol): a form with
// ~120 facts, the facts parameter URL-encoded twice.
//
//go:embed testdata/catalog-request-agent1.form-urlencoded.txt
var recordedRequest []byte

// The recording's node identity, rewritten per synthetic node.
const (
	recordedName  = "agent1.example.test"
	recordedShort = "agent1"
	recordedHost  = "vm"
)

// agentEscape percent-encodes s as the Puppet agent does for the facts
// parameter (Puppet::Util.uri_query_encode: CGI.escape with "+" turned into
// "%20"): every byte but ASCII letters, digits and "_.-~" becomes %XX with
// upper-case hex. Encoding is byte by byte, so escape(a+b) = escape(a)+escape(b).
func agentEscape(s string) string {
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	b.Grow(len(s) * 2)
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '.' || c == '-' || c == '~' {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hex[c>>4])
		b.WriteByte(hex[c&15])
	}
	return b.String()
}

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

// formField is one name=value pair of the recorded form, value still encoded.
type formField struct{ name, value string }

func splitForm(body string) ([]formField, error) {
	var out []formField
	for _, f := range strings.Split(strings.TrimRight(body, "\r\n"), "&") {
		name, value, ok := strings.Cut(f, "=")
		if !ok {
			return nil, fmt.Errorf("form field %.40q has no '='", f)
		}
		out = append(out, formField{name, value})
	}
	return out, nil
}

// decodeFacts returns the facts document (JSON) of a recorded form body.
func decodeFacts(body []byte) (string, error) {
	fields, err := splitForm(string(body))
	if err != nil {
		return "", err
	}
	for _, f := range fields {
		if f.name != "facts" {
			continue
		}
		once, err := url.QueryUnescape(f.value)
		if err != nil {
			return "", fmt.Errorf("facts: first decoding: %w", err)
		}
		doc, err := url.PathUnescape(once)
		if err != nil {
			return "", fmt.Errorf("facts: second decoding: %w", err)
		}
		return doc, nil
	}
	return "", fmt.Errorf("the request body has no facts parameter")
}

// renameFacts rewrites the recorded facts document for node: its name, the
// certname-like facts (clientcert, fqdn, hostname) and paths that carry the
// recorded node's short name. The document keeps the agent's exact bytes
// otherwise (key order, number formatting).
func renameFacts(doc, node string) (string, error) {
	short, _, _ := strings.Cut(node, ".")
	r := strings.NewReplacer(
		`"`+recordedName+`"`, `"`+node+`"`,
		`"fqdn":"`+recordedHost+`"`, `"fqdn":"`+node+`"`,
		`"hostname":"`+recordedHost+`"`, `"hostname":"`+short+`"`,
		"/"+recordedShort+"/", "/"+short+"/",
	)
	out := r.Replace(doc)
	var d struct {
		Name   string `json:"name"`
		Values struct {
			Clientcert string `json:"clientcert"`
			FQDN       string `json:"fqdn"`
			Networking struct {
				FQDN string `json:"fqdn"`
			} `json:"networking"`
		} `json:"values"`
		Timestamp string `json:"timestamp"`
	}
	if err := json.Unmarshal([]byte(out), &d); err != nil {
		return "", fmt.Errorf("rewritten facts for %s are not JSON: %w", node, err)
	}
	for what, got := range map[string]string{"name": d.Name, "clientcert": d.Values.Clientcert,
		"fqdn": d.Values.FQDN, "networking.fqdn": d.Values.Networking.FQDN} {
		if got != node {
			return "", fmt.Errorf("rewritten facts for %s: %s is %q", node, what, got)
		}
	}
	return out, nil
}

// newBodyTemplate builds node's catalog request from the recorded one.
func newBodyTemplate(recorded []byte, node, environment string) (*bodyTemplate, error) {
	fields, err := splitForm(string(recorded))
	if err != nil {
		return nil, err
	}
	doc, err := decodeFacts(recorded)
	if err != nil {
		return nil, err
	}
	doc, err = renameFacts(doc, node)
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
		b.WriteString(f.name)
		b.WriteByte('=')
		switch f.name {
		case "facts":
			pre := agentEscape(agentEscape(doc[:fracAt]))
			t.stampAt = b.Len() + len(pre)
			b.WriteString(pre)
			b.WriteString(agentEscape(agentEscape(doc[fracAt:])))
		case "environment", "configured_environment":
			b.WriteString(agentEscape(environment))
		case "transaction_uuid":
			if len(f.value) != 36 {
				return nil, fmt.Errorf("transaction_uuid %q is not a UUID", f.value)
			}
			t.uuidAt = b.Len()
			b.WriteString(f.value)
		default:
			b.WriteString(f.value)
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

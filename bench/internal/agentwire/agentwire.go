// Package agentwire is what a real Puppet 7 agent (puppet-agent 7.23.0 on
// Debian 12, recorded in /work/shared/puppet-protocol) puts on the wire,
// for the tools that impersonate agents (bench/loadgen, bench/agentsim):
// its headers, its percent-encoding, and its recorded catalog request with
// ~120 facts, rewritten for another certname.
package agentwire

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
)

// The headers puppet agent 7.23.0 sends.
const (
	Version        = "7.23.0"                                          // X-Puppet-Version
	UserAgent      = "Puppet/7.23.0 Ruby/3.1.2-p20 (x86_64-linux-gnu)" // User-Agent
	AcceptEncoding = "gzip;q=1.0,deflate;q=0.6,identity;q=0.3"         // Accept-Encoding, on every request
	// AcceptCatalog is the Accept of a catalog request.
	AcceptCatalog = "application/vnd.puppet.rich+json, application/json, text/pson"
	// AcceptJSON is the Accept of the node, file metadata and report requests.
	AcceptJSON = "application/json, text/pson"
)

// RecordedCatalogRequest is the body of a real catalog request, recorded
// from puppet agent 7.23.0: a form with ~120 facts, the facts parameter
// URL-encoded twice.
//
//go:embed testdata/catalog-request-agent1.form-urlencoded.txt
var RecordedCatalogRequest []byte

// The recorded agent's identity, which RenameFacts rewrites.
const (
	RecordedName  = "agent1.example.test" // certname
	recordedShort = "agent1"
	recordedHost  = "vm" // the recorded machine's fqdn and hostname facts
)

// Escape percent-encodes s as the Puppet agent does for query and form
// values (Puppet::Util.uri_query_encode: CGI.escape with "+" turned into
// "%20"): every byte but ASCII letters, digits and "_.-~" becomes %XX with
// upper-case hex. Encoding is byte by byte, so Escape(a+b) = Escape(a)+Escape(b).
func Escape(s string) string {
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

// FormField is one name=value pair of a form body, the value still encoded.
type FormField struct{ Name, Value string }

// SplitForm splits a form body into its fields, in order.
func SplitForm(body string) ([]FormField, error) {
	var out []FormField
	for _, f := range strings.Split(strings.TrimRight(body, "\r\n"), "&") {
		name, value, ok := strings.Cut(f, "=")
		if !ok {
			return nil, fmt.Errorf("form field %.40q has no '='", f)
		}
		out = append(out, FormField{name, value})
	}
	return out, nil
}

// DecodeFacts returns the facts document (JSON) of a catalog request body,
// decoding the facts parameter twice as the agent encoded it.
func DecodeFacts(body []byte) (string, error) {
	fields, err := SplitForm(string(body))
	if err != nil {
		return "", err
	}
	for _, f := range fields {
		if f.Name != "facts" {
			continue
		}
		once, err := url.QueryUnescape(f.Value)
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

// Renamer rewrites JSON text of the recorded agent's facts (or anything
// made from them) for node: the certname, the certname-like facts
// (clientcert, fqdn, hostname) and paths that carry the recorded node's
// short name. RenameFacts is the checked form.
func Renamer(node string) *strings.Replacer {
	short, _, _ := strings.Cut(node, ".")
	return strings.NewReplacer(
		`"`+RecordedName+`"`, `"`+node+`"`,
		`"fqdn":"`+recordedHost+`"`, `"fqdn":"`+node+`"`,
		`"hostname":"`+recordedHost+`"`, `"hostname":"`+short+`"`,
		"/"+recordedShort+"/", "/"+short+"/",
	)
}

// RenameFacts rewrites the recorded facts document doc for node (see
// Renamer) and checks the result names node everywhere it must. The
// document keeps the agent's exact bytes otherwise (key order, number
// formatting).
func RenameFacts(doc, node string) (string, error) {
	out := Renamer(node).Replace(doc)
	var d struct {
		Name   string `json:"name"`
		Values struct {
			Clientcert string `json:"clientcert"`
			FQDN       string `json:"fqdn"`
			Networking struct {
				FQDN string `json:"fqdn"`
			} `json:"networking"`
		} `json:"values"`
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

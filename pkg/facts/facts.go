// Package facts reads the fact documents Puppet agents send (the form-encoded
// catalog request and PUT /puppet/v3/facts) and computes the digests the farm
// uses to decide whether a node needs a new compile.
package facts

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"

	"github.com/compilefarm/compilefarm/pkg/farm"
)

// Document is Puppet's facts object: {name, values, timestamp, expiration}.
type Document struct {
	Name       string         `json:"name"`
	Values     map[string]any `json:"values"`
	Timestamp  string         `json:"timestamp,omitempty"`
	Expiration string         `json:"expiration,omitempty"`
}

// Decode parses a facts document, keeping numbers exact (json.Number) so
// that 1 and 1.0 stay different facts. The document's name must be certname.
func Decode(certname string, doc []byte) (Document, error) {
	var d Document
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	if err := dec.Decode(&d); err != nil {
		return Document{}, fmt.Errorf("facts for %s are not a JSON facts object: %v: %w", certname, err, farm.ErrInvalid)
	}
	if dec.More() {
		return Document{}, fmt.Errorf("facts for %s have trailing data after the JSON object: %w", certname, farm.ErrInvalid)
	}
	if d.Values == nil {
		return Document{}, fmt.Errorf("facts for %s have no \"values\" object: %w", certname, farm.ErrInvalid)
	}
	if d.Name != "" && d.Name != certname {
		return Document{}, fmt.Errorf("facts name %q does not match node %q: %w", d.Name, certname, farm.ErrInvalid)
	}
	d.Name = certname
	return d, nil
}

// CatalogRequest is what a POST /puppet/v3/catalog/<name> form carries.
type CatalogRequest struct {
	// Facts is the facts document (JSON), decoded from its double URL encoding.
	Facts           []byte
	Environment     string
	TransactionUUID string
	JobUUID         string
	StaticCatalog   bool
}

// RawFactsParam returns the still-encoded value of the "facts" parameter of
// a form body without parsing the rest of the form. Its digest is a cheap
// identity for "the same facts as last time".
func RawFactsParam(body []byte) ([]byte, bool) { return RawFormParam(body, "facts") }

// RawFormParam returns the still-encoded value of the first key parameter
// of a form body (such as the catalog request's "environment", to
// url.QueryUnescape) without parsing the rest of the form.
func RawFormParam(body []byte, key string) ([]byte, bool) {
	prefix := []byte(key + "=")
	for len(body) > 0 {
		var field []byte
		if i := bytes.IndexByte(body, '&'); i >= 0 {
			field, body = body[:i], body[i+1:]
		} else {
			field, body = body, nil
		}
		if v, ok := bytes.CutPrefix(field, prefix); ok {
			return v, true
		}
	}
	return nil, false
}

// ParseCatalogForm decodes a catalog request form. Only JSON (and PSON, which
// is JSON for these documents) facts are accepted.
func ParseCatalogForm(body []byte) (CatalogRequest, error) {
	form, err := url.ParseQuery(string(body))
	if err != nil {
		return CatalogRequest{}, fmt.Errorf("catalog request body is not application/x-www-form-urlencoded: %v: %w", err, farm.ErrInvalid)
	}
	return FromForm(form)
}

// FromForm reads a catalog request from already parsed form values.
func FromForm(form url.Values) (CatalogRequest, error) {
	req := CatalogRequest{
		Environment:     form.Get("environment"),
		TransactionUUID: form.Get("transaction_uuid"),
		JobUUID:         form.Get("job_uuid"),
		StaticCatalog:   form.Get("static_catalog") == "true",
	}
	raw, ok := form["facts"]
	if !ok || len(raw) == 0 {
		return req, nil
	}
	switch f := form.Get("facts_format"); f {
	case "application/json", "pson", "text/pson", "json", "":
	default:
		return CatalogRequest{}, fmt.Errorf("facts_format %q is not supported (send application/json): %w", f, farm.ErrInvalid)
	}
	doc, err := url.QueryUnescape(raw[0])
	if err != nil {
		return CatalogRequest{}, fmt.Errorf("facts parameter is not URL-encoded JSON: %v: %w", err, farm.ErrInvalid)
	}
	req.Facts = []byte(doc)
	return req, nil
}

// DefaultVolatile lists facts that change on every run without changing what
// a catalog should be (uptime, free memory, load). Paths are dotted; a "*"
// segment matches any key. Issue 3's used-fact tracking supersedes this list
// for catalogs compiled with a record of the facts they read.
var DefaultVolatile = []string{
	"uptime", "uptime_seconds", "uptime_hours", "uptime_days", "system_uptime",
	"memoryfree", "memoryfree_mb", "swapfree", "swapfree_mb",
	"memory.*.available", "memory.*.available_bytes", "memory.*.used",
	"memory.*.used_bytes", "memory.*.capacity",
	"mountpoints.*.available", "mountpoints.*.available_bytes", "mountpoints.*.used",
	"mountpoints.*.used_bytes", "mountpoints.*.capacity",
	"load_averages", "_timestamp", "clientnoop",
}

// Filter removes volatile fact paths from fact values.
type Filter struct {
	paths [][]string
}

// NewFilter builds a filter from dotted paths such as "memory.*.available".
func NewFilter(paths []string) (*Filter, error) {
	f := &Filter{}
	for _, p := range paths {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		segs := strings.Split(p, ".")
		for _, s := range segs {
			if s == "" {
				return nil, fmt.Errorf("volatile fact path %q has an empty segment: %w", p, farm.ErrInvalid)
			}
		}
		f.paths = append(f.paths, segs)
	}
	return f, nil
}

// Relevant returns a copy of values without the volatile paths. Only the maps
// on a removed path are copied; the rest is shared with values.
func (f *Filter) Relevant(values map[string]any) map[string]any {
	out := values
	for _, p := range f.paths {
		out, _ = without(out, p)
	}
	return out
}

// without returns m with path removed and whether anything was removed; maps
// along the path are copied only when something is.
func without(m map[string]any, path []string) (map[string]any, bool) {
	key := path[0]
	if len(path) == 1 {
		if key == "*" {
			return map[string]any{}, len(m) > 0
		}
		if _, ok := m[key]; !ok {
			return m, false
		}
		c := copyMap(m)
		delete(c, key)
		return c, true
	}
	var c map[string]any
	visit := func(k string) {
		sub, ok := m[k].(map[string]any)
		if !ok {
			return
		}
		nsub, changed := without(sub, path[1:])
		if !changed {
			return
		}
		if c == nil {
			c = copyMap(m)
		}
		c[k] = nsub
	}
	if key == "*" {
		for k := range m {
			visit(k)
		}
	} else {
		visit(key)
	}
	if c == nil {
		return m, false
	}
	return c, true
}

func copyMap(m map[string]any) map[string]any {
	c := make(map[string]any, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

// Canonical returns deterministic JSON for fact values: keys sorted at every
// level (encoding/json sorts map keys), numbers as sent.
func Canonical(values map[string]any) ([]byte, error) {
	b, err := json.Marshal(values)
	if err != nil {
		return nil, fmt.Errorf("canonical facts: %w", err)
	}
	return b, nil
}

// RelevantDigest is the digest of the canonical JSON of the non-volatile
// facts: equal digests mean no fact that matters changed.
func (f *Filter) RelevantDigest(values map[string]any) (farm.Digest, error) {
	b, err := Canonical(f.Relevant(values))
	if err != nil {
		return "", err
	}
	return farm.DigestOf(b), nil
}

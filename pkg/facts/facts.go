// Package facts reads the fact documents Puppet agents send (the form-encoded
// catalog request and PUT /puppet/v3/facts) and computes the digests the farm
// uses to decide whether a node needs a new compile.
package facts

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"strings"

	"github.com/compilefarm/compilefarm/internal/jsonscan"
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
	return d.forNode(certname)
}

// Selection names the parts of a facts document a reader needs: fact
// paths (as Read.Path), each wanted whole. The zero value selects
// nothing; Add selects more.
type Selection struct {
	whole    bool
	children map[string]*Selection
}

// Add selects the value at path (from the top of the values; an empty
// path selects them all) and everything under it.
func (s *Selection) Add(path []string) {
	for _, k := range path {
		if s.whole {
			return
		}
		if s.children == nil {
			s.children = map[string]*Selection{}
		}
		c := s.children[k]
		if c == nil {
			c = &Selection{}
			s.children[k] = c
		}
		s = c
	}
	s.whole, s.children = true, nil
}

// DecodeOnly is Decode for a caller that reads only the selected facts,
// such as those the node's catalog read (the intake's decision on a fresh
// upload): the values it returns hold every selected path that the
// document has, as Decode decodes it (Lookup finds the same there), and
// of the hashes on the way only the keys on selected paths. The rest is
// skipped without being built: it is checked for structure only
// (jsonscan), so DecodeOnly accepts documents Decode refuses, and a
// document that is stored must be decoded by Decode. Its other members
// and checks (an object with a values object, the name) are Decode's.
func DecodeOnly(certname string, doc []byte, sel *Selection) (Document, error) {
	var d Document
	var err error
	keep := func(e error) {
		if err == nil {
			err = e
		}
	}
	s := jsonscan.New(doc)
	s.Object(func(key []byte) {
		// Members are matched as encoding/json matches them to Document's
		// fields: ignoring case.
		switch member := strings.ToLower(string(key)); member {
		case "values":
			if s.Peek() == 'n' {
				s.Skip()
				d.Values = nil
				return
			}
			if d.Values == nil {
				d.Values = map[string]any{}
			}
			switch {
			case s.Peek() != '{':
				s.Skip()
				keep(errors.New("values is not an object"))
			case sel.whole:
				decodeValue(s, &d.Values, keep)
			default:
				decodeSelected(s, sel, d.Values, keep)
			}
		case "name", "timestamp", "expiration":
			if raw := s.Raw(); raw != nil {
				keep(d.setHeader(member, raw))
			}
		default:
			s.Skip()
		}
	})
	s.End()
	if s.Err() != nil {
		err = s.Err()
	}
	if err != nil {
		return Document{}, fmt.Errorf("facts for %s are not a JSON facts object: %v: %w", certname, err, farm.ErrInvalid)
	}
	return d.forNode(certname)
}

// setHeader sets the member (name, timestamp or expiration) of d that
// the JSON value raw gives, as encoding/json would decode it into d.
func (d *Document) setHeader(member string, raw []byte) error {
	field := &d.Name
	switch member {
	case "timestamp":
		field = &d.Timestamp
	case "expiration":
		field = &d.Expiration
	}
	return json.Unmarshal(raw, field)
}

// decodeSelected reads the object that comes next into m: the members sel
// selects, decoded whole at the end of their path, as objects of their
// selected members on the way (any other value there whole), the others
// skipped.
func decodeSelected(s *jsonscan.Scanner, sel *Selection, m map[string]any, fail func(error)) {
	s.Object(func(key []byte) {
		c := sel.children[string(key)]
		switch {
		case c == nil:
			s.Skip()
		case !c.whole && s.Peek() == '{':
			sub := map[string]any{}
			decodeSelected(s, c, sub, fail)
			m[string(key)] = sub
		default:
			var v any
			decodeValue(s, &v, fail)
			m[string(key)] = v
		}
	})
}

// decodeValue decodes the next value into v as Decode does (numbers kept
// exact).
func decodeValue(s *jsonscan.Scanner, v any, fail func(error)) {
	raw := s.Raw()
	if raw == nil {
		return // s.Err says why
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	err := dec.Decode(v)
	if err == nil && dec.InputOffset() != int64(len(raw)) {
		err = fmt.Errorf("invalid value %.40s", raw)
	}
	if err != nil {
		fail(err)
	}
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

// FormValue returns the value of the first key parameter of a form body
// (such as a catalog request's "environment"), unescaped, without parsing
// the rest of the form: "" when it has none or its value is not
// URL-encoded.
func FormValue(body []byte, key string) string {
	raw, ok := rawFormParam(body, key)
	if !ok {
		return ""
	}
	v, err := url.QueryUnescape(string(raw))
	if err != nil {
		return ""
	}
	return v
}

// rawFormParam returns the still-encoded value of the first key parameter
// of a form body.
func rawFormParam(body []byte, key string) ([]byte, bool) {
	start, end, ok := formParam(body, key)
	return body[start:end], ok
}

// formParam returns where the value of the first key parameter of a form
// body starts and ends.
func formParam(body []byte, key string) (start, end int, ok bool) {
	for i := 0; i < len(body); {
		field := body[i:]
		if j := bytes.IndexByte(field, '&'); j >= 0 {
			field = field[:j]
		}
		if len(field) > len(key) && field[len(key)] == '=' && string(field[:len(key)]) == key {
			return i + len(key) + 1, i + len(field), true
		}
		i += len(field) + 1
	}
	return 0, 0, false
}

// ParseCatalogForm decodes a catalog request form. Only JSON (and PSON, which
// is JSON for these documents) facts are accepted. It reads the form as
// url.ParseQuery and FromForm do, but the facts, nearly all of the form
// (tens of KB, URL-encoded twice), are unescaped in one pass instead of
// being copied through two.
func ParseCatalogForm(body []byte) (CatalogRequest, error) {
	start, end, ok := formParam(body, "facts")
	if !ok {
		return parseForm(body)
	}
	// The rest of the form, without the facts: a copy of a few hundred
	// bytes, parsed the usual way.
	rest := make([]byte, 0, len(body)-(end-start))
	rest = append(rest, body[:start-len("facts=")]...)
	rest = append(rest, body[end:]...)
	raw := body[start:end]
	doc, ok := unescapeTwice(raw)
	form, err := url.ParseQuery(string(rest))
	if _, more := form["facts"]; !ok || err != nil || more {
		// A bad escape, or another facts parameter (such as one whose
		// name is escaped) before this one: as url.ParseQuery and
		// FromForm read it and say what is wrong with it.
		return parseForm(body)
	}
	req := formFields(form)
	if err := checkFactsFormat(form); err != nil {
		return CatalogRequest{}, err
	}
	req.Facts = doc
	return req, nil
}

// parseForm decodes a catalog request form with url.ParseQuery.
func parseForm(body []byte) (CatalogRequest, error) {
	form, err := url.ParseQuery(string(body))
	if err != nil {
		return CatalogRequest{}, fmt.Errorf("catalog request body is not application/x-www-form-urlencoded: %v: %w", err, farm.ErrInvalid)
	}
	return FromForm(form)
}

// unescapeTwice decodes the value of a form parameter that is itself a
// URL-encoded document: url.QueryUnescape applied twice, in one pass and
// one allocation. It returns false for a bad escape at either level, and
// for a ';' (which url.ParseQuery refuses in a form's fields).
func unescapeTwice(raw []byte) ([]byte, bool) {
	out := make([]byte, len(raw))
	n := 0
	inner := 0 // the inner level: 0, or 1 or 2 after its '%' and 0 or 1 of its digits
	var hi byte
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		if inner == 0 {
			if !formSpecial[c] {
				out[n] = c
				n++
				continue
			}
			// Most of a document's punctuation: %25 (the inner '%') and
			// the inner escape's two digits, plain at the outer level.
			if c == '%' && i+4 < len(raw) && raw[i+1] == '2' && raw[i+2] == '5' {
				if h, l := hexValue[raw[i+3]], hexValue[raw[i+4]]; h >= 0 && l >= 0 {
					out[n] = byte(h<<4 | l)
					n++
					i += 4
					continue
				}
			}
		}
		switch c {
		case '%':
			if i+2 >= len(raw) || hexValue[raw[i+1]] < 0 || hexValue[raw[i+2]] < 0 {
				return nil, false
			}
			c = byte(hexValue[raw[i+1]]<<4 | hexValue[raw[i+2]])
			i += 2
		case '+':
			c = ' '
		case ';':
			return nil, false
		}
		switch inner {
		case 0:
			switch c {
			case '%':
				inner = 1
			case '+':
				out[n] = ' '
				n++
			default:
				out[n] = c
				n++
			}
		case 1:
			if hexValue[c] < 0 {
				return nil, false
			}
			hi, inner = byte(hexValue[c]), 2
		case 2:
			if hexValue[c] < 0 {
				return nil, false
			}
			out[n], inner = hi<<4|byte(hexValue[c]), 0
			n++
		}
	}
	return out[:n], inner == 0
}

// formSpecial are the bytes of an encoded form value that do not mean
// themselves.
var formSpecial = [256]bool{'%': true, '+': true, ';': true}

// hexValue is the value of a hex digit, -1 for other bytes.
var hexValue = func() (t [256]int8) {
	for i := range t {
		t[i] = -1
	}
	for i, c := range "0123456789abcdef" {
		t[c] = int8(i)
	}
	for i, c := range "ABCDEF" {
		t[c] = int8(10 + i)
	}
	return t
}()

// FromForm reads a catalog request from already parsed form values.
func FromForm(form url.Values) (CatalogRequest, error) {
	req := formFields(form)
	raw, ok := form["facts"]
	if !ok || len(raw) == 0 {
		return req, nil
	}
	if err := checkFactsFormat(form); err != nil {
		return CatalogRequest{}, err
	}
	doc, err := url.QueryUnescape(raw[0])
	if err != nil {
		return CatalogRequest{}, fmt.Errorf("facts parameter is not URL-encoded JSON: %v: %w", err, farm.ErrInvalid)
	}
	req.Facts = []byte(doc)
	return req, nil
}

// formFields are the catalog request's fields other than the facts.
func formFields(form url.Values) CatalogRequest {
	return CatalogRequest{
		Environment:     form.Get("environment"),
		TransactionUUID: form.Get("transaction_uuid"),
		JobUUID:         form.Get("job_uuid"),
		StaticCatalog:   form.Get("static_catalog") == "true",
	}
}

// checkFactsFormat refuses facts in a format other than JSON (or PSON).
func checkFactsFormat(form url.Values) error {
	switch f := form.Get("facts_format"); f {
	case "application/json", "pson", "text/pson", "json", "":
		return nil
	default:
		return fmt.Errorf("facts_format %q is not supported (send application/json): %w", f, farm.ErrInvalid)
	}
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
		c := maps.Clone(m)
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
			c = maps.Clone(m)
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

// forNode checks that a decoded document has values and names certname
// (or no one), and returns it named certname.
func (d Document) forNode(certname string) (Document, error) {
	if d.Values == nil {
		return Document{}, fmt.Errorf("facts for %s have no \"values\" object: %w", certname, farm.ErrInvalid)
	}
	if d.Name != "" && d.Name != certname {
		return Document{}, fmt.Errorf("facts name %q does not match node %q: %w", d.Name, certname, farm.ErrInvalid)
	}
	d.Name = certname
	return d, nil
}

// Package catalog reads and writes Puppet's catalog JSON (catalog_format 2,
// Puppet::Resource::Catalog#to_data_hash) and turns a compiled catalog into a
// static one, as Puppet Server does when an agent asks for a static catalog
// and the environment has a code_id: File resources sourced from
// puppet:///modules/... get their file metadata inlined (metadata and
// recursive_metadata) with content URIs that the agent fetches through
// static_file_content, pinned to the code_id.
//
// The types keep what they do not interpret: resource parameters stay raw
// JSON and unknown keys of the catalog, its resources and edges are written
// back unchanged, so parsing and marshalling a catalog loses nothing. Output
// is deterministic: known keys in Puppet's order, unknown keys after them in
// sorted order, no HTML escaping (as Ruby's JSON writes it).
package catalog

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/compilefarm/compilefarm/pkg/farm"
)

// Catalog is one Puppet catalog.
type Catalog struct {
	Tags        []string
	Name        string
	Version     json.RawMessage // a number or a string (config_version); kept as sent
	CodeID      string          // empty is written as null
	CatalogUUID string
	Format      int // catalog_format
	Environment string
	Resources   []Resource
	Edges       []Edge
	Classes     []string
	// Metadata and RecursiveMetadata are a static catalog's inlined file
	// metadata, kept as raw JSON; see FileMetadata and RecursiveFileMetadata
	// to read them. Empty means absent.
	Metadata          json.RawMessage
	RecursiveMetadata json.RawMessage
	// Extra holds keys this package does not know, written back as they came.
	Extra map[string]json.RawMessage
}

// Resource is one resource of a catalog.
type Resource struct {
	Type     string // capitalised, e.g. "File", "Apache::Vhost"
	Title    string
	Tags     []string
	File     string // manifest that declared it; may be empty
	Line     int    // 0 when unknown
	Exported bool
	Kind     string // e.g. "compilable_type", "defined_type", "unknown"
	// Parameters is the raw JSON object of the resource's parameters (rich
	// data left as sent); use Param to read one.
	Parameters          json.RawMessage
	SensitiveParameters []string
	ExtParameters       json.RawMessage
	// Extra holds keys this package does not know, written back as they came.
	Extra map[string]json.RawMessage
}

// Edge is a containment edge: Source contains Target (resource references).
type Edge struct {
	Source string
	Target string
	Extra  map[string]json.RawMessage
}

// Parse decodes catalog JSON. Malformed JSON or a known key of the wrong type
// gives an error wrapping farm.ErrInvalid.
func Parse(data []byte) (*Catalog, error) {
	var c Catalog
	if err := json.Unmarshal(data, &c); err != nil {
		return nil, fmt.Errorf("parsing catalog: %v: %w", err, farm.ErrInvalid)
	}
	return &c, nil
}

// Marshal encodes the catalog; see the package doc for the key order.
func (c *Catalog) Marshal() ([]byte, error) {
	b, err := c.MarshalJSON()
	if err != nil {
		return nil, fmt.Errorf("encoding catalog %s: %w", c.Name, err)
	}
	return b, nil
}

// Ref returns the resource reference, e.g. "File[/etc/motd]".
func (r *Resource) Ref() string { return r.Type + "[" + r.Title + "]" }

// Param returns the raw JSON of parameter name and whether it is set (a JSON
// null counts as not set, as Puppet drops undef parameters).
func (r *Resource) Param(name string) (json.RawMessage, bool) { return r.params().get(name) }

// StringParam returns parameter name when it is a JSON string.
func (r *Resource) StringParam(name string) (string, bool) { return r.params().str(name) }

// params are a resource's parameters by name; decode them once with
// Resource.params to read several.
type params map[string]json.RawMessage

// params decodes the resource's parameters (nil when it has none or they
// are not a JSON object).
func (r *Resource) params() params {
	if len(r.Parameters) == 0 {
		return nil
	}
	var p params
	if json.Unmarshal(r.Parameters, &p) != nil {
		return nil
	}
	return p
}

// get is Resource.Param.
func (p params) get(name string) (json.RawMessage, bool) {
	v, ok := p[name]
	if !ok || string(v) == "null" {
		return nil, false
	}
	return v, true
}

// str is Resource.StringParam.
func (p params) str(name string) (string, bool) {
	v, ok := p.get(name)
	if !ok {
		return "", false
	}
	var s string
	if json.Unmarshal(v, &s) != nil {
		return "", false
	}
	return s, true
}

// Resource returns the resource with the given type and title, or nil.
func (c *Catalog) Resource(typ, title string) *Resource {
	for i := range c.Resources {
		if c.Resources[i].Type == typ && c.Resources[i].Title == title {
			return &c.Resources[i]
		}
	}
	return nil
}

// FileMetadata decodes the inlined single-file metadata, keyed by File title.
func (c *Catalog) FileMetadata() (map[string]FileMetadata, error) {
	out := map[string]FileMetadata{}
	if len(c.Metadata) == 0 {
		return out, nil
	}
	if err := json.Unmarshal(c.Metadata, &out); err != nil {
		return nil, fmt.Errorf("decoding catalog metadata: %v: %w", err, farm.ErrInvalid)
	}
	return out, nil
}

// RecursiveFileMetadata decodes the inlined recursive metadata, keyed by File
// title and then by source.
func (c *Catalog) RecursiveFileMetadata() (map[string]map[string][]FileMetadata, error) {
	out := map[string]map[string][]FileMetadata{}
	if len(c.RecursiveMetadata) == 0 {
		return out, nil
	}
	if err := json.Unmarshal(c.RecursiveMetadata, &out); err != nil {
		return nil, fmt.Errorf("decoding catalog recursive_metadata: %v: %w", err, farm.ErrInvalid)
	}
	return out, nil
}

// Summary is what the farm shows about a catalog.
type Summary struct {
	Name          string         `json:"name"`
	Environment   string         `json:"environment"`
	Version       string         `json:"version"` // the raw version, quotes removed
	CodeID        string         `json:"code_id,omitempty"`
	CatalogUUID   string         `json:"catalog_uuid,omitempty"`
	Resources     int            `json:"resources"`
	Types         map[string]int `json:"types"` // resources per type
	Classes       []string       `json:"classes"`
	Edges         int            `json:"edges"`
	Static        bool           `json:"static"`         // has inlined metadata
	InlinedFiles  int            `json:"inlined_files"`  // File resources with metadata
	InlinedTrees  int            `json:"inlined_trees"`  // File resources with recursive metadata
	ExportedCount int            `json:"exported_count"` // exported resources
}

// Summary summarises the catalog.
func (c *Catalog) Summary() Summary {
	s := Summary{
		Name: c.Name, Environment: c.Environment, CodeID: c.CodeID, CatalogUUID: c.CatalogUUID,
		Version: strings.Trim(string(c.Version), `"`), Resources: len(c.Resources),
		Types: map[string]int{}, Classes: append([]string{}, c.Classes...), Edges: len(c.Edges),
	}
	for i := range c.Resources {
		s.Types[c.Resources[i].Type]++
		if c.Resources[i].Exported {
			s.ExportedCount++
		}
	}
	var md map[string]json.RawMessage
	if json.Unmarshal(c.Metadata, &md) == nil {
		s.InlinedFiles = len(md)
	}
	var rmd map[string]json.RawMessage
	if json.Unmarshal(c.RecursiveMetadata, &rmd) == nil {
		s.InlinedTrees = len(rmd)
	}
	s.Static = s.InlinedFiles+s.InlinedTrees > 0
	return s
}

// Summarize parses catalog JSON and summarises it.
func Summarize(data []byte) (Summary, error) {
	c, err := Parse(data)
	if err != nil {
		return Summary{}, err
	}
	return c.Summary(), nil
}

// ---- JSON encoding and decoding ----

// Marshal encodes v as Puppet writes JSON: like json.Marshal but without
// HTML escaping (so <, > and & stay as they are) and without the trailing
// newline of json.Encoder.
func Marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// objectWriter writes a JSON object key by key.
type objectWriter struct {
	buf bytes.Buffer
	n   int
	err error
}

func (w *objectWriter) field(key string, v any) {
	if w.err != nil {
		return
	}
	var b []byte
	switch x := v.(type) {
	case json.RawMessage:
		if len(x) == 0 {
			b = []byte("null")
		} else {
			var c bytes.Buffer
			if w.err = json.Compact(&c, x); w.err != nil {
				w.err = fmt.Errorf("key %q: %w", key, w.err)
				return
			}
			b = c.Bytes()
		}
	default:
		b, w.err = Marshal(v)
		if w.err != nil {
			w.err = fmt.Errorf("key %q: %w", key, w.err)
			return
		}
	}
	if w.n == 0 {
		w.buf.WriteByte('{')
	} else {
		w.buf.WriteByte(',')
	}
	w.n++
	k, _ := Marshal(key)
	w.buf.Write(k)
	w.buf.WriteByte(':')
	w.buf.Write(b)
}

func (w *objectWriter) extra(m map[string]json.RawMessage) {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		w.field(k, m[k])
	}
}

func (w *objectWriter) bytes() ([]byte, error) {
	if w.err != nil {
		return nil, w.err
	}
	if w.n == 0 {
		w.buf.WriteByte('{')
	}
	w.buf.WriteByte('}')
	return w.buf.Bytes(), nil
}

// nonNil is s, or an empty slice when s is nil: [] in JSON, not null.
func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// MarshalJSON writes the catalog in Puppet's key order.
func (c Catalog) MarshalJSON() ([]byte, error) {
	var w objectWriter
	w.field("tags", nonNil(c.Tags))
	w.field("name", c.Name)
	w.field("version", c.Version)
	if c.CodeID == "" {
		w.field("code_id", nil)
	} else {
		w.field("code_id", c.CodeID)
	}
	if c.CatalogUUID != "" {
		w.field("catalog_uuid", c.CatalogUUID)
	}
	if c.Format != 0 {
		w.field("catalog_format", c.Format)
	}
	w.field("environment", c.Environment)
	w.field("resources", nonNil(c.Resources))
	w.field("edges", nonNil(c.Edges))
	w.field("classes", nonNil(c.Classes))
	if len(c.Metadata) > 0 {
		w.field("metadata", c.Metadata)
	}
	if len(c.RecursiveMetadata) > 0 {
		w.field("recursive_metadata", c.RecursiveMetadata)
	}
	w.extra(c.Extra)
	return w.bytes()
}

// splitObject decodes a JSON object into its keys; it fails on anything else.
func splitObject(what string, b []byte) (map[string]json.RawMessage, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	if m == nil {
		return nil, fmt.Errorf("%s: null is not an object", what)
	}
	return m, nil
}

// objectReader reads a JSON object key by key, the counterpart of
// objectWriter: each key read is removed, so what is left at the end are
// the unknown keys. It keeps the first error.
type objectReader struct {
	m   map[string]json.RawMessage
	err error
}

func readObject(what string, b []byte) (*objectReader, error) {
	m, err := splitObject(what, b)
	if err != nil {
		return nil, err
	}
	return &objectReader{m: m}, nil
}

// raw removes key and returns its raw value; nil when absent or null.
func (o *objectReader) raw(key string) json.RawMessage {
	v, ok := o.m[key]
	if !ok {
		return nil
	}
	delete(o.m, key)
	if string(v) == "null" {
		return nil
	}
	return v
}

// field removes key and decodes its value, when present and not null, into
// into.
func (o *objectReader) field(key string, into any) {
	v := o.raw(key)
	if v == nil {
		return
	}
	if err := json.Unmarshal(v, into); err != nil && o.err == nil {
		o.err = fmt.Errorf("key %q: %w", key, err)
	}
}

// rest returns the keys not read, nil when there are none.
func (o *objectReader) rest() map[string]json.RawMessage {
	if len(o.m) == 0 {
		return nil
	}
	return o.m
}

// UnmarshalJSON reads a catalog, keeping unknown keys in Extra.
func (c *Catalog) UnmarshalJSON(b []byte) error {
	o, err := readObject("catalog", b)
	if err != nil {
		return err
	}
	var out Catalog
	o.field("tags", &out.Tags)
	o.field("name", &out.Name)
	o.field("code_id", &out.CodeID)
	o.field("catalog_uuid", &out.CatalogUUID)
	o.field("catalog_format", &out.Format)
	o.field("environment", &out.Environment)
	o.field("resources", &out.Resources)
	o.field("edges", &out.Edges)
	o.field("classes", &out.Classes)
	if o.err != nil {
		return o.err
	}
	if v, ok := o.m["version"]; ok {
		out.Version = v // kept as sent, null included
		delete(o.m, "version")
	}
	out.Metadata = o.raw("metadata")
	out.RecursiveMetadata = o.raw("recursive_metadata")
	for _, raw := range []json.RawMessage{out.Metadata, out.RecursiveMetadata} {
		if raw != nil {
			if _, err := splitObject("metadata", raw); err != nil {
				return err
			}
		}
	}
	out.Extra = o.rest()
	*c = out
	return nil
}

// MarshalJSON writes the resource in Puppet's key order.
func (r Resource) MarshalJSON() ([]byte, error) {
	var w objectWriter
	w.field("type", r.Type)
	w.field("title", r.Title)
	w.field("tags", nonNil(r.Tags))
	if r.File != "" {
		w.field("file", r.File)
	}
	if r.Line != 0 {
		w.field("line", r.Line)
	}
	w.field("exported", r.Exported)
	if r.Kind != "" {
		w.field("kind", r.Kind)
	}
	if len(r.Parameters) > 0 {
		w.field("parameters", r.Parameters)
	}
	if len(r.SensitiveParameters) > 0 {
		w.field("sensitive_parameters", r.SensitiveParameters)
	}
	if len(r.ExtParameters) > 0 {
		w.field("ext_parameters", r.ExtParameters)
	}
	w.extra(r.Extra)
	return w.bytes()
}

// UnmarshalJSON reads a resource, keeping unknown keys in Extra.
func (r *Resource) UnmarshalJSON(b []byte) error {
	o, err := readObject("resource", b)
	if err != nil {
		return err
	}
	var out Resource
	o.field("type", &out.Type)
	o.field("title", &out.Title)
	o.field("tags", &out.Tags)
	o.field("file", &out.File)
	o.field("line", &out.Line)
	o.field("exported", &out.Exported)
	o.field("kind", &out.Kind)
	o.field("sensitive_parameters", &out.SensitiveParameters)
	if o.err != nil {
		return fmt.Errorf("resource %s[%s]: %w", out.Type, out.Title, o.err)
	}
	out.Parameters = o.raw("parameters")
	if out.Parameters != nil {
		if _, err := splitObject("resource "+out.Ref()+" parameters", out.Parameters); err != nil {
			return err
		}
	}
	out.ExtParameters = o.raw("ext_parameters")
	out.Extra = o.rest()
	*r = out
	return nil
}

// MarshalJSON writes {"source":...,"target":...} and any unknown keys.
func (e Edge) MarshalJSON() ([]byte, error) {
	var w objectWriter
	w.field("source", e.Source)
	w.field("target", e.Target)
	w.extra(e.Extra)
	return w.bytes()
}

// UnmarshalJSON reads an edge, keeping unknown keys in Extra.
func (e *Edge) UnmarshalJSON(b []byte) error {
	o, err := readObject("edge", b)
	if err != nil {
		return err
	}
	var out Edge
	o.field("source", &out.Source)
	o.field("target", &out.Target)
	if o.err != nil {
		return o.err
	}
	out.Extra = o.rest()
	*e = out
	return nil
}

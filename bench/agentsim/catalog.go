package main

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"github.com/compilefarm/compilefarm/internal/jsonscan"
	"io"
	"net/url"
	"strings"
)

// servedCatalog is what the agent uses of a catalog: its identity for the
// report, its resources for the report's statuses and the file requests,
// and which file sources have their metadata inlined (a static catalog).
type servedCatalog struct {
	Name              string                     `json:"name"`
	Version           json.RawMessage            `json:"version"` // the report's configuration_version, as sent
	CatalogUUID       string                     `json:"catalog_uuid"`
	CodeID            *string                    `json:"code_id"`
	Environment       string                     `json:"environment"`
	Resources         []catResource              `json:"resources"`
	Edges             []catEdge                  `json:"edges"`
	Metadata          map[string]json.RawMessage `json:"metadata"`
	RecursiveMetadata map[string]json.RawMessage `json:"recursive_metadata"`
}

// catEdge is a containment edge: source contains target.
type catEdge struct {
	Source string `json:"source"`
	Target string `json:"target"`
}

// catResource is one resource of a catalog, as far as the agent
// simulation reads it.
type catResource struct {
	Type       string          `json:"type"`
	Title      string          `json:"title"`
	Tags       json.RawMessage `json:"tags"` // as sent: the report repeats them
	File       *string         `json:"file"`
	Line       *int            `json:"line"`
	Exported   bool            `json:"exported"`
	Parameters catParameters   `json:"parameters"`
}

// catParameters are the parameters of a resource the simulation reads: a
// File's source and recurse.
type catParameters struct {
	Source  json.RawMessage `json:"source"`
	Recurse json.RawMessage `json:"recurse"`
}

func (r *catResource) ref() string { return r.Type + "[" + r.Title + "]" }

// decodeCatalog reads a catalog answer (gzip when the server said so) and
// checks it is node's, in env.
func decodeCatalog(body []byte, gz bool, node, env string) (*servedCatalog, int, error) {
	raw := body
	if gz {
		zr, err := gzip.NewReader(bytes.NewReader(body))
		if err != nil {
			return nil, 0, fmt.Errorf("catalog is not gzip: %w", err)
		}
		// gzip's trailer holds the size of the data (mod 2^32): read into
		// a buffer of that size at once.
		size := int64(binary.LittleEndian.Uint32(body[len(body)-4:]))
		buf := bytes.NewBuffer(make([]byte, 0, min(size, maxAnswer)+bytes.MinRead))
		if _, err := buf.ReadFrom(io.LimitReader(zr, maxAnswer)); err != nil {
			return nil, 0, fmt.Errorf("decompress catalog: %w", err)
		}
		raw = buf.Bytes()
	}
	c, err := scanCatalog(raw)
	if err != nil {
		return nil, 0, fmt.Errorf("catalog is not JSON: %w", err)
	}
	switch {
	case c.Name != node:
		return nil, 0, fmt.Errorf("catalog for %s names %q", node, c.Name)
	case c.Environment != env:
		return nil, 0, fmt.Errorf("catalog for %s is for environment %q, asked for %q", node, c.Environment, env)
	case len(c.Resources) == 0:
		return nil, 0, fmt.Errorf("catalog for %s has no resources", node)
	}
	return c, len(raw), nil
}

// scanCatalog reads what the agent simulation uses of a catalog (see
// servedCatalog); it decodes as encoding/json would into servedCatalog,
// several times faster.
func scanCatalog(raw []byte) (*servedCatalog, error) {
	c := &servedCatalog{}
	s := jsonscan.New(raw)
	s.Object(func(k []byte) {
		switch string(k) {
		case "name":
			c.Name = string(s.String())
		case "version":
			c.Version = json.RawMessage(s.Raw())
		case "catalog_uuid":
			c.CatalogUUID = string(s.String())
		case "code_id":
			c.CodeID = stringOrNull(s)
		case "environment":
			c.Environment = string(s.String())
		case "resources":
			s.Array(func() { c.Resources = append(c.Resources, scanResource(s)) })
		case "edges":
			s.Array(func() {
				var e catEdge
				s.Object(func(k []byte) {
					switch string(k) {
					case "source":
						e.Source = string(s.String())
					case "target":
						e.Target = string(s.String())
					default:
						s.Skip()
					}
				})
				c.Edges = append(c.Edges, e)
			})
		case "metadata", "recursive_metadata":
			m := map[string]json.RawMessage{}
			s.Object(func(title []byte) { m[string(title)] = json.RawMessage(s.Raw()) })
			if string(k) == "metadata" {
				c.Metadata = m
			} else {
				c.RecursiveMetadata = m
			}
		default:
			s.Skip()
		}
	})
	s.End()
	if err := s.Err(); err != nil {
		return nil, fmt.Errorf("scan catalog: %w", err)
	}
	return c, nil
}

// scanResource reads one resource of a catalog.
func scanResource(s *jsonscan.Scanner) catResource {
	var r catResource
	s.Object(func(k []byte) {
		switch string(k) {
		case "type":
			r.Type = string(s.String())
		case "title":
			r.Title = string(s.String())
		case "tags":
			r.Tags = json.RawMessage(s.Raw())
		case "file":
			r.File = stringOrNull(s)
		case "line":
			r.Line = intOrNull(s)
		case "exported":
			r.Exported = boolean(s)
		case "parameters":
			s.Object(func(k []byte) {
				switch string(k) {
				case "source":
					r.Parameters.Source = json.RawMessage(s.Raw())
				case "recurse":
					r.Parameters.Recurse = json.RawMessage(s.Raw())
				default:
					s.Skip()
				}
			})
		default:
			s.Skip()
		}
	})
	return r
}

// stringOrNull reads a string or null (nil).
func stringOrNull(s *jsonscan.Scanner) *string {
	var v *string
	decodeRaw(s, &v)
	return v
}

// intOrNull reads an integer or null (nil).
func intOrNull(s *jsonscan.Scanner) *int {
	var v *int
	decodeRaw(s, &v)
	return v
}

// boolean reads true or false.
func boolean(s *jsonscan.Scanner) bool {
	var v bool
	decodeRaw(s, &v)
	return v
}

// decodeRaw decodes the next (small) value into v with encoding/json,
// leaving v as it is after an error, which s then holds.
func decodeRaw(s *jsonscan.Scanner, v any) {
	raw := s.Raw()
	if raw == nil {
		return
	}
	if err := json.Unmarshal(raw, v); err != nil {
		s.Fail(err.Error())
	}
}

// fileRequest is a request the agent sends for a File resource's source.
type fileRequest struct {
	path string // without the /puppet/v3 prefix, with its query string
}

// sourcedFiles are the file metadata requests the agent sends for this
// catalog, at most limit: one per File resource whose source is a
// puppet:/// URL, file_metadata for a file and file_metadatas for a
// recursive directory, as in the recorded runs. Unless askInlined, sources
// whose metadata the catalog inlines (a static catalog) are skipped, as the
// agent skips them: it compares the inlined checksum with the file on disk
// and, the file being in place, asks nothing.
func (c *servedCatalog) sourcedFiles(env string, askInlined bool, limit int) []fileRequest {
	var out []fileRequest
	for i := range c.Resources {
		if len(out) >= limit {
			break
		}
		r := &c.Resources[i]
		if r.Type != "File" || r.Exported || len(r.Parameters.Source) == 0 {
			continue
		}
		src := firstPuppetSource(r.Parameters.Source)
		if src == "" {
			continue
		}
		recurse := isRecurse(r.Parameters.Recurse)
		if !askInlined {
			if _, ok := c.Metadata[r.Title]; ok && !recurse {
				continue
			}
			if _, ok := c.RecursiveMetadata[r.Title]; ok && recurse {
				continue
			}
		}
		q := "links=manage&checksum_type=sha256&source_permissions=ignore&environment=" + url.QueryEscape(env)
		if recurse {
			out = append(out, fileRequest{path: "/file_metadatas/" + src + "?recurse=true&max_files=0&" + q})
		} else {
			out = append(out, fileRequest{path: "/file_metadata/" + src + "?" + q})
		}
	}
	return out
}

// firstPuppetSource is the mount path (modules/mod/file) of a source
// parameter's first puppet: URL: the agent tries sources in order and the
// first one that exists answers.
func firstPuppetSource(raw json.RawMessage) string {
	var list []string
	var one string
	if json.Unmarshal(raw, &one) == nil {
		list = []string{one}
	} else if json.Unmarshal(raw, &list) != nil {
		return ""
	}
	for _, s := range list {
		u, err := url.Parse(s)
		if err != nil || u.Scheme != "puppet" {
			continue
		}
		p := strings.TrimPrefix(u.EscapedPath(), "/")
		if p != "" {
			return p
		}
	}
	return ""
}

// isRecurse reports whether a File's recurse parameter recurses (true,
// "true" or "remote").
func isRecurse(raw json.RawMessage) bool {
	switch strings.Trim(string(raw), `"`) {
	case "true", "remote":
		return true
	}
	return false
}

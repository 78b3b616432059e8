package catalog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/compilefarm/compilefarm/pkg/farm"
)

// MakeStatic turns compiled catalog JSON into a static catalog pinned to
// codeID, as Puppet Server's static compile does
// (Puppet::Resource::Catalog::Compiler#inline_metadata):
//
//   - Only File resources qualify, and only when ensure is not "absent", no
//     content is set (Puppet would not skip these, but the agent rejects
//     source together with content), and every source is a puppet: URL.
//   - Options come from the resource: links (default manage), checksum
//     (default DefaultChecksumType, the first type a Puppet 7 agent asks for),
//     source_permissions (default ignore), and for recursion recurselimit,
//     max_files and ignore.
//   - recurse true, "true" or "remote": each source (trailing slashes
//     removed) is searched recursively; missing sources are skipped; with
//     sourceselect first (the default) the first existing source is the only
//     one. The result goes to recursive_metadata[title][source], each entry
//     with content_uri puppet://<server>/<env-relative path of the search
//     root>[/<relative_path>].
//   - otherwise: the first source that exists gives metadata[title], with
//     source and content_uri. No source existing fails the whole catalog
//     (error wrapping farm.ErrInvalid), as Puppet fails the compile.
//   - Metadata is inlined only when the source uses the modules mount and the
//     file lies in <env>/<dir>/<module>/files/...; other resources are left
//     for the agent to fetch from the file server as usual.
//
// code_id is set to codeID. The output is deterministic: the same catalog,
// code and resolver give the same bytes (metadata maps are written in
// sorted key order).
func MakeStatic(ctx context.Context, catalogJSON []byte, codeID string, files FileResolver) ([]byte, error) {
	if files == nil {
		return nil, fmt.Errorf("making catalog static: no file resolver: %w", farm.ErrInvalid)
	}
	c, err := Parse(catalogJSON)
	if err != nil {
		return nil, fmt.Errorf("making catalog static: %w", err)
	}
	if err := c.InlineMetadata(ctx, files); err != nil {
		return nil, fmt.Errorf("making catalog %s static: %w", c.Name, err)
	}
	c.CodeID = codeID
	return c.Marshal()
}

// InlineMetadata replaces the catalog's metadata and recursive_metadata with
// what files answers for its File resources; see MakeStatic.
func (c *Catalog) InlineMetadata(ctx context.Context, files FileResolver) error {
	envDir := strings.TrimRight(files.EnvironmentDir(), "/")
	single := map[string]FileMetadata{}
	recursive := map[string]map[string][]FileMetadata{}
	for i := range c.Resources {
		if err := ctx.Err(); err != nil {
			return err
		}
		r := &c.Resources[i]
		if r.Type != "File" {
			continue
		}
		p := r.params()
		sources, ok := inlineableSources(p)
		if !ok {
			continue
		}
		opts := MetadataOptions{
			Links:             stringParam(p, "links", LinksManage),
			ChecksumType:      stringParam(p, "checksum", DefaultChecksumType),
			SourcePermissions: stringParam(p, "source_permissions", PermissionsIgnore),
		}
		if isRecursive(p) {
			m, err := recursiveMetadata(ctx, r, p, sources, opts, files, envDir)
			if err != nil {
				return err
			}
			if len(m) > 0 {
				recursive[r.Title] = m
			}
			continue
		}
		md, err := singleMetadata(ctx, r, sources, opts, files, envDir)
		if err != nil {
			return err
		}
		if md != nil {
			single[r.Title] = *md
		}
	}
	c.Metadata, c.RecursiveMetadata = nil, nil
	var err error
	if len(single) > 0 {
		if c.Metadata, err = Marshal(single); err != nil {
			return fmt.Errorf("encoding metadata: %w", err)
		}
	}
	if len(recursive) > 0 {
		if c.RecursiveMetadata, err = Marshal(recursive); err != nil {
			return fmt.Errorf("encoding recursive_metadata: %w", err)
		}
	}
	return nil
}

// inlineableSources returns a File resource's sources (trailing slashes
// removed) when its metadata may be inlined.
func inlineableSources(p params) ([]string, bool) {
	if ensure, _ := p.str("ensure"); ensure == "absent" {
		return nil, false
	}
	if _, ok := p.get("content"); ok {
		return nil, false
	}
	raw, ok := p.get("source")
	if !ok {
		return nil, false
	}
	var list []*string
	var one string
	if json.Unmarshal(raw, &one) == nil {
		list = []*string{&one}
	} else if json.Unmarshal(raw, &list) != nil {
		return nil, false // rich data or nested arrays: leave it to the agent
	}
	var sources []string
	for _, s := range list {
		if s == nil {
			continue // compact
		}
		if !strings.HasPrefix(*s, "puppet:") {
			return nil, false
		}
		sources = append(sources, strings.TrimRight(*s, "/"))
	}
	return sources, len(sources) > 0
}

func stringParam(p params, name, def string) string {
	if s, ok := p.str(name); ok && s != "" {
		return s
	}
	return def
}

func isRecursive(p params) bool {
	raw, ok := p.get("recurse")
	if !ok {
		return false
	}
	var b bool
	if json.Unmarshal(raw, &b) == nil {
		return b
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s == "true" || s == "remote"
	}
	return false
}

// intParam reads a number or a numeric string.
func intParam(p params, name string) (int, bool) {
	raw, ok := p.get(name)
	if !ok {
		return 0, false
	}
	var n int
	if json.Unmarshal(raw, &n) == nil {
		return n, true
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(s)); err == nil {
			return n, true
		}
	}
	return 0, false
}

func ignoreParam(p params) []string {
	raw, ok := p.get("ignore")
	if !ok {
		return nil
	}
	var one string
	if json.Unmarshal(raw, &one) == nil {
		return []string{one}
	}
	var list []string
	_ = json.Unmarshal(raw, &list)
	return list
}

// sourceURL splits a puppet: URL into the authority ("server[:port]", empty
// for puppet:///) and the request key (the path without its leading slash,
// taken literally as Puppet does).
func sourceURL(source string) (authority, key string) {
	rest := strings.TrimPrefix(source, "puppet:")
	if strings.HasPrefix(rest, "//") {
		rest = rest[2:]
		if i := strings.IndexByte(rest, '/'); i >= 0 {
			authority, rest = rest[:i], rest[i:]
		} else {
			authority, rest = rest, ""
		}
		if i := strings.LastIndexByte(authority, '@'); i >= 0 {
			authority = authority[i+1:] // no userinfo in content URIs
		}
	}
	if i := strings.IndexAny(rest, "?#"); i >= 0 {
		rest = rest[:i]
	}
	return authority, strings.TrimPrefix(rest, "/")
}

// moduleFileRE is Puppet's rule for inlineable files: <dir>/<module>/files/...
// relative to the environment directory.
var moduleFileRE = regexp.MustCompile(`^[^/]+/[^/]+/files/.+`)

// inlineable reports whether md (the metadata of source, or of the root of
// its search) may be inlined, and returns the content URI of its path.
func inlineable(md FileMetadata, source, envDir string) (string, bool) {
	authority, key := sourceURL(source)
	if !strings.HasPrefix(key, "modules/") {
		return "", false
	}
	rel, ok := strings.CutPrefix(md.Path, envDir+"/")
	if !ok || !moduleFileRE.MatchString(rel) {
		return "", false
	}
	return "puppet://" + authority + "/" + rel, true
}

func recursiveMetadata(ctx context.Context, r *Resource, p params, sources []string, opts MetadataOptions, files FileResolver, envDir string) (map[string][]FileMetadata, error) {
	opts.Recurse = true
	if n, ok := intParam(p, "recurselimit"); ok {
		if n <= 0 {
			opts.Recurse = false // Puppet: recurselimit 0 lists only the root
		}
		opts.RecurseLimit = n
	}
	if n, ok := intParam(p, "max_files"); ok {
		opts.MaxFiles = n
	}
	opts.Ignore = ignoreParam(p)
	sourceselect, _ := p.str("sourceselect")

	out := map[string][]FileMetadata{}
	for _, source := range sources {
		_, key := sourceURL(source)
		list, err := files.FileMetadatas(ctx, key, opts)
		if errors.Is(err, farm.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("searching metadata of %s for %s: %w", source, r.Ref(), err)
		}
		var base *FileMetadata
		for i := range list {
			if list[i].RelativePath == "." {
				base = &list[i]
				break
			}
		}
		if base == nil {
			return nil, fmt.Errorf("metadata search of %s for %s has no root entry", source, r.Ref())
		}
		baseURI, ok := inlineable(*base, source, envDir)
		if !ok {
			return nil, nil // a source outside the environment: inline nothing
		}
		entries := make([]FileMetadata, len(list))
		for i, md := range list {
			md.ContentURI = baseURI
			if md.RelativePath != "." {
				md.ContentURI = baseURI + "/" + md.RelativePath
			}
			entries[i] = md
		}
		out[source] = entries
		if sourceselect == "" || sourceselect == "first" {
			break
		}
	}
	return out, nil
}

func singleMetadata(ctx context.Context, r *Resource, sources []string, opts MetadataOptions, files FileResolver, envDir string) (*FileMetadata, error) {
	for _, source := range sources {
		_, key := sourceURL(source)
		md, err := files.FileMetadata(ctx, key, opts)
		if errors.Is(err, farm.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("getting metadata of %s for %s: %w", source, r.Ref(), err)
		}
		uri, ok := inlineable(md, source, envDir)
		if !ok {
			return nil, nil
		}
		md.Source = source
		md.ContentURI = uri
		return &md, nil
	}
	raw, _ := r.Param("source")
	return nil, fmt.Errorf("could not get metadata for %s (%s): %w", r.Ref(), raw, farm.ErrInvalid)
}

package code

import (
	"context"
	"crypto/md5"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/hex"
	"fmt"
	"hash"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/compilefarm/compilefarm/pkg/catalog"
	"github.com/compilefarm/compilefarm/pkg/farm"
)

// FileMetadata is Puppet's file metadata; see catalog.FileMetadata.
type FileMetadata = catalog.FileMetadata

// MetadataOptions are the file_metadata(s) request parameters; see
// catalog.MetadataOptions.
type MetadataOptions = catalog.MetadataOptions

// FixedTime is the time snapshots report where Puppet reports a file's
// ctime or mtime: directories' checksums ("{ctime}1970-01-01 00:00:00 +0000")
// and files asked for with checksum type mtime or ctime. Agents do not compare
// directory checksums; a File resource with checksum => mtime or ctime is
// never seen as newer than the agent's copy, so use a content checksum.
var FixedTime = time.Unix(0, 0).UTC()

// rubyTime is Ruby's Time#to_s layout, which Puppet uses in time checksums.
const rubyTime = "2006-01-02 15:04:05 -0700"

// Files answers Puppet's file_metadata and file_metadatas requests for one
// code snapshot, and implements catalog.FileResolver for static catalogs.
// It is safe for concurrent use.
type Files struct {
	Manifest *Manifest
	// Store holds the content; it is read only for checksum types other
	// than sha256 (those are computed from the bytes).
	Store farm.ContentStore
	// EnvDir is the absolute directory metadata paths start with: where the
	// environment is materialized (Materialize's result + "/" + environment).
	EnvDir string
	// BaseDirs are the absolute directories metadata paths of the files of
	// the snapshot's global module directories (Manifest.BaseDirs) start
	// with, in order; a directory without one is shown under EnvDir.
	BaseDirs []string
	// Owner and Group are reported for every entry.
	Owner, Group int
}

var _ catalog.FileResolver = (*Files)(nil)

// NewFiles serves m's files as if the environment lived in envDir.
func NewFiles(store farm.ContentStore, m *Manifest, envDir string) *Files {
	return &Files{Manifest: m, Store: store, EnvDir: envDir}
}

// EnvironmentDir returns EnvDir without a trailing slash.
func (f *Files) EnvironmentDir() string {
	if f.EnvDir == "/" {
		return f.EnvDir
	}
	return strings.TrimRight(f.EnvDir, "/")
}

func (f *Files) abs(p string) string {
	if p == "" {
		return f.EnvironmentDir()
	}
	if tree := treeOf(p); tree != "" {
		for i, d := range f.Manifest.BaseDirs() {
			if d == tree && i < len(f.BaseDirs) {
				return strings.TrimRight(f.BaseDirs[i], "/") + strings.TrimPrefix(p, tree)
			}
		}
	}
	return strings.TrimRight(f.EnvironmentDir(), "/") + "/" + p
}

// FileMetadata answers GET /puppet/v3/file_metadata/<key>: the metadata of
// the one file that key names (relative_path null). Errors wrap
// farm.ErrNotFound (nothing there) or farm.ErrInvalid (bad key or options).
func (f *Files) FileMetadata(ctx context.Context, key string, opts MetadataOptions) (FileMetadata, error) {
	opts, err := opts.Normalize()
	if err != nil {
		return FileMetadata{}, err
	}
	mount, rel, err := SplitKey(key)
	if err != nil {
		return FileMetadata{}, err
	}
	p, err := f.Manifest.find(mount, rel)
	if err != nil {
		return FileMetadata{}, fmt.Errorf("file_metadata %s: %w", key, err)
	}
	md, err := f.collect(ctx, f.Manifest.resolve(p, "", opts.Links == catalog.LinksFollow), opts)
	if err != nil {
		return FileMetadata{}, fmt.Errorf("file_metadata %s: %w", key, err)
	}
	return md, nil
}

// FileMetadatas answers GET /puppet/v3/file_metadatas/<key>: the search root
// (relative_path ".") and, with opts.Recurse, everything below it in
// breadth-first order, names sorted within a directory. For the merged
// mounts (plugins, pluginfacts, locales) every module's directory is searched
// and a relative path found in an earlier module hides later ones; each
// entry's path is the directory it was found in. Errors wrap
// farm.ErrNotFound, or farm.ErrInvalid for bad keys or options, more entries
// than opts.MaxFiles, or a link loop.
func (f *Files) FileMetadatas(ctx context.Context, key string, opts MetadataOptions) ([]FileMetadata, error) {
	opts, err := opts.Normalize()
	if err != nil {
		return nil, err
	}
	mount, rel, err := SplitKey(key)
	if err != nil {
		return nil, err
	}
	roots, noRecurse, err := f.Manifest.search(mount, rel)
	if err != nil {
		return nil, fmt.Errorf("file_metadatas %s: %w", key, err)
	}
	if len(roots) == 0 { // an empty modulepath: the codedir, as Puppet searches
		md, err := f.codeDirMetadata(ctx, opts)
		return []FileMetadata{md}, err
	}
	if noRecurse {
		opts.Recurse = false
	}
	var order []found
	seen := map[string]bool{}
	for _, root := range roots {
		entries, err := f.fileset(ctx, root, opts)
		if err != nil {
			return nil, fmt.Errorf("file_metadatas %s: %w", key, err)
		}
		for _, e := range entries {
			if !seen[e.rel] {
				seen[e.rel] = true
				order = append(order, e)
			}
		}
	}
	out := make([]FileMetadata, 0, len(order))
	for _, e := range order {
		md, err := f.collect(ctx, e, opts)
		if err != nil {
			return nil, fmt.Errorf("file_metadatas %s: %w", key, err)
		}
		out = append(out, md)
	}
	return out, nil
}

// found is root/rel (rel "" for a single lookup, "." for a search root)
// resolved once with a request's links option: its real path and entry, or
// err (e.g. a dangling link with links=follow).
type found struct {
	root, rel string
	full      string // root/rel
	real      string
	entry     Entry
	err       error
}

func (m *Manifest) resolve(root, rel string, follow bool) found {
	fd := found{root: root, rel: rel, full: root}
	if rel != "" && rel != "." {
		fd.full = join(root, rel)
	}
	fd.real, fd.entry, fd.err = m.walk(fd.full, follow)
	return fd
}

// fileset lists "." and, when recursing, the paths below root relative to
// it, as Puppet::FileServing::Fileset does (breadth first, ignore patterns
// matched against base names, links entered only with links=follow).
func (f *Files) fileset(ctx context.Context, root string, opts MetadataOptions) ([]found, error) {
	m := f.Manifest
	follow := opts.Links == catalog.LinksFollow
	top := m.resolve(root, ".", follow)
	if top.err != nil {
		return nil, top.err
	}
	type item struct {
		found
		depth int
		chain []string // real directories from the root down to this one
	}
	out := []found{top}
	queue := []item{{found: top, chain: []string{top.real}}}
	for len(queue) > 0 {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		it := queue[0]
		queue = queue[1:]
		if !opts.Recurse || (opts.RecurseLimit > 0 && it.depth+1 > opts.RecurseLimit) {
			continue
		}
		if it.err != nil || it.entry.Type != TypeDirectory {
			continue // not a directory (or a dangling link): no children
		}
		for _, anc := range it.chain[:len(it.chain)-1] {
			if anc == it.real {
				return nil, fmt.Errorf("%s: links loop back to %s: %w", f.abs(it.full), f.abs(it.real), farm.ErrInvalid)
			}
		}
		for _, name := range m.children[it.real] {
			if ignored(opts.Ignore, name) {
				continue
			}
			rel := name
			if it.depth > 0 {
				rel = it.rel + "/" + name
			}
			child := m.resolve(root, rel, follow)
			out = append(out, child)
			if opts.MaxFiles > 0 && len(out)-1 > opts.MaxFiles {
				return nil, fmt.Errorf("the directory '%s' contains more than %d entries, which exceeds the limit of %d specified by the max_files parameter: %w",
					f.abs(root), opts.MaxFiles, opts.MaxFiles, farm.ErrInvalid)
			}
			childReal := child.real
			if child.err != nil {
				childReal = it.real
			}
			chain := append(append([]string(nil), it.chain...), childReal)
			queue = append(queue, item{found: child, depth: it.depth + 1, chain: chain})
		}
	}
	return out, nil
}

// collect builds the metadata of a resolved path, as
// Puppet::FileServing::Metadata#collect does.
func (f *Files) collect(ctx context.Context, fd found, opts MetadataOptions) (FileMetadata, error) {
	if fd.err != nil {
		return FileMetadata{}, fd.err
	}
	e := fd.entry
	md := FileMetadata{
		Path: f.abs(fd.root), RelativePath: fd.rel, Links: opts.Links,
		Owner: f.Owner, Group: f.Group, Mode: 0o644, Type: string(e.Type),
	}
	if opts.SourcePermissions != catalog.PermissionsIgnore {
		md.Mode = int(e.Mode)
	}
	switch e.Type {
	case TypeDirectory:
		md.Checksum = catalog.Checksum{Type: "ctime", Value: "{ctime}" + FixedTime.Format(rubyTime)}
	case TypeFile:
		v, err := f.checksum(ctx, e, opts.ChecksumType)
		if err != nil {
			return FileMetadata{}, err
		}
		md.Checksum = catalog.Checksum{Type: opts.ChecksumType, Value: v}
	case TypeLink:
		md.Destination = e.Target
		md.Checksum = catalog.Checksum{Type: opts.ChecksumType}
		// Puppet checksums what the link points at, and sends null when it
		// cannot (a dangling link, or digests of a directory).
		_, target, err := f.Manifest.walk(fd.full, true)
		switch {
		case err != nil:
		case target.Type == TypeFile:
			v, err := f.checksum(ctx, target, opts.ChecksumType)
			if err != nil {
				return FileMetadata{}, err
			}
			md.Checksum.Value = v
		default:
			md.Checksum.Value, _ = timeOrNone(opts.ChecksumType) // "" (null) for digests
		}
	}
	return md, nil
}

func timeOrNone(typ string) (string, bool) {
	switch typ {
	case "mtime", "ctime":
		return "{" + typ + "}" + FixedTime.Format(rubyTime), true
	case "none":
		return "{none}", true
	}
	return "", false
}

// checksum returns "{type}value" for the file e.
func (f *Files) checksum(ctx context.Context, e Entry, typ string) (string, error) {
	if v, ok := timeOrNone(typ); ok {
		return v, nil
	}
	if typ == "sha256" {
		return "{sha256}" + string(e.SHA256), nil
	}
	var h hash.Hash
	base, lite := strings.CutSuffix(typ, "lite")
	switch base {
	case "sha256":
		h = sha256.New()
	case "sha224":
		h = sha256.New224()
	case "sha384":
		h = sha512.New384()
	case "sha512":
		h = sha512.New()
	case "sha1":
		h = sha1.New()
	case "md5":
		h = md5.New()
	default:
		return "", fmt.Errorf("unsupported checksum type %q: %w", typ, farm.ErrInvalid)
	}
	if f.Store == nil {
		return "", fmt.Errorf("checksum %s of %s needs the content store", typ, e.Path)
	}
	data, err := f.Store.Get(ctx, farm.SpaceContent, e.SHA256)
	if err != nil {
		return "", fmt.Errorf("reading %s for its %s checksum: %w", e.Path, typ, err)
	}
	if lite && len(data) > 512 {
		data = data[:512]
	}
	h.Write(data)
	return "{" + typ + "}" + hex.EncodeToString(h.Sum(nil)), nil
}

// ParseMetadataQuery reads the query parameters of a file_metadata(s)
// request the way Puppet does: links, checksum_type, source_permissions,
// recurse (true/false), recurselimit, max_files (-1 for none) and repeated
// ignore. Unknown parameters (environment, ...) are the caller's business.
// Malformed values give an error wrapping farm.ErrInvalid.
func ParseMetadataQuery(q url.Values) (MetadataOptions, error) {
	o := MetadataOptions{
		Links:             q.Get("links"),
		ChecksumType:      q.Get("checksum_type"),
		SourcePermissions: q.Get("source_permissions"),
		Ignore:            q["ignore"],
	}
	switch r := q.Get("recurse"); r {
	case "", "false":
	case "true", "remote":
		o.Recurse = true
	default:
		return o, fmt.Errorf("recurse must be true or false, not %q: %w", r, farm.ErrInvalid)
	}
	if s := q.Get("recurselimit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			return o, fmt.Errorf("recurselimit must be a number, not %q: %w", s, farm.ErrInvalid)
		}
		if n == 0 {
			o.Recurse = false
		}
		o.RecurseLimit = n
	}
	if s := q.Get("max_files"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < -1 {
			return o, fmt.Errorf("max_files must be a number or -1, not %q: %w", s, farm.ErrInvalid)
		}
		o.MaxFiles = n
	}
	return o.Normalize()
}

// ignored reports whether name matches one of the patterns.
func ignored(patterns []string, name string) bool {
	for _, p := range patterns {
		if fnmatch(p, name) {
			return true
		}
	}
	return false
}

// fnmatch is Ruby's File.fnmatch(pattern, name) without flags: '*' any run,
// '?' any character, '[...]' classes ('!' or '^' negates, ranges), '\'
// escapes, and a leading '.' of name only matched by a literal '.'.
func fnmatch(pattern, name string) bool {
	if strings.HasPrefix(name, ".") && !strings.HasPrefix(pattern, ".") && !strings.HasPrefix(pattern, `\.`) {
		return false
	}
	return match([]rune(pattern), []rune(name))
}

func match(p, s []rune) bool {
	for len(p) > 0 {
		switch p[0] {
		case '*':
			for len(p) > 0 && p[0] == '*' {
				p = p[1:]
			}
			if len(p) == 0 {
				return true
			}
			for i := 0; i <= len(s); i++ {
				if match(p, s[i:]) {
					return true
				}
			}
			return false
		case '?':
			if len(s) == 0 {
				return false
			}
			p, s = p[1:], s[1:]
		case '[':
			if len(s) == 0 {
				return false
			}
			ok, rest, valid := matchClass(p, s[0])
			if !valid { // an unclosed '[' is a literal
				if s[0] != '[' {
					return false
				}
				p, s = p[1:], s[1:]
				continue
			}
			if !ok {
				return false
			}
			p, s = rest, s[1:]
		case '\\':
			if len(p) > 1 {
				p = p[1:]
			}
			fallthrough
		default:
			if len(s) == 0 || s[0] != p[0] {
				return false
			}
			p, s = p[1:], s[1:]
		}
	}
	return len(s) == 0
}

// matchClass matches c against the class starting at p[0] == '['.
func matchClass(p []rune, c rune) (matched bool, rest []rune, valid bool) {
	i := 1
	negate := i < len(p) && (p[i] == '!' || p[i] == '^')
	if negate {
		i++
	}
	first := true
	for i < len(p) {
		if p[i] == ']' && !first {
			return matched != negate, p[i+1:], true
		}
		first = false
		lo := p[i]
		if lo == '\\' && i+1 < len(p) {
			i++
			lo = p[i]
		}
		hi := lo
		if i+2 < len(p) && p[i+1] == '-' && p[i+2] != ']' {
			hi = p[i+2]
			if hi == '\\' && i+3 < len(p) {
				i++
				hi = p[i+2]
			}
			i += 2
		}
		if lo <= c && c <= hi {
			matched = true
		}
		i++
	}
	return false, nil, false
}

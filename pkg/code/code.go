// Package code keeps Puppet environments as content-addressed snapshots and
// serves their files the way Puppet Server's file server does.
//
// Snapshot reads an environment directory: every file's bytes go to the
// content store (farm.SpaceContent) and a Manifest listing every entry (path,
// type, sha256, permission bits, size, link target) goes to farm.SpaceCode as
// canonical JSON. The manifest's digest is the environment's code_id, so the
// same code always has the same code_id; no timestamps or owners are kept.
// SnapshotWith also takes the global module directories ($basemodulepath)
// that the environment's modulepath uses into its snapshot, so a change
// there is a new code_id. Load reads a manifest back; Materialize writes it
// out as a Puppet environmentpath for a compiler.
//
// On a manifest, Lookup and LookupStatic resolve Puppet's file mounts
// (modules, plugins, pluginfacts, locales, tasks, and the static_file_content
// form <dir>/<module>/files/...) to stored content, and Files answers
// file_metadata and file_metadatas requests with the JSON shapes Puppet
// Server 7 sends; it also implements catalog.FileResolver for static
// catalogs.
//
// Differences from a Puppet Server reading a live directory, all forced by
// snapshots being immutable and free of timestamps and owners:
//   - The modulepath is "modules:$basemodulepath", or the relative entries
//     of environment.conf's modulepath in their order, where
//     $basemodulepath stands for the global module directories given to
//     SnapshotWith, snapshotted with the environment (BaseModulepathDir).
//     Other $-settings and absolute or outside directories are ignored,
//     since they are not part of the snapshot.
//   - Directories report the fixed time FixedTime as their ctime checksum (and
//     files do for checksum types mtime and ctime).
//   - Owner and group are Files.Owner and Files.Group (0 and 0 by default) for
//     every entry; agents ignore them with source_permissions=ignore.
//   - Directory entries are listed in byte order of their names, where Puppet
//     lists them in the file system's order.
//   - Request paths are cleaned ("a//b/./c" is "a/b/c", trailing slashes
//     dropped) before they are reported.
package code

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/compilefarm/compilefarm/pkg/catalog"
	"github.com/compilefarm/compilefarm/pkg/farm"
)

// ManifestFormat is the version of the manifest JSON this package writes.
const ManifestFormat = 1

// EntryType is the kind of a manifest entry.
type EntryType string

// Entry types.
const (
	TypeFile      EntryType = "file"
	TypeDirectory EntryType = "directory"
	TypeLink      EntryType = "link"
)

// Entry is one file, directory or symbolic link of an environment.
type Entry struct {
	// Path is slash-separated and relative to the environment directory;
	// a global module directory's entries are under BaseModulepathDir/<n>.
	Path string    `json:"path"`
	Type EntryType `json:"type"`
	// SHA256 is the digest of a file's bytes in farm.SpaceContent.
	SHA256 farm.Digest `json:"sha256,omitempty"`
	// Mode holds the permission bits (0o777 at most).
	Mode fs.FileMode `json:"mode"`
	// Size is a file's length in bytes.
	Size int64 `json:"size,omitempty"`
	// Target is a link's target as written in the link; it resolves inside
	// the environment.
	Target string `json:"target,omitempty"`
}

// Manifest is a snapshot of one environment's code. Its canonical JSON is
// stored in farm.SpaceCode and its digest is the code_id. A Manifest must
// not be changed once CodeID or a lookup method has been called; it is safe
// for concurrent use after that.
type Manifest struct {
	Format      int    `json:"format"`
	Environment string `json:"environment"`
	// Modulepath lists the module directories, relative to the environment
	// ("" is the environment itself, BaseModulepathDir/<n> a global module
	// directory), read from environment.conf at snapshot time; see the
	// package doc.
	Modulepath []string `json:"modulepath"`
	// Entries are sorted by Path (byte order); the environment directory
	// itself is not an entry.
	Entries []Entry `json:"entries"`

	indexOnce sync.Once
	index     map[string]int      // path → position in Entries
	children  map[string][]string // directory path → sorted child names

	modulesOnce sync.Once
	modules     []Module

	encodeOnce sync.Once
	id         string
	encoded    []byte
	err        error
}

// prepare builds the path indexes once.
func (m *Manifest) prepare() {
	m.indexOnce.Do(func() {
		m.index = make(map[string]int, len(m.Entries))
		m.children = map[string][]string{}
		for i, e := range m.Entries {
			m.index[e.Path] = i
			dir, name := splitParent(e.Path)
			m.children[dir] = append(m.children[dir], name)
		}
		for _, names := range m.children {
			sort.Strings(names)
		}
	})
}

// encode builds the canonical encoding and the code_id once.
func (m *Manifest) encode() error {
	m.encodeOnce.Do(func() {
		m.encoded, m.err = catalog.Marshal(m)
		if m.err == nil {
			m.id = string(farm.DigestOf(m.encoded))
		}
	})
	return m.err
}

// CodeID returns the manifest's code_id: the lowercase hex SHA-256 of its
// canonical JSON. It is empty when the manifest cannot be encoded.
func (m *Manifest) CodeID() string {
	_ = m.encode()
	return m.id
}

// Encode returns the manifest's canonical JSON (what CodeID digests).
func (m *Manifest) Encode() ([]byte, error) {
	if err := m.encode(); err != nil {
		return nil, fmt.Errorf("encoding manifest of %s: %w", m.Environment, err)
	}
	return append([]byte(nil), m.encoded...), nil
}

// Entry returns the entry at path p (slash-separated, relative to the
// environment, not following links).
func (m *Manifest) Entry(p string) (Entry, bool) {
	m.prepare()
	i, ok := m.index[p]
	if !ok {
		return Entry{}, false
	}
	return m.Entries[i], true
}

// Digests returns the distinct content digests the manifest refers to,
// sorted; a deploy can check them all before announcing the code_id.
func (m *Manifest) Digests() []farm.Digest {
	seen := map[farm.Digest]bool{}
	var out []farm.Digest
	for _, e := range m.Entries {
		if e.Type == TypeFile && !seen[e.SHA256] {
			seen[e.SHA256] = true
			out = append(out, e.SHA256)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

func splitParent(p string) (dir, name string) {
	i := strings.LastIndexByte(p, '/')
	if i < 0 {
		return "", p
	}
	return p[:i], p[i+1:]
}

// ---- Snapshot ----

// vcsDirs are version control directories (or files, for git worktrees and
// submodules) that never belong to a snapshot.
var vcsDirs = map[string]bool{".git": true, ".svn": true, ".hg": true, "CVS": true, ".bzr": true}

// editorTemp reports whether name is an editor's backup, swap or lock file.
func editorTemp(name string) bool {
	switch {
	case strings.HasSuffix(name, "~"): // emacs, vim backups
		return true
	case strings.HasPrefix(name, ".#"): // emacs lock links
		return true
	case len(name) > 2 && strings.HasPrefix(name, "#") && strings.HasSuffix(name, "#"): // emacs auto-save
		return true
	case strings.HasPrefix(name, ".") && (strings.HasSuffix(name, ".swp") || strings.HasSuffix(name, ".swo") ||
		strings.HasSuffix(name, ".swn") || strings.HasSuffix(name, ".swx")): // vim swap
		return true
	case name == "4913": // vim's write test file
		return true
	}
	return false
}

// Concurrency is how many files Snapshot and Materialize move at once.
const Concurrency = 16

// Options are what a snapshot reads besides the environment directory.
type Options struct {
	// BaseModulepath lists the global module directories, in order: what
	// $basemodulepath stands for in environment.conf's modulepath and at
	// the end of the default modulepath ("modules:$basemodulepath"), as
	// Puppet's basemodulepath setting does. An environment whose modulepath
	// uses them gets a copy of each in its snapshot (see BaseModulepathDir).
	BaseModulepath []string
}

// Snapshot is SnapshotWith without global module directories.
func Snapshot(ctx context.Context, store farm.ContentStore, envName, dir string) (*Manifest, error) {
	return SnapshotWith(ctx, store, envName, dir, Options{})
}

// SnapshotWith stores the environment in dir under the name envName: each
// file's bytes in farm.SpaceContent (skipping those already there), then the
// manifest in farm.SpaceCode. It skips version control directories (.git,
// .svn, .hg, .bzr, CVS) and editor temporary files (*~, #*#, .#*, .*.swp and
// friends), and fails with an error wrapping farm.ErrInvalid on a link that
// is absolute or resolves outside its tree (the environment, or one global
// module directory), a name that is not UTF-8, a special file (device,
// socket, pipe), or an environment holding BaseModulepathDir itself.
// environment.conf's modulepath is read into the manifest; when it uses
// $basemodulepath (the default modulepath does), the directories of
// opts.BaseModulepath are snapshotted with the environment under
// BaseModulepathDir/0, 1, ... and stand for $basemodulepath in the
// manifest's Modulepath, so the code_id covers them.
func SnapshotWith(ctx context.Context, store farm.ContentStore, envName, dir string, opts Options) (*Manifest, error) {
	if err := farm.ValidateEnvironment(envName); err != nil {
		return nil, fmt.Errorf("snapshotting %s: %w", dir, err)
	}
	root, err := resolveDir(dir)
	if err != nil {
		return nil, fmt.Errorf("snapshotting environment %s: %w", envName, err)
	}
	fail := func(err error) (*Manifest, error) {
		return nil, fmt.Errorf("snapshotting environment %s from %s: %w", envName, dir, err)
	}
	entries, err := walkTree(ctx, root, "")
	if err != nil {
		return fail(err)
	}
	conf, err := readConf(entries)
	if err != nil {
		return fail(err)
	}
	modulepath, usesBase, err := parseModulepath(conf, baseDirNames(len(opts.BaseModulepath)))
	if err != nil {
		return fail(err)
	}
	if usesBase && len(opts.BaseModulepath) > 0 {
		base, err := walkBaseModulepath(ctx, opts.BaseModulepath)
		if err != nil {
			return fail(err)
		}
		entries = append(entries, base...)
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].Path < entries[j].Path })

	m := &Manifest{Format: ManifestFormat, Environment: envName, Modulepath: modulepath, Entries: make([]Entry, len(entries))}
	for i, e := range entries {
		m.Entries[i] = e.Entry
	}
	// Links first: a bad link fails the deploy before any upload. Errors
	// name a global module directory's files where they are on disk.
	show := func(p string) string {
		for i, d := range opts.BaseModulepath {
			if rest, ok := strings.CutPrefix(p, baseDirName(i)+"/"); ok {
				return filepath.Join(d, filepath.FromSlash(rest))
			}
		}
		return p
	}
	if err := m.checkLinks(show); err != nil {
		return fail(err)
	}
	if err := storeFiles(ctx, store, m.Entries, entries); err != nil {
		return fail(err)
	}

	data, err := m.Encode()
	if err != nil {
		return nil, err
	}
	d, err := store.Put(ctx, farm.SpaceCode, data)
	if err != nil {
		return nil, fmt.Errorf("storing manifest of environment %s: %w", envName, err)
	}
	if string(d) != m.CodeID() {
		return nil, fmt.Errorf("storing manifest of environment %s: store answered digest %s, want %s", envName, d, m.CodeID())
	}
	return m, nil
}

// resolveDir resolves links to the directory dir.
func resolveDir(dir string) (string, error) {
	root, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return "", err
	}
	fi, err := os.Stat(root)
	if err != nil {
		return "", err
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("%s is not a directory: %w", dir, farm.ErrInvalid)
	}
	return root, nil
}

// walked is an entry of a snapshot and the file it was read from.
type walked struct {
	Entry
	src string
}

// walkTree lists the tree at root (an environment, or a global module
// directory when prefix is BaseModulepathDir/N) as entries whose paths start
// with prefix.
func walkTree(ctx context.Context, root, prefix string) ([]walked, error) {
	var entries []walked
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if p == root {
			return nil
		}
		name := d.Name()
		if vcsDirs[name] {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.IsDir() && editorTemp(name) {
			return nil
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if !utf8.ValidString(rel) {
			return fmt.Errorf("%q: file names must be UTF-8: %w", rel, farm.ErrInvalid)
		}
		if prefix == "" && rel == BaseModulepathDir {
			return fmt.Errorf("%s is the name under which snapshots keep the global module directories ($basemodulepath); rename it: %w", rel, farm.ErrInvalid)
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		e := Entry{Path: join(prefix, rel), Mode: info.Mode().Perm()}
		switch t := info.Mode().Type(); {
		case t == 0:
			e.Type = TypeFile
		case t == fs.ModeDir:
			e.Type = TypeDirectory
		case t == fs.ModeSymlink:
			e.Type = TypeLink
			if e.Target, err = os.Readlink(p); err != nil {
				return err
			}
			if !utf8.ValidString(e.Target) {
				return fmt.Errorf("link %s: target must be UTF-8: %w", rel, farm.ErrInvalid)
			}
		default:
			return fmt.Errorf("%s is a %s; only files, directories and links can be deployed: %w", rel, t.String(), farm.ErrInvalid)
		}
		entries = append(entries, walked{Entry: e, src: p})
		return nil
	})
	if err != nil {
		return nil, err
	}
	return entries, nil
}

// walkBaseModulepath lists the global module directories dirs as the
// entries BaseModulepathDir, BaseModulepathDir/N and what each holds.
func walkBaseModulepath(ctx context.Context, dirs []string) ([]walked, error) {
	out := []walked{{Entry: Entry{Path: BaseModulepathDir, Type: TypeDirectory, Mode: 0o755}}}
	for i, dir := range dirs {
		root, err := resolveDir(dir)
		if err != nil {
			return nil, fmt.Errorf("reading global module directory %s: %w", dir, err)
		}
		fi, err := os.Stat(root)
		if err != nil {
			return nil, fmt.Errorf("reading global module directory %s: %w", dir, err)
		}
		prefix := baseDirName(i)
		out = append(out, walked{Entry: Entry{Path: prefix, Type: TypeDirectory, Mode: fi.Mode().Perm()}})
		entries, err := walkTree(ctx, root, prefix)
		if err != nil {
			return nil, fmt.Errorf("reading global module directory %s: %w", dir, err)
		}
		out = append(out, entries...)
	}
	return out, nil
}

// readConf reads the environment's environment.conf when it is a file (nil
// when there is none).
func readConf(entries []walked) ([]byte, error) {
	for _, e := range entries {
		if e.Path == "environment.conf" && e.Type == TypeFile {
			data, err := os.ReadFile(e.src)
			if err != nil {
				return nil, fmt.Errorf("reading environment.conf: %w", err)
			}
			return data, nil
		}
	}
	return nil, nil
}

// storeFiles reads the files of entries (in the same order as walked),
// records their digests and sizes, and stores the bytes the store lacks.
func storeFiles(ctx context.Context, store farm.ContentStore, entries []Entry, walked []walked) error {
	var files []int
	for i, e := range entries {
		if e.Type == TypeFile {
			files = append(files, i)
		}
	}
	return parallel(ctx, len(files), func(ctx context.Context, k int) error {
		e := &entries[files[k]]
		data, err := os.ReadFile(walked[files[k]].src)
		if err != nil {
			return err
		}
		e.SHA256, e.Size = farm.DigestOf(data), int64(len(data))
		has, err := store.Has(ctx, farm.SpaceContent, e.SHA256)
		if err != nil {
			return fmt.Errorf("checking content of %s: %w", e.Path, err)
		}
		if has {
			return nil
		}
		d, err := store.Put(ctx, farm.SpaceContent, data)
		if err != nil {
			return fmt.Errorf("storing %s: %w", e.Path, err)
		}
		if d != e.SHA256 {
			return fmt.Errorf("storing %s: store answered digest %s, want %s", e.Path, d, e.SHA256)
		}
		return nil
	})
}

// parseModulepath reads the modulepath setting of environment.conf (ini
// syntax without sections; conf nil when there is none) and keeps its
// entries inside the environment, cleaned and slash-separated ("" for the
// environment itself), with an entry $basemodulepath (or
// ${basemodulepath}) replaced by base. Without the setting the modulepath
// is Puppet's default, "modules" then base. usesBase reports whether the
// modulepath names $basemodulepath. An entry inside BaseModulepathDir is
// refused with farm.ErrInvalid: only $basemodulepath names it.
func parseModulepath(conf []byte, base []string) (entries []string, usesBase bool, err error) {
	set := false
	for _, line := range strings.Split(string(conf), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' || line[0] == ';' || line[0] == '[' {
			continue
		}
		key, value, found := strings.Cut(line, "=")
		if !found || strings.TrimSpace(key) != "modulepath" {
			continue
		}
		value = strings.Trim(strings.TrimSpace(value), `"'`)
		entries, usesBase, set = []string{}, false, true
		for _, p := range strings.Split(value, ":") {
			p = strings.TrimSpace(p)
			if p == "$basemodulepath" || p == "${basemodulepath}" {
				entries, usesBase = append(entries, base...), true
				continue
			}
			if p == "" || strings.Contains(p, "$") || strings.HasPrefix(p, "/") || strings.Contains(p, "\\") {
				continue // other settings, absolute: not in the snapshot
			}
			p = path.Clean(p)
			if p == ".." || strings.HasPrefix(p, "../") {
				continue
			}
			if p == "." {
				p = ""
			}
			if within(p, BaseModulepathDir) {
				return nil, false, fmt.Errorf("environment.conf: modulepath entry %s is inside %s, where snapshots keep the global module directories; use $basemodulepath: %w",
					p, BaseModulepathDir, farm.ErrInvalid)
			}
			entries = append(entries, p)
		}
	}
	if !set {
		return append([]string{"modules"}, base...), true, nil
	}
	return entries, usesBase, nil
}

// ---- Load and validation ----

// Load reads the manifest with the given code_id from farm.SpaceCode and
// checks it: a malformed code_id or manifest (unsorted or duplicate paths,
// entries outside a directory, links leaving the tree, JSON that is not
// canonical) gives an error wrapping farm.ErrInvalid, an unknown one
// farm.ErrNotFound. Callers may cache the result per code_id.
func Load(ctx context.Context, store farm.ContentStore, codeID string) (*Manifest, error) {
	if !farm.Digest(codeID).Valid() {
		return nil, fmt.Errorf("loading code %q: code_id must be a sha256 hex digest: %w", codeID, farm.ErrInvalid)
	}
	data, err := store.Get(ctx, farm.SpaceCode, farm.Digest(codeID))
	if err != nil {
		return nil, fmt.Errorf("loading code %s: %w", codeID, err)
	}
	m, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("loading code %s: %w", codeID, err)
	}
	if m.CodeID() != codeID {
		return nil, fmt.Errorf("loading code %s: manifest digest is %s: %w", codeID, m.CodeID(), farm.ErrInvalid)
	}
	return m, nil
}

// Parse decodes and checks a manifest's canonical JSON (see Load).
func Parse(data []byte) (*Manifest, error) {
	m := &Manifest{}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(m); err != nil {
		return nil, fmt.Errorf("parsing manifest: %v: %w", err, farm.ErrInvalid)
	}
	if err := m.validate(); err != nil {
		return nil, fmt.Errorf("checking manifest of %q: %w", m.Environment, err)
	}
	enc, err := m.Encode()
	if err != nil {
		return nil, err
	}
	if !bytes.Equal(enc, data) {
		return nil, fmt.Errorf("manifest of %q is not in canonical form: %w", m.Environment, farm.ErrInvalid)
	}
	return m, nil
}

func invalid(format string, args ...any) error {
	return fmt.Errorf(format+": %w", append(args, farm.ErrInvalid)...)
}

// validPath reports whether p is a clean, relative, slash-separated path.
func validPath(p string) bool {
	return p != "" && p != "." && fs.ValidPath(p) && utf8.ValidString(p) && !strings.ContainsRune(p, 0)
}

func (m *Manifest) validate() error {
	if m.Format != ManifestFormat {
		return invalid("unsupported manifest format %d (want %d)", m.Format, ManifestFormat)
	}
	if err := farm.ValidateEnvironment(m.Environment); err != nil {
		return err
	}
	for _, p := range m.Modulepath {
		if p != "" && !validPath(p) {
			return invalid("modulepath entry %q is not a relative path", p)
		}
	}
	for i, e := range m.Entries {
		if !validPath(e.Path) {
			return invalid("entry path %q is not a clean relative path", e.Path)
		}
		if i > 0 && m.Entries[i-1].Path >= e.Path {
			return invalid("entries not sorted or duplicated at %q", e.Path)
		}
		if e.Mode&^fs.ModePerm != 0 {
			return invalid("entry %q: mode %o has more than permission bits", e.Path, uint32(e.Mode))
		}
		switch e.Type {
		case TypeFile:
			if !e.SHA256.Valid() || e.Target != "" || e.Size < 0 {
				return invalid("file %q needs a sha256, a size and no target", e.Path)
			}
		case TypeDirectory:
			if e.SHA256 != "" || e.Target != "" || e.Size != 0 {
				return invalid("directory %q has file or link fields", e.Path)
			}
		case TypeLink:
			if e.Target == "" || e.SHA256 != "" || e.Size != 0 || strings.ContainsRune(e.Target, 0) {
				return invalid("link %q needs a target and nothing else", e.Path)
			}
		default:
			return invalid("entry %q has unknown type %q", e.Path, e.Type)
		}
	}
	m.prepare()
	for _, e := range m.Entries {
		if dir, _ := splitParent(e.Path); dir != "" {
			if p, ok := m.Entry(dir); !ok || p.Type != TypeDirectory {
				return invalid("entry %q is not inside a directory entry", e.Path)
			}
		}
	}
	if err := m.checkBaseDirs(); err != nil {
		return err
	}
	return m.checkLinks(nil)
}

// checkLinks fails when a link is absolute or resolves outside its tree:
// the environment, or for a link in a global module directory that
// directory (the environment's own links may not reach into
// BaseModulepathDir either). Dangling links and loops are allowed; serving
// them fails. Errors name a link by show(path) when show is set.
func (m *Manifest) checkLinks(show func(string) string) error {
	for _, e := range m.Entries {
		if e.Type != TypeLink {
			continue
		}
		tree, where, name := treeOf(e.Path), "the environment", e.Path
		if tree != "" {
			where = "its global module directory"
		}
		if show != nil {
			name = show(e.Path)
		}
		if strings.HasPrefix(e.Target, "/") {
			return invalid("link %s points to the absolute path %s; links must stay inside %s", name, e.Target, where)
		}
		dir, _ := splitParent(e.Path)
		lexical := path.Join(dir, e.Target)
		if lexical == ".." || strings.HasPrefix(lexical, "../") || !within(lexical, tree) || (tree == "" && within(lexical, BaseModulepathDir)) {
			return invalid("link %s -> %s leaves %s", name, e.Target, where)
		}
		real, _, err := m.walkIn(e.Path, true, tree)
		if errors.Is(err, errEscape) || (err == nil && tree == "" && within(real, BaseModulepathDir)) {
			return invalid("link %s -> %s leaves %s", name, e.Target, where)
		}
	}
	return nil
}

// ---- path resolution ----

var (
	errEscape = errors.New("path leaves the environment")
	errLoop   = errors.New("too many levels of symbolic links")
)

const maxLinkHops = 40

// rootEntry stands for the environment directory itself.
var rootEntry = Entry{Path: "", Type: TypeDirectory, Mode: 0o755}

// walk resolves p (slash-separated, relative to the environment, "" for the
// environment itself) the way the kernel does: links in leading components
// are followed, the last one only when follow is set. It returns the real
// path and its entry; errors wrap farm.ErrNotFound, or farm.ErrInvalid with
// errEscape or errLoop.
func (m *Manifest) walk(p string, follow bool) (string, Entry, error) {
	return m.walkIn(p, follow, "")
}

// walkIn is walk where ".." out of the directory floor (which p is inside)
// escapes as ".." out of the environment does.
func (m *Manifest) walkIn(p string, follow bool, floor string) (string, Entry, error) {
	m.prepare()
	comps := strings.Split(p, "/")
	cur := ""
	hops := 0
	for len(comps) > 0 {
		c := comps[0]
		comps = comps[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			if cur == "" || cur == floor {
				return "", Entry{}, fmt.Errorf("%s: %w: %w", p, errEscape, farm.ErrInvalid)
			}
			cur, _ = splitParent(cur)
			continue
		}
		next := c
		if cur != "" {
			next = cur + "/" + c
		}
		i, ok := m.index[next]
		if !ok {
			return "", Entry{}, fmt.Errorf("%s: %w", p, farm.ErrNotFound)
		}
		e := m.Entries[i]
		if e.Type == TypeLink && (len(comps) > 0 || follow) {
			if hops++; hops > maxLinkHops {
				return "", Entry{}, fmt.Errorf("%s: %w: %w", p, errLoop, farm.ErrInvalid)
			}
			if strings.HasPrefix(e.Target, "/") {
				return "", Entry{}, fmt.Errorf("%s: %w: %w", p, errEscape, farm.ErrInvalid)
			}
			comps = append(strings.Split(e.Target, "/"), comps...)
			continue // the target is relative to the link's directory, cur
		}
		if len(comps) > 0 && e.Type != TypeDirectory {
			return "", Entry{}, fmt.Errorf("%s: %s is not a directory: %w", p, next, farm.ErrNotFound)
		}
		cur = next
	}
	if cur == "" {
		return "", rootEntry, nil
	}
	return cur, m.Entries[m.index[cur]], nil
}

// ---- concurrency ----

// parallel runs fn for 0..n-1 on up to Concurrency goroutines and returns
// the first error; the others stop early through ctx.
func parallel(ctx context.Context, n int, fn func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	work := make(chan int)
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	workers := min(Concurrency, n)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				if err := fn(ctx, i); err != nil {
					once.Do(func() { first = err; cancel() })
				}
			}
		}()
	}
feed:
	for i := 0; i < n; i++ {
		select {
		case work <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(work)
	wg.Wait()
	if first != nil {
		return first
	}
	return ctx.Err()
}

package code

import (
	"context"
	"fmt"
	"path"
	"regexp"
	"strings"

	"github.com/compilefarm/compilefarm/pkg/farm"
)

// Mount names Puppet 7 serves by default.
const (
	MountModules     = "modules"     // modules/<module>/<path> → <module>/files/<path>
	MountPlugins     = "plugins"     // merged <module>/lib trees
	MountPluginFacts = "pluginfacts" // merged <module>/facts.d trees
	MountLocales     = "locales"     // merged <module>/locales trees
	MountTasks       = "tasks"       // tasks/<module>/<file> → <module>/tasks/<file>
)

// mergedMounts maps the merged mounts to the module subdirectory they serve.
var mergedMounts = map[string]string{
	MountPlugins:     "lib",
	MountPluginFacts: "facts.d",
	MountLocales:     "locales",
}

// Module is a module of the environment's modulepath.
type Module struct {
	Name string
	// Dir is the module's directory relative to the environment, as found
	// on the modulepath (not resolved through links).
	Dir string
}

var (
	moduleNameRE = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)
	mountNameRE  = regexp.MustCompile(`^[-A-Za-z0-9_]+$`)
	staticPathRE = regexp.MustCompile(`^[^/]+/[^/]+/files/.+`)
)

func join(dir, name string) string {
	switch {
	case dir == "":
		return name
	case name == "":
		return dir
	}
	return dir + "/" + name
}

// isDir reports whether p exists and is a directory, following links.
func (m *Manifest) isDir(p string) bool {
	_, e, err := m.walk(p, true)
	return err == nil && e.Type == TypeDirectory
}

// exists reports whether p exists, following links (Puppet's exist?).
func (m *Manifest) exists(p string) bool {
	_, _, err := m.walk(p, true)
	return err == nil
}

// ModuleDirs returns the modulepath directories that exist, in order, as
// Puppet's Environment#modulepath does.
func (m *Manifest) ModuleDirs() []string {
	var out []string
	for _, d := range m.Modulepath {
		if m.isDir(d) {
			out = append(out, d)
		}
	}
	return out
}

// Modules returns the environment's modules: directories with a valid module
// name in each modulepath directory (names in byte order), the first of a
// name winning.
func (m *Manifest) Modules() []Module {
	return append([]Module(nil), m.moduleList()...)
}

// moduleList returns the cached module list (not to be modified).
func (m *Manifest) moduleList() []Module {
	m.modulesOnce.Do(func() { m.modules = m.findModules() })
	return m.modules
}

func (m *Manifest) findModules() []Module {
	seen := map[string]bool{}
	var out []Module
	for _, d := range m.ModuleDirs() {
		real, _, err := m.walk(d, true)
		if err != nil {
			continue
		}
		for _, name := range m.children[real] {
			if seen[name] || !moduleNameRE.MatchString(name) || !m.isDir(join(d, name)) {
				continue
			}
			seen[name] = true
			out = append(out, Module{Name: name, Dir: join(d, name)})
		}
	}
	return out
}

// Module returns the module called name.
func (m *Manifest) Module(name string) (Module, bool) {
	for _, mod := range m.moduleList() {
		if mod.Name == name {
			return mod, true
		}
	}
	return Module{}, false
}

// cleanRel checks a request path and cleans it: NUL, backslashes and ".."
// components are invalid, empty and "." components are dropped.
func cleanRel(rel string) (string, error) {
	if strings.ContainsAny(rel, "\x00\\") {
		return "", fmt.Errorf("path %q contains NUL or a backslash: %w", rel, farm.ErrInvalid)
	}
	var parts []string
	for _, c := range strings.Split(rel, "/") {
		switch c {
		case "", ".":
		case "..":
			return "", fmt.Errorf("path %q contains '..': %w", rel, farm.ErrInvalid)
		default:
			parts = append(parts, c)
		}
	}
	return strings.Join(parts, "/"), nil
}

// SplitKey splits a file server request key ("modules/pupdemo/static.txt",
// the part of /puppet/v3/file_content/<key> after the endpoint) into its
// mount and cleaned path, as Puppet's Configuration#split_path does. A key
// with an invalid mount name (so also an absolute one), NUL, backslash or
// ".." gives an error wrapping farm.ErrInvalid.
func SplitKey(key string) (mount, rel string, err error) {
	mount, rel, _ = strings.Cut(key, "/")
	if !mountNameRE.MatchString(mount) {
		return "", "", fmt.Errorf("invalid mount %q in %q: %w", mount, key, farm.ErrInvalid)
	}
	if rel, err = cleanRel(rel); err != nil {
		return "", "", err
	}
	return mount, rel, nil
}

// find resolves a mount and path to the one location Puppet's Mount#find
// gives: an environment-relative path that exists (following links).
func (m *Manifest) find(mount, rel string) (string, error) {
	switch mount {
	case MountModules, MountTasks:
		if rel == "" {
			return "", fmt.Errorf("no module given for mount %s: %w", mount, farm.ErrInvalid)
		}
		name, sub, _ := strings.Cut(rel, "/")
		mod, ok := m.Module(name)
		if !ok {
			return "", fmt.Errorf("no module %q in environment %s: %w", name, m.Environment, farm.ErrNotFound)
		}
		dir := "files"
		if mount == MountTasks {
			dir = "tasks"
		}
		p := join(join(mod.Dir, dir), sub)
		if !m.exists(p) {
			return "", fmt.Errorf("%s/%s: %w", mount, rel, farm.ErrNotFound)
		}
		return p, nil
	}
	if sub, ok := mergedMounts[mount]; ok {
		for _, mod := range m.moduleList() {
			if p := join(join(mod.Dir, sub), rel); m.exists(p) {
				return p, nil
			}
		}
		return "", fmt.Errorf("%s/%s: %w", mount, rel, farm.ErrNotFound)
	}
	return "", fmt.Errorf("no mount %q: %w", mount, farm.ErrNotFound)
}

// search resolves a mount and path to the search roots Puppet's
// Mount#search gives. For merged mounts the path is ignored (Puppet returns
// every module's directory) and, when no module has the directory, the
// modulepath directories are returned with recurse forced off; when the
// modulepath is empty too, no roots (and no error): Puppet then searches
// its codedir, recurse off, so an environment without modules answers
// with that one directory (see Files.codeDirMetadata).
func (m *Manifest) search(mount, rel string) (roots []string, noRecurse bool, err error) {
	sub, merged := mergedMounts[mount]
	if !merged {
		p, err := m.find(mount, rel)
		if err != nil {
			return nil, false, err
		}
		return []string{p}, false, nil
	}
	for _, mod := range m.moduleList() {
		if p := join(mod.Dir, sub); m.exists(p) {
			roots = append(roots, p)
		}
	}
	if len(roots) > 0 {
		return roots, false, nil
	}
	return m.ModuleDirs(), true, nil
}

// codeDirMetadata is the one entry Puppet's merged mounts list for an
// environment with an empty modulepath: its codedir, a directory. The
// codedir is the parent of the environmentpath that holds EnvDir
// (/compilefarm for /compilefarm/environments/<env>).
func (f *Files) codeDirMetadata(ctx context.Context, opts MetadataOptions) (FileMetadata, error) {
	md, err := f.collect(ctx, found{rel: ".", entry: rootEntry}, opts)
	md.Path = path.Dir(path.Dir(f.EnvironmentDir()))
	return md, err
}

// Lookup finds the file that the file server serves as mount/rel (the
// file_content endpoint: "modules", "pupdemo/static.txt"), following links,
// so the caller can stream its content (Entry.SHA256) from the content
// store. Errors wrap farm.ErrInvalid for a bad path or something that is not
// a file, farm.ErrNotFound when nothing is there.
func (m *Manifest) Lookup(mount, rel string) (Entry, error) {
	if !mountNameRE.MatchString(mount) {
		return Entry{}, fmt.Errorf("invalid mount %q: %w", mount, farm.ErrInvalid)
	}
	rel, err := cleanRel(rel)
	if err != nil {
		return Entry{}, err
	}
	p, err := m.find(mount, rel)
	if err != nil {
		return Entry{}, err
	}
	return m.fileAt(p)
}

// LookupStatic finds the file that static_file_content serves for path, the
// environment-relative form of a static catalog's content_uri:
// <modulepath dir>/<module>/files/<path>, e.g. "modules/pupdemo/files/static.txt".
// Other paths are refused with farm.ErrInvalid, as Puppet Server refuses them;
// so are paths in the global module directories, which are outside the
// environment for Puppet Server too (their files are not inlined in static
// catalogs, and agents fetch them through the modules mount).
func (m *Manifest) LookupStatic(path string) (Entry, error) {
	p, err := cleanRel(path)
	if err != nil {
		return Entry{}, err
	}
	if !staticPathRE.MatchString(p) || within(p, BaseModulepathDir) {
		return Entry{}, fmt.Errorf("static content path %q is not a file within the files directory of a module: %w", path, farm.ErrInvalid)
	}
	return m.fileAt(p)
}

func (m *Manifest) fileAt(p string) (Entry, error) {
	_, e, err := m.walk(p, true)
	if err != nil {
		return Entry{}, err
	}
	if e.Type != TypeFile {
		return Entry{}, fmt.Errorf("%s is a %s, not a file: %w", p, e.Type, farm.ErrInvalid)
	}
	return e, nil
}

package code

import (
	"strconv"
	"strings"
)

// BaseModulepathDir is the directory of a snapshot that holds copies of the
// global module directories ($basemodulepath) the environment's modulepath
// uses: the n-th (from 0) as BaseModulepathDir/<n>. A name starting with a
// dot is never a module name, a manifest Puppet loads by default, nor a
// file Puppet reads in an environment; an environment directory holding it
// cannot be snapshotted.
const BaseModulepathDir = ".basemodulepath"

// baseDirName is the snapshot path of the n-th global module directory.
func baseDirName(n int) string { return BaseModulepathDir + "/" + strconv.Itoa(n) }

// baseDirNames lists the snapshot paths of n global module directories.
func baseDirNames(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = baseDirName(i)
	}
	return out
}

// within reports whether the slash-separated path p is tree or below it;
// every path is within the tree "" (the environment).
func within(p, tree string) bool {
	return tree == "" || p == tree || strings.HasPrefix(p, tree+"/")
}

// treeOf returns the tree that links at p must stay inside:
// BaseModulepathDir/<n> for the files of a global module directory, ""
// (the environment) for everything else.
func treeOf(p string) string {
	rest, ok := strings.CutPrefix(p, BaseModulepathDir+"/")
	if !ok {
		return ""
	}
	n, _, _ := strings.Cut(rest, "/")
	return BaseModulepathDir + "/" + n
}

// BaseDirs returns the global module directories snapshotted with the
// environment, in $basemodulepath order, as paths in the snapshot
// (BaseModulepathDir/0, ...); none when its modulepath does not use
// $basemodulepath.
func (m *Manifest) BaseDirs() []string {
	m.prepare()
	return baseDirNames(len(m.children[BaseModulepathDir]))
}

// checkBaseDirs checks that BaseModulepathDir, when present, is a directory
// holding only the directories 0, 1, ... n-1.
func (m *Manifest) checkBaseDirs() error {
	m.prepare()
	e, ok := m.Entry(BaseModulepathDir)
	if !ok {
		return nil
	}
	if e.Type != TypeDirectory {
		return invalid("%s is a %s, not a directory", BaseModulepathDir, e.Type)
	}
	names := m.children[BaseModulepathDir]
	for i := range names {
		p := baseDirName(i)
		if e, ok := m.Entry(p); !ok || e.Type != TypeDirectory {
			return invalid("%s must hold the directories 0 to %d and nothing else", BaseModulepathDir, len(names)-1)
		}
	}
	return nil
}

// PublicBaseDir is the path catalogs, file metadata and errors show for the
// n-th (from 0) global module directory, whatever checkout compiled them:
// /compilefarm/modules for the first, as Puppet Server shows
// $codedir/modules, then /compilefarm/modules2, /compilefarm/modules3, ...
func PublicBaseDir(n int) string {
	if n == 0 {
		return "/compilefarm/modules"
	}
	return "/compilefarm/modules" + strconv.Itoa(n+1)
}

// publicBaseDirs lists the public paths of n global module directories.
func publicBaseDirs(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = PublicBaseDir(i)
	}
	return out
}

package puppet

import (
	"crypto/sha256"
	"embed"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/compilefarm/compilefarm/internal/atomicfile"
)

// workerFiles is the Ruby worker: ruby/worker.rb, the script Ruby runs (the
// line protocol and the compile loop), and the files it loads from
// ruby/lib, one per concern: fact-read recording (compilefarm/reads.rb and
// compilefarm/reads/), exported resources (compilefarm/exports.rb, with
// their storeconfigs terminus where Puppet's autoloader finds it,
// puppet/indirector/resource/compilefarm.rb), encrypted Hiera data
// (compilefarm/eyaml.rb) and PuppetDB's termini configured and recorded
// (compilefarm/puppetdb.rb).
//
//go:embed ruby
var workerFiles embed.FS

const (
	// workerRoot is the directory of workerFiles that holds the worker.
	workerRoot = "ruby"
	// workerScript is the script Ruby runs, relative to workerRoot.
	workerScript = "worker.rb"
)

// writeWorker writes the worker's files under dir and returns the path of
// the script to run. They go to a directory named after their content,
// dir/ruby-<digest>, which is written whole under a temporary name and
// then renamed into place: a worker never loads a half-written file, nor a
// mix of two builds' files when engines of different builds share dir, and
// an engine of the same build reuses what another one wrote.
func writeWorker(dir string) (string, error) {
	digest, err := workerDigest()
	if err != nil {
		return "", fmt.Errorf("hash embedded worker files: %w", err)
	}
	final := filepath.Join(dir, "ruby-"+digest)
	script := filepath.Join(final, workerScript)
	if _, err := os.Stat(script); err == nil {
		return script, nil
	}
	tmp, err := os.MkdirTemp(dir, ".ruby-*.tmp")
	if err != nil {
		return "", fmt.Errorf("create worker files directory: %w", err)
	}
	if err := copyWorkerFiles(tmp); err != nil {
		_ = os.RemoveAll(tmp)
		return "", err
	}
	if err := os.Rename(tmp, final); err != nil {
		_ = os.RemoveAll(tmp)
		// Another engine sharing dir renamed its identical copy first.
		if _, serr := os.Stat(script); serr == nil {
			return script, nil
		}
		return "", fmt.Errorf("move worker files into place at %s: %w", final, err)
	}
	if err := atomicfile.SyncDir(dir); err != nil {
		return "", fmt.Errorf("sync %s: %w", dir, err)
	}
	return script, nil
}

// copyWorkerFiles writes workerFiles' tree under workerRoot to dir.
func copyWorkerFiles(dir string) error {
	if err := os.Chmod(dir, 0o750); err != nil {
		return fmt.Errorf("worker files directory: %w", err)
	}
	return fs.WalkDir(workerFiles, workerRoot, func(name string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel := filepath.FromSlash(name[len(workerRoot):])
		if d.IsDir() {
			if rel == "" {
				return nil
			}
			if err := os.Mkdir(filepath.Join(dir, rel), 0o750); err != nil {
				return fmt.Errorf("create worker files directory: %w", err)
			}
			return nil
		}
		data, err := workerFiles.ReadFile(name)
		if err != nil {
			return err
		}
		if err := atomicfile.Write(filepath.Join(dir, rel), data, 0o644); err != nil {
			return fmt.Errorf("write worker file: %w", err)
		}
		return nil
	})
}

// workerDigest names the content of workerFiles: a hash of every file's
// path and bytes, in walk (lexical) order.
func workerDigest() (string, error) {
	h := sha256.New()
	err := fs.WalkDir(workerFiles, workerRoot, func(name string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := workerFiles.ReadFile(name)
		if err != nil {
			return err
		}
		for _, b := range [][]byte{[]byte(name), data} {
			_ = binary.Write(h, binary.BigEndian, uint64(len(b)))
			h.Write(b)
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)[:8]), nil
}

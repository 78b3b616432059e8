package puppet

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// maxRubyLines bounds every file of the Ruby worker: a file that grows past
// it holds more than one concern and is split, as Go files are.
const maxRubyLines = 600

// embeddedRuby returns the worker's embedded files by path under
// workerRoot.
func embeddedRuby(t *testing.T) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	err := fs.WalkDir(workerFiles, workerRoot, func(name string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := workerFiles.ReadFile(name)
		files[strings.TrimPrefix(name, workerRoot+"/")] = data
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

func TestWorkerFileLayout(t *testing.T) {
	files := embeddedRuby(t)
	for _, want := range []string{
		workerScript,
		// Where Puppet's autoloader looks for the storeconfigs backend
		// "compilefarm" of the Puppet::Resource indirection.
		"lib/puppet/indirector/resource/compilefarm.rb",
	} {
		if _, ok := files[want]; !ok {
			t.Errorf("%s/%s is not embedded", workerRoot, want)
		}
	}
	for name, data := range files {
		if !strings.HasSuffix(name, ".rb") {
			t.Errorf("%s/%s: the worker directory holds Ruby files only", workerRoot, name)
			continue
		}
		if n := bytes.Count(data, []byte("\n")); n > maxRubyLines {
			t.Errorf("%s/%s has %d lines, more than %d: split it by concern", workerRoot, name, n, maxRubyLines)
		}
	}
}

// TestWriteWorker writes the worker as engines sharing a WorkDir do, at
// once: all get the same complete copy and nothing is left half-written.
func TestWriteWorker(t *testing.T) {
	dir := t.TempDir()
	const engines = 4
	scripts := make([]string, engines)
	errs := make([]error, engines)
	var wg sync.WaitGroup
	for i := range engines {
		wg.Go(func() { scripts[i], errs[i] = writeWorker(dir) })
	}
	wg.Wait()
	for i := range engines {
		if errs[i] != nil {
			t.Fatalf("writeWorker: %v", errs[i])
		}
		if scripts[i] != scripts[0] {
			t.Fatalf("writeWorker wrote %s and %s", scripts[0], scripts[i])
		}
	}
	again, err := writeWorker(dir)
	if err != nil || again != scripts[0] {
		t.Fatalf("writeWorker again: %s, %v; want %s", again, err, scripts[0])
	}

	root := filepath.Dir(scripts[0])
	if filepath.Base(scripts[0]) != workerScript || filepath.Dir(root) != dir {
		t.Fatalf("script %s, want %s/<name>/%s", scripts[0], dir, workerScript)
	}
	files := embeddedRuby(t)
	for name, want := range files {
		got, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(name)))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s: %d bytes, %v; want the embedded %d bytes", name, len(got), err, len(want))
		}
	}
	var written int
	err = filepath.WalkDir(root, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			written++
		}
		return err
	})
	if err != nil || written != len(files) {
		t.Errorf("%d files written (%v), want %d", written, err, len(files))
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Errorf("WorkDir holds %q, want only %s", names, filepath.Base(root))
	}
}

// TestWorkerRubySyntax checks every file of the worker with ruby -wc:
// syntax errors and warnings of a file that no test happens to load.
func TestWorkerRubySyntax(t *testing.T) {
	if testing.Short() {
		t.Skip("runs ruby; skipped with -short")
	}
	script, err := writeWorker(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Dir(script)
	for name := range embeddedRuby(t) {
		t.Run(name, func(t *testing.T) {
			out, err := exec.Command(DefaultRuby, "-wc", filepath.Join(root, filepath.FromSlash(name))).CombinedOutput()
			if err != nil {
				var exit *exec.ExitError
				if !errors.As(err, &exit) {
					t.Fatalf("run %s: %v (%s)", DefaultRuby, err, installHint)
				}
				t.Fatalf("ruby -wc: %v\n%s", err, out)
			}
			if got := strings.TrimSpace(string(out)); got != "Syntax OK" {
				t.Errorf("ruby -wc says:\n%s", got)
			}
		})
	}
}

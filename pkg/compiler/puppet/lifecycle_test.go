package puppet

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/compilefarm/compilefarm/pkg/compiler"
	"github.com/compilefarm/compilefarm/pkg/farm"
)

// TestWorkerLifecycle drives one single-worker engine through caching, a
// crash, a hang, a cancelled compile and Close, in that order.
func TestWorkerLifecycle(t *testing.T) {
	if testing.Short() {
		t.Skip("runs Ruby Puppet; skipped with -short")
	}
	e := newEngine(t, Options{Workers: 1, Timeout: 5 * time.Second})
	w := e.workers[0]
	behaviours := absPath(t, "testdata/envs/behaviours")
	req := func(certname string) compiler.Request {
		return compiler.Request{Certname: certname, Environment: "production", CodeID: "behaviours", EnvironmentPath: behaviours}
	}
	checkOK := func(t *testing.T) {
		t.Helper()
		c := compileOK(t, e, req("ok.example.test"))
		if c.resource("Notify", "ok") == nil {
			t.Errorf("Notify[ok] missing: %+v", c.Resources)
		}
	}

	t.Run("parsed code is reused within a code_id", func(t *testing.T) {
		envpath := t.TempDir()
		site := filepath.Join(envpath, "production/manifests/site.pp")
		writeTree(t, filepath.Join(envpath, "production"), map[string]string{
			"manifests/site.pp": "node default { notify { 'first': } }\n",
		})
		r := compiler.Request{Certname: "n1.example.test", Environment: "production", CodeID: "c1", EnvironmentPath: envpath}
		if c := compileOK(t, e, r); c.resource("Notify", "first") == nil {
			t.Fatalf("first compile: %+v", c.Resources)
		}
		// A code_id's directory never changes; if it did, the worker would
		// not notice, because it keeps the parsed environment.
		writeTree(t, filepath.Join(envpath, "production"), map[string]string{
			"manifests/site.pp": "node default { notify { 'second': } }\n",
		})
		future := time.Now().Add(time.Hour)
		if err := os.Chtimes(site, future, future); err != nil {
			t.Fatal(err)
		}
		if c := compileOK(t, e, r); c.resource("Notify", "first") == nil {
			t.Errorf("same code_id re-read its code: %+v", c.Resources)
		}
		// The same files under a new environmentpath (a new code_id) are
		// read afresh.
		fresh := snapshot(t, filepath.Join(envpath, "production"), "production")
		r.CodeID, r.EnvironmentPath = "c2", fresh
		if c := compileOK(t, e, r); c.resource("Notify", "second") == nil {
			t.Errorf("new code_id did not read its code: %+v", c.Resources)
		}
	})

	t.Run("least recently used snapshots are evicted", func(t *testing.T) {
		// recentSize+1 snapshots: compiling them all evicts the first, so
		// a change to it (which never happens to a real snapshot) shows.
		var paths []string
		for range recentSize + 1 {
			envpath := t.TempDir()
			writeTree(t, filepath.Join(envpath, "production"), map[string]string{
				"manifests/site.pp": "node default { notify { 'v1': } }\n",
			})
			paths = append(paths, envpath)
		}
		compile := func(i int) catalog {
			return compileOK(t, e, compiler.Request{Certname: "n1.example.test", Environment: "production",
				CodeID: "lru-" + string(rune('a'+i)), EnvironmentPath: paths[i]})
		}
		compile(0)
		writeTree(t, filepath.Join(paths[0], "production"), map[string]string{
			"manifests/site.pp": "node default { notify { 'v2': } }\n",
		})
		if c := compile(0); c.resource("Notify", "v1") == nil {
			t.Errorf("cached snapshot was re-read: %+v", c.Resources)
		}
		for i := 1; i < len(paths); i++ {
			compile(i)
		}
		if c := compile(0); c.resource("Notify", "v2") == nil {
			t.Errorf("evicted snapshot was not re-read: %+v", c.Resources)
		}
	})

	t.Run("crash", func(t *testing.T) {
		oldPID := w.proc.pid
		_, err := e.Compile(t.Context(), req("crash.example.test"))
		if !errors.Is(err, farm.ErrTransient) {
			t.Fatalf("err = %v, want farm.ErrTransient", err)
		}
		var ce *compiler.CompileError
		if errors.As(err, &ce) {
			t.Errorf("a crash is not a compile error: %v", err)
		}
		checkOK(t)
		if w.proc.pid == oldPID {
			t.Errorf("worker was not restarted (pid %d)", oldPID)
		}
		assertGone(t, oldPID)
	})

	t.Run("hang past Timeout", func(t *testing.T) {
		oldPID := w.proc.pid
		_, err := e.Compile(t.Context(), req("hang.example.test"))
		if !errors.Is(err, farm.ErrTransient) {
			t.Fatalf("err = %v, want farm.ErrTransient", err)
		}
		assertGone(t, oldPID)
		checkOK(t)
	})

	t.Run("context cancelled", func(t *testing.T) {
		oldPID := w.proc.pid
		ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
		defer cancel()
		_, err := e.Compile(ctx, req("hang.example.test"))
		if !errors.Is(err, farm.ErrTransient) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err = %v, want farm.ErrTransient and context.DeadlineExceeded", err)
		}
		assertGone(t, oldPID)
		checkOK(t)
	})

	t.Run("close", func(t *testing.T) {
		pid := w.proc.pid
		if err := e.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		assertGone(t, pid)
		if err := e.Close(); err != nil {
			t.Errorf("second Close: %v", err)
		}
		_, err := e.Compile(t.Context(), req("ok.example.test"))
		if !errors.Is(err, farm.ErrTransient) {
			t.Errorf("Compile after Close: err = %v, want farm.ErrTransient", err)
		}
	})
}

// assertGone fails unless no process has pid any more.
func assertGone(t *testing.T, pid int) {
	t.Helper()
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("process %d still exists (kill -0: %v)", pid, err)
	}
}

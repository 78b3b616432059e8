package ca_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/compilefarm/compilefarm/pkg/ca"
	"github.com/compilefarm/compilefarm/pkg/farm"
	"github.com/compilefarm/compilefarm/pkg/farm/farmtest"
)

func TestDirStoreContract(t *testing.T) {
	farmtest.TestCAStore(t, func(t *testing.T) farm.CAStore {
		s, err := ca.OpenDirStore(filepath.Join(t.TempDir(), "ca"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	})
}

func TestDirStoreShared(t *testing.T) {
	farmtest.TestSharedCA(t, func(t *testing.T) (farm.CA, farm.CA) {
		dir := filepath.Join(t.TempDir(), "ca")
		open := func() farm.CA {
			c, err := ca.Open(t.Context(), dir, ca.Options{KeyBits: 2048, Autosign: true})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			return c
		}
		return open(), open()
	})
}

func TestKeyFileContract(t *testing.T) {
	farmtest.TestCAKeySource(t, func(t *testing.T) farm.CAKeySource {
		return ca.KeyFile(filepath.Join(t.TempDir(), "ca_key.pem"))
	})
}

// The key file is the process owner's alone: mode 0600.
func TestKeyFileMode(t *testing.T) {
	f := ca.KeyFile(filepath.Join(t.TempDir(), "ca_key.pem"))
	if err := f.CreateKey(t.Context(), []byte("-----BEGIN PRIVATE KEY-----\n")); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(string(f))
	if err != nil {
		t.Fatal(err)
	}
	if mode := fi.Mode().Perm(); mode != 0o600 {
		t.Fatalf("key file mode %v, want 0600", mode)
	}
}

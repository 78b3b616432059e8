package cadir

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/compilefarm/compilefarm/pkg/ca"
	"github.com/compilefarm/compilefarm/pkg/farm"
	"github.com/compilefarm/compilefarm/pkg/farm/farmtest"
	"github.com/compilefarm/compilefarm/pkg/pki"
)

func TestStoreContract(t *testing.T) {
	farmtest.TestCAStore(t, func(t *testing.T) farm.CAStore {
		s, err := Open(filepath.Join(t.TempDir(), "ca"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	})
}

func TestStoreShared(t *testing.T) {
	farmtest.TestSharedCA(t, func(t *testing.T) (farm.CA, farm.CA) {
		dir := filepath.Join(t.TempDir(), "ca")
		open := func() farm.CA {
			c, err := OpenCA(t.Context(), dir, ca.Options{KeyBits: 2048, Autosign: true})
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
	t.Run("CAKeySource", func(t *testing.T) {
		farmtest.TestCAKeySource(t, func(t *testing.T) func() farm.CAKeySource {
			path := filepath.Join(t.TempDir(), "ca_key.pem")
			return func() farm.CAKeySource { return KeyFile(path) }
		})
	})
	t.Run("CAKeyImporter", func(t *testing.T) {
		farmtest.TestCAKeyImporter(t, func(t *testing.T) func() farm.CAKeyImporter {
			path := filepath.Join(t.TempDir(), "ca_key.pem")
			return func() farm.CAKeyImporter { return KeyFile(path) }
		})
	})
}

// The key file is the process owner's alone: mode 0600, made or imported.
func TestKeyFileMode(t *testing.T) {
	_, keyPEM, err := pki.NewRSAKey(farm.MinCAKeyBits)
	if err != nil {
		t.Fatal(err)
	}
	for name, store := range map[string]func(KeyFile) error{
		"generated": func(f KeyFile) error { return f.GenerateKey(t.Context(), farm.MinCAKeyBits) },
		"imported":  func(f KeyFile) error { return f.ImportKey(t.Context(), keyPEM) },
	} {
		f := KeyFile(filepath.Join(t.TempDir(), "ca_key.pem"))
		if err := store(f); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		fi, err := os.Stat(string(f))
		if err != nil {
			t.Fatal(err)
		}
		if mode := fi.Mode().Perm(); mode != 0o600 {
			t.Fatalf("%s key file mode %v, want 0600", name, mode)
		}
		if name == "imported" {
			if got, _ := os.ReadFile(string(f)); string(got) != string(keyPEM) {
				t.Fatalf("the imported key file is not the bytes imported")
			}
		}
	}
}

func TestCAContract(t *testing.T) {
	farmtest.TestCA(t, func(t *testing.T) farm.CA { return openCA(t, ca.Options{}).CA })
}

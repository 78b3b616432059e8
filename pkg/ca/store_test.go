package ca_test

import (
	"path/filepath"
	"testing"

	"github.com/compilefarm/compilefarm/pkg/ca"
	"github.com/compilefarm/compilefarm/pkg/ca/catest"
)

func TestDirStoreContract(t *testing.T) {
	catest.TestStore(t, func(t *testing.T) ca.Store {
		s, err := ca.OpenDirStore(filepath.Join(t.TempDir(), "ca"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	})
}

func TestDirStoreShared(t *testing.T) {
	catest.TestShared(t, func(t *testing.T) (*ca.CA, *ca.CA) {
		dir := filepath.Join(t.TempDir(), "ca")
		open := func() *ca.CA {
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

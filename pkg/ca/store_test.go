package ca_test

import (
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

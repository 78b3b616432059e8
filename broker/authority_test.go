package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/compilefarm/compilefarm/pkg/ca"
	"github.com/compilefarm/compilefarm/pkg/cadir"
	"github.com/compilefarm/compilefarm/pkg/farm"
	"github.com/compilefarm/compilefarm/pkg/memstore"
	"github.com/compilefarm/compilefarm/pkg/pki"
)

// signerOnly is a key source that cannot import, as a KMS key.
type signerOnly struct{ farm.CAKeySource }

func TestImportCAKey(t *testing.T) {
	key, keyPEM, err := pki.NewRSAKey(2048)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "ca_key.pem")
	if err := os.WriteFile(keyFile, keyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	garbage := filepath.Join(dir, "garbage.pem")
	if err := os.WriteFile(garbage, []byte("not a key"), 0o600); err != nil {
		t.Fatal(err)
	}
	holding := func(t *testing.T) farm.CAKeySource {
		k := memstore.NewCAKey()
		if err := k.GenerateKey(t.Context(), 2048); err != nil {
			t.Fatal(err)
		}
		return k
	}
	tests := []struct {
		name    string
		keys    func(t *testing.T) farm.CAKeySource
		file    string
		wantErr error  // nil: imported
		wantMsg string // in the error
	}{
		{"into an empty key file", func(t *testing.T) farm.CAKeySource { return cadir.KeyFile(filepath.Join(t.TempDir(), "k.pem")) }, keyFile, nil, ""},
		{"into a source holding that key (run again)", func(t *testing.T) farm.CAKeySource {
			k := memstore.NewCAKey()
			if err := k.ImportKey(t.Context(), keyPEM); err != nil {
				t.Fatal(err)
			}
			return k
		}, keyFile, nil, ""},
		{"into a source holding another key", holding, keyFile, farm.ErrConflict, "already holds another key"},
		{"into a source that cannot import", func(t *testing.T) farm.CAKeySource { return signerOnly{memstore.NewCAKey()} }, keyFile, farm.ErrInvalid, "cannot import a key"},
		{"a file that is no key", func(t *testing.T) farm.CAKeySource { return memstore.NewCAKey() }, garbage, farm.ErrInvalid, garbage},
		{"a missing file", func(t *testing.T) farm.CAKeySource { return memstore.NewCAKey() }, filepath.Join(dir, "missing.pem"), os.ErrNotExist, "missing.pem"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			keys := tt.keys(t)
			err := importCAKey(t.Context(), keys, tt.file)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) || !strings.Contains(err.Error(), tt.wantMsg) {
					t.Fatalf("importCAKey: err = %v, want %v mentioning %q", err, tt.wantErr, tt.wantMsg)
				}
				return
			}
			if err != nil {
				t.Fatalf("importCAKey: %v", err)
			}
			// The CA made next signs with the imported key.
			c, err := ca.Init(t.Context(), memstore.NewCAStore(), keys, ca.Options{ServerDir: t.TempDir(), KeyBits: 2048})
			if err != nil {
				t.Fatalf("Init after the import: %v", err)
			}
			defer c.Close()
			if !pki.PublicKeysEqual(c.CACert().PublicKey, key.Public()) {
				t.Fatalf("the CA's certificate does not carry the imported key")
			}
		})
	}
}

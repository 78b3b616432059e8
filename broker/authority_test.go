package main

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kms"

	"github.com/compilefarm/compilefarm/pkg/ca"
	"github.com/compilefarm/compilefarm/pkg/cadir"
	"github.com/compilefarm/compilefarm/pkg/farm"
	"github.com/compilefarm/compilefarm/pkg/kmskey"
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
		// Refused before any call to KMS: the client has no endpoint.
		{"into a KMS key", func(t *testing.T) farm.CAKeySource {
			return kmskey.NewKey(kms.New(kms.Options{Region: "us-east-1"}), "alias/x")
		},
			keyFile, farm.ErrInvalid, "KMS key alias/x cannot import a key; import into --ca-key-file or --ca-key-secret, or import the key material into a KMS key with AWS's ImportKeyMaterial (docs/operations.md)"},
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

// TestCAFlags: the CA choices of broker serve and of the operator verbs
// with --backend aws: one CA, and with --ca-table exactly one key source,
// each refusal saying what to give.
func TestCAFlags(t *testing.T) {
	tests := []struct {
		name string
		args []string
		err  string // "" when valid
	}{
		{"table and KMS key", []string{"--ca-table", "ca", "--ca-key-kms", "alias/compilefarm/prod/ca"}, ""},
		{"table and KMS key ARN", []string{"--ca-table", "ca", "--ca-key-kms", "arn:aws:kms:eu-west-1:111122223333:key/0b1c2d3e-1111-2222-3333-444455556666"}, ""},
		{"table and secret", []string{"--ca-table", "ca", "--ca-key-secret", "compilefarm/prod/ca-key"}, ""},
		{"table and file", []string{"--ca-table", "ca", "--ca-key-file", "/etc/ca_key.pem"}, ""},
		{"directory", []string{"--ca-dir", "/srv/ca"}, ""},
		{"upstream", []string{"--ca-upstream", "https://puppet:8140", "--ca-upstream-cacert", "ca.pem"}, ""},
		{"no CA", nil, "choose one CA: --ca-table (with --ca-key-kms, --ca-key-secret or --ca-key-file), --ca-dir, or --ca-upstream"},
		{"two CAs", []string{"--ca-table", "ca", "--ca-key-kms", "alias/x", "--ca-dir", "/srv/ca"}, "choose one CA"},
		{"table without a key", []string{"--ca-table", "ca"}, "--ca-table needs the CA key from one of --ca-key-kms"},
		{"KMS and secret", []string{"--ca-table", "ca", "--ca-key-kms", "alias/x", "--ca-key-secret", "s"},
			"--ca-table takes the CA key from one source, not --ca-key-kms and --ca-key-secret: keep only one"},
		{"KMS and file", []string{"--ca-table", "ca", "--ca-key-file", "k.pem", "--ca-key-kms", "alias/x"},
			"not --ca-key-kms and --ca-key-file"},
		{"all three", []string{"--ca-table", "ca", "--ca-key-file", "k.pem", "--ca-key-secret", "s", "--ca-key-kms", "alias/x"},
			"not --ca-key-kms, --ca-key-secret and --ca-key-file: keep only one"},
		{"KMS key with a directory", []string{"--ca-dir", "/srv/ca", "--ca-key-kms", "alias/x"}, "--ca-key-kms goes with --ca-table"},
		{"secret with an upstream", []string{"--ca-upstream", "https://puppet:8140", "--ca-key-secret", "s"}, "--ca-key-secret goes with --ca-table"},
		{"upstream's certificate without it", []string{"--ca-dir", "/srv/ca", "--ca-upstream-cacert", "ca.pem"}, "--ca-upstream-cacert goes with --ca-upstream"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var c caFlags
			fs := flag.NewFlagSet("serve", flag.ContinueOnError)
			c.register(fs)
			if err := fs.Parse(tt.args); err != nil {
				t.Fatal(err)
			}
			wantFlagErr(t, c.validate(), tt.err)
		})
	}
}

// TestCAInitFlags: broker ca init needs a table and exactly one key
// source, and refuses --import-key into a KMS key, pointing at AWS's own
// import.
func TestCAInitFlags(t *testing.T) {
	tests := []struct {
		name string
		args []string
		err  string // "" when valid
	}{
		{"KMS alias", []string{"--ca-table", "ca", "--ca-key-kms", "alias/compilefarm/ca", "--key-bits", "2048"}, ""},
		{"secret", []string{"--ca-table", "ca", "--ca-key-secret", "compilefarm/ca-key"}, ""},
		{"file", []string{"--ca-table", "ca", "--ca-key-file", "ca_key.pem"}, ""},
		{"import into a secret", []string{"--ca-table", "ca", "--ca-key-secret", "s", "--import-key", "ca_key.pem"}, ""},
		{"import into a file", []string{"--ca-table", "ca", "--ca-key-file", "k.pem", "--import-key", "ca_key.pem"}, ""},
		{"no table", []string{"--ca-key-kms", "alias/x"}, "--ca-table is required"},
		{"no key", []string{"--ca-table", "ca"}, "--ca-table needs the CA key from one of --ca-key-kms"},
		{"two keys", []string{"--ca-table", "ca", "--ca-key-kms", "alias/x", "--ca-key-secret", "s"}, "not --ca-key-kms and --ca-key-secret"},
		{"import into a KMS key", []string{"--ca-table", "ca", "--ca-key-kms", "alias/x", "--import-key", "ca_key.pem"},
			"--import-key cannot put a key into a KMS key (--ca-key-kms): import the key material with AWS's ImportKeyMaterial (docs/operations.md"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var f caInitFlags
			fs := flag.NewFlagSet("ca init", flag.ContinueOnError)
			f.register(fs)
			if err := fs.Parse(tt.args); err != nil {
				t.Fatal(err)
			}
			wantFlagErr(t, f.validate(), tt.err)
		})
	}
}

// wantFlagErr checks err is nil when want is "", else an error saying
// want.
func wantFlagErr(t *testing.T, err error, want string) {
	t.Helper()
	switch {
	case want == "" && err != nil:
		t.Fatalf("validate: %v", err)
	case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
		t.Fatalf("validate: %v, want %q...", err, want)
	}
}

// TestKeySource: each key flag opens its driver, named in messages by what
// the flag gave, without calling AWS.
func TestKeySource(t *testing.T) {
	cfg := aws.Config{Region: "us-east-1"}
	tests := []struct {
		flags caFlags
		want  string
	}{
		{caFlags{table: "ca", keyKMS: "alias/compilefarm/prod/ca"}, "KMS key alias/compilefarm/prod/ca"},
		{caFlags{table: "ca", keySecret: "compilefarm/prod/ca-key"}, "Secrets Manager secret compilefarm/prod/ca-key"},
		{caFlags{table: "ca", keyFile: "/etc/ca_key.pem"}, "file /etc/ca_key.pem"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			if got := tt.flags.keySource(cfg).String(); got != tt.want {
				t.Fatalf("keySource = %q, want %q", got, tt.want)
			}
		})
	}
	if _, ok := (&caFlags{keyKMS: "alias/x"}).keySource(cfg).(farm.CAKeyImporter); ok {
		t.Fatal("the KMS key source can import a key")
	}
}

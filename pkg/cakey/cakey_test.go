package cakey

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"

	"github.com/compilefarm/compilefarm/internal/emulator"
	"github.com/compilefarm/compilefarm/pkg/ca"
	"github.com/compilefarm/compilefarm/pkg/farm"
	"github.com/compilefarm/compilefarm/pkg/farm/farmtest"
	"github.com/compilefarm/compilefarm/pkg/memstore"
	"github.com/compilefarm/compilefarm/pkg/pki"
)

// emu is the Secrets Manager emulator (moto) the tests share.
var emu *emulator.Process

// TestMain runs one Secrets Manager emulator (moto) on a loopback port.
// Without it the tests fail, naming the script that checks for it.
func TestMain(m *testing.M) { emulator.Main(m, emulator.SecretsManager(&emu)) }

func client() *secretsmanager.Client {
	return secretsmanager.New(secretsmanager.Options{
		Region:       "us-east-1",
		Credentials:  credentials.NewStaticCredentialsProvider("test", "test", ""),
		BaseEndpoint: aws.String(emu.URL),
	})
}

var seq atomic.Int64

func secretName() string { return fmt.Sprintf("compilefarm/test/ca-key-%d", seq.Add(1)) }

// TestSecretContract runs farm.CAKeySource's and farm.CAKeyImporter's
// suites against secrets of the emulator, a new secret name per subtest.
func TestSecretContract(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the Secrets Manager emulator; skipped with -short")
	}
	t.Run("CAKeySource", func(t *testing.T) {
		farmtest.TestCAKeySource(t, func(t *testing.T) func() farm.CAKeySource {
			name := secretName()
			return func() farm.CAKeySource { return NewSecret(client(), name) }
		})
	})
	t.Run("CAKeyImporter", func(t *testing.T) {
		farmtest.TestCAKeyImporter(t, func(t *testing.T) func() farm.CAKeyImporter {
			name := secretName()
			return func() farm.CAKeyImporter { return NewSecret(client(), name) }
		})
	})
}

// A secret the infra stack made without a value gets the key as its first
// value, once. (That of racing first values exactly one wins rests on
// Secrets Manager refusing a second value under one client request token,
// which the emulator does not enforce: not tested here.)
func TestSecretWithoutValue(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the Secrets Manager emulator; skipped with -short")
	}
	ctx := t.Context()
	name := secretName()
	if _, err := client().CreateSecret(ctx, &secretsmanager.CreateSecretInput{Name: aws.String(name)}); err != nil {
		t.Fatalf("create empty secret: %v", err)
	}
	s := NewSecret(client(), name)
	if _, err := s.Signer(ctx); !errors.Is(err, farm.ErrNotFound) {
		t.Fatalf("Signer of a secret without a value: err = %v, want ErrNotFound", err)
	}
	if err := s.GenerateKey(ctx, farm.MinCAKeyBits); err != nil {
		t.Fatalf("GenerateKey into the empty secret: %v", err)
	}
	key, err := s.Signer(ctx)
	if err != nil {
		t.Fatalf("Signer after GenerateKey: %v", err)
	}
	if err := NewSecret(client(), name).GenerateKey(ctx, farm.MinCAKeyBits); !errors.Is(err, farm.ErrConflict) {
		t.Fatalf("a second GenerateKey: err = %v, want ErrConflict", err)
	}
	if again, err := s.Signer(ctx); err != nil || !pki.PublicKeysEqual(again.Public(), key.Public()) {
		t.Fatalf("Signer after a refused GenerateKey: %v, or another key", err)
	}
}

// Two processes creating the CA at once with the key in one secret end
// with one CA.
func TestCAWithSecretKey(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the Secrets Manager emulator; skipped with -short")
	}
	st := memstore.NewCAStore()
	name := secretName()
	open := func() (*ca.CA, error) {
		return ca.Init(t.Context(), st, NewSecret(client(), name),
			ca.Options{KeyBits: 2048, ServerDir: t.TempDir(), Logger: slog.New(slog.DiscardHandler)})
	}
	var wg sync.WaitGroup
	cas := make([]*ca.CA, 2)
	errs := make([]error, 2)
	for i := range cas {
		wg.Add(1)
		go func() { defer wg.Done(); cas[i], errs[i] = open() }()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatalf("Init: %v", err)
		}
	}
	a, _ := cas[0].CACertificate(t.Context())
	b, _ := cas[1].CACertificate(t.Context())
	if string(a) != string(b) {
		t.Fatalf("two CAs made from one secret")
	}
	// A secret holding another key is refused with a message naming it.
	other := NewSecret(client(), secretName())
	if err := other.GenerateKey(t.Context(), farm.MinCAKeyBits); err != nil {
		t.Fatal(err)
	}
	_, err := ca.New(t.Context(), st, other, ca.Options{ServerDir: t.TempDir(), Logger: slog.New(slog.DiscardHandler)})
	if err == nil || !strings.Contains(err.Error(), "Secrets Manager secret") || !strings.Contains(err.Error(), "does not match") {
		t.Fatalf("New with a secret that holds another key: err = %v, want one naming the secret", err)
	}
}

package cakey

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
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

func TestSecretKeySource(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the Secrets Manager emulator; skipped with -short")
	}
	ctx := t.Context()
	s := NewSecret(client(), secretName())
	if _, err := s.LoadKey(ctx); !errors.Is(err, farm.ErrNotFound) {
		t.Fatalf("LoadKey of a missing secret: err = %v, want ErrNotFound", err)
	}
	if err := s.CreateKey(ctx, []byte("KEY ONE")); err != nil {
		t.Fatalf("CreateKey: %v", err)
	}
	if got, err := s.LoadKey(ctx); err != nil || string(got) != "KEY ONE" {
		t.Fatalf("LoadKey = %q, %v; want KEY ONE", got, err)
	}
	if err := s.CreateKey(ctx, []byte("KEY TWO")); !errors.Is(err, farm.ErrConflict) {
		t.Fatalf("second CreateKey: err = %v, want ErrConflict", err)
	}
	if got, _ := s.LoadKey(ctx); string(got) != "KEY ONE" {
		t.Fatalf("a refused CreateKey changed the key to %q", got)
	}
}

// TestSecretContract runs farm.CAKeySource's suite against secrets of the
// emulator, a new secret name per subtest.
func TestSecretContract(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the Secrets Manager emulator; skipped with -short")
	}
	farmtest.TestCAKeySource(t, func(t *testing.T) farm.CAKeySource { return NewSecret(client(), secretName()) })
}

// A secret the infra stack made without a value gets the key as its first
// value.
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
	if _, err := s.LoadKey(ctx); !errors.Is(err, farm.ErrNotFound) {
		t.Fatalf("LoadKey of a secret without a value: err = %v, want ErrNotFound", err)
	}
	if err := s.CreateKey(ctx, []byte("KEY")); err != nil {
		t.Fatalf("CreateKey into an empty secret: %v", err)
	}
	if got, err := s.LoadKey(ctx); err != nil || string(got) != "KEY" {
		t.Fatalf("LoadKey = %q, %v", got, err)
	}
}

// Two processes creating the CA at once with the key in one secret end
// with one CA, and its key is in the secret, not in the directory.
func TestCAWithSecretKey(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the Secrets Manager emulator; skipped with -short")
	}
	dir := filepath.Join(t.TempDir(), "ca")
	name := secretName()
	open := func() (*ca.CA, error) {
		st, err := ca.OpenDirStore(dir)
		if err != nil {
			return nil, err
		}
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
	if _, err := os.Stat(filepath.Join(dir, "ca_key.pem")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the key was written to the directory: %v", err)
	}
	// A wrong secret is refused with a message naming it.
	other := NewSecret(client(), secretName())
	if err := other.CreateKey(t.Context(), []byte("not a key")); err != nil {
		t.Fatal(err)
	}
	st, _ := ca.OpenDirStore(dir)
	defer st.Close()
	_, err := ca.New(t.Context(), st, other, ca.Options{ServerDir: t.TempDir(), Logger: slog.New(slog.DiscardHandler)})
	if err == nil || !strings.Contains(err.Error(), "Secrets Manager secret") {
		t.Fatalf("New with a secret that holds no key: err = %v, want one naming the secret", err)
	}
}

package memstore

import (
	"context"
	"crypto"
	"fmt"
	"sync"

	"github.com/compilefarm/compilefarm/pkg/farm"
	"github.com/compilefarm/compilefarm/pkg/pki"
)

// CAKey is a farm.CAKeyImporter in memory: the key source of fast tests
// of the CA. Its values are one source (a pointer); it makes RSA keys of
// any size the contract allows. Safe for concurrent use; the zero value
// holds no key.
type CAKey struct {
	mu  sync.Mutex
	key crypto.Signer
}

var _ farm.CAKeyImporter = (*CAKey)(nil)

// NewCAKey returns a key source holding no key.
func NewCAKey() *CAKey { return &CAKey{} }

// String names the source.
func (k *CAKey) String() string { return "memory CA key" }

// Signer returns the key; ErrNotFound when there is none.
func (k *CAKey) Signer(ctx context.Context) (crypto.Signer, error) {
	if err := farm.CheckSigner(ctx, k); err != nil {
		return nil, err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.key == nil {
		return nil, fmt.Errorf("read CA key from %s: %w", k, farm.ErrNotFound)
	}
	return k.key, nil
}

// GenerateKey makes an RSA key of bits bits when the source holds none.
func (k *CAKey) GenerateKey(ctx context.Context, bits int) error {
	if err := farm.CheckGenerateKey(ctx, k, bits); err != nil {
		return err
	}
	if _, err := k.Signer(ctx); err == nil {
		return fmt.Errorf("generate CA key in %s: it holds one: %w", k, farm.ErrConflict)
	}
	key, _, err := pki.NewRSAKey(bits)
	if err != nil {
		return fmt.Errorf("generate CA key in %s: %w", k, err)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("generate CA key in %s: %w", k, err)
	}
	return k.set(key)
}

// ImportKey keeps the key keyPEM holds when the source holds none.
func (k *CAKey) ImportKey(ctx context.Context, keyPEM []byte) error {
	if err := farm.CheckImportKey(ctx, k, keyPEM); err != nil {
		return err
	}
	key, err := pki.ParsePrivateKey(keyPEM)
	if err != nil {
		return fmt.Errorf("import CA key into %s: %w: %w", k, err, farm.ErrInvalid)
	}
	return k.set(key)
}

func (k *CAKey) set(key crypto.Signer) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.key != nil {
		return fmt.Errorf("store CA key in %s: it holds one: %w", k, farm.ErrConflict)
	}
	k.key = key
	return nil
}

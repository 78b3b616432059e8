package kmskey

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/rsa"
	"crypto/sha256"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/compilefarm/compilefarm/pkg/farm"
)

// caKeySource is farm.CAKeySource as issue 23 redefines it (a signer: the
// key stays where it lives). Until that contract is in pkg/farm, this file
// holds its promises as a suite; then TestKeyContract calls
// farmtest.TestCAKeySource instead and this file goes.
type caKeySource interface {
	Signer(ctx context.Context) (crypto.Signer, error)
	GenerateKey(ctx context.Context, bits int) error
	String() string
}

var _ caKeySource = (*Key)(nil)

// testCAKeySource runs the contract's promises against fresh, empty
// sources from newSource.
func testCAKeySource(t *testing.T, newSource func(t *testing.T) caKeySource) {
	t.Helper()
	tests := []struct {
		name string
		run  func(t *testing.T, src caKeySource)
	}{
		{"EmptyIsNotFound", keyEmpty},
		{"GenerateThenSign", keyGenerate},
		{"GenerateWhenPresentIsConflict", keyConflict},
		{"ConcurrentGeneratesOneWins", keyConcurrent},
		{"BadBitsIsInvalid", keyBadBits},
		{"EndedContextChangesNothing", keyEndedContext},
		{"StringNamesTheSource", keyString},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.run(t, newSource(t)) })
	}
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// signs checks that src's signer signs a SHA-256 digest with a signature
// its public key verifies, and returns that public key.
func signs(t *testing.T, src caKeySource, what string) crypto.PublicKey {
	t.Helper()
	s, err := src.Signer(ctxFor(t))
	if err != nil {
		t.Fatalf("%s: Signer: %v", what, err)
	}
	digest := sha256.Sum256([]byte(what))
	sig, err := s.Sign(nil, digest[:], crypto.SHA256)
	if err != nil {
		t.Fatalf("%s: Sign: %v", what, err)
	}
	if err := verify(s.Public(), digest[:], sig, crypto.SHA256); err != nil {
		t.Fatalf("%s: the signature does not verify with the signer's public key: %v", what, err)
	}
	return s.Public()
}

// verify checks sig, a signature of digest with opts, against pub.
func verify(pub crypto.PublicKey, digest, sig []byte, opts crypto.SignerOpts) error {
	switch pub := pub.(type) {
	case *rsa.PublicKey:
		if pss, ok := opts.(*rsa.PSSOptions); ok {
			return rsa.VerifyPSS(pub, pss.HashFunc(), digest, sig, &rsa.PSSOptions{SaltLength: rsa.PSSSaltLengthEqualsHash})
		}
		return rsa.VerifyPKCS1v15(pub, opts.HashFunc(), digest, sig)
	case *ecdsa.PublicKey:
		if !ecdsa.VerifyASN1(pub, digest, sig) {
			return errors.New("ECDSA signature does not verify")
		}
		return nil
	}
	return fmt.Errorf("a %T public key", pub)
}

func wantNoKey(t *testing.T, src caKeySource, what string) {
	t.Helper()
	if _, err := src.Signer(ctxFor(t)); !errors.Is(err, farm.ErrNotFound) {
		t.Fatalf("%s: Signer: err = %v, want ErrNotFound", what, err)
	}
}

func keyEmpty(t *testing.T, src caKeySource) {
	wantNoKey(t, src, "a fresh source")
}

func keyGenerate(t *testing.T, src caKeySource) {
	if err := src.GenerateKey(ctxFor(t), 2048); err != nil {
		t.Fatalf("GenerateKey: %v", err)
	}
	pub := signs(t, src, "after GenerateKey")
	rp, ok := pub.(*rsa.PublicKey)
	if !ok || rp.N.BitLen() != 2048 {
		t.Fatalf("GenerateKey(2048) made a %T of %d bits", pub, bitLen(pub))
	}
	if again := signs(t, src, "signed again"); !rp.Equal(again) {
		t.Fatal("the second Signer has another public key")
	}
}

func bitLen(pub crypto.PublicKey) int {
	if rp, ok := pub.(*rsa.PublicKey); ok {
		return rp.N.BitLen()
	}
	return 0
}

func keyConflict(t *testing.T, src caKeySource) {
	ctx := ctxFor(t)
	if err := src.GenerateKey(ctx, 2048); err != nil {
		t.Fatalf("GenerateKey: %v", err)
	}
	first := signs(t, src, "first key").(*rsa.PublicKey)
	if err := src.GenerateKey(ctx, 2048); !errors.Is(err, farm.ErrConflict) {
		t.Fatalf("second GenerateKey: err = %v, want ErrConflict", err)
	}
	if err := src.GenerateKey(ctx, 3072); !errors.Is(err, farm.ErrConflict) {
		t.Fatalf("GenerateKey of another size: err = %v, want ErrConflict", err)
	}
	if now := signs(t, src, "after refused GenerateKeys"); !first.Equal(now) {
		t.Fatal("a refused GenerateKey changed the key")
	}
}

// keyConcurrent: of GenerateKeys racing on an empty source exactly one
// wins, the others are ErrConflict, and the source holds one key.
func keyConcurrent(t *testing.T, src caKeySource) {
	ctx := ctxFor(t)
	const n = 4
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			errs[i] = src.GenerateKey(ctx, 2048)
		})
	}
	close(start)
	wg.Wait()
	won := 0
	for i, err := range errs {
		switch {
		case err == nil:
			won++
		case !errors.Is(err, farm.ErrConflict):
			t.Fatalf("GenerateKey %d: err = %v, want nil or ErrConflict", i, err)
		}
	}
	if won != 1 {
		t.Fatalf("%d of %d concurrent GenerateKeys succeeded, want exactly 1 (errors %v)", won, n, errs)
	}
	signs(t, src, "after the race")
}

func keyBadBits(t *testing.T, src caKeySource) {
	for _, bits := range []int{0, -1, 1024, 2047, 8192} {
		if err := src.GenerateKey(ctxFor(t), bits); !errors.Is(err, farm.ErrInvalid) {
			t.Fatalf("GenerateKey(%d): err = %v, want ErrInvalid", bits, err)
		}
	}
	wantNoKey(t, src, "after refused sizes")
}

func keyEndedContext(t *testing.T, src caKeySource) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := src.GenerateKey(ctx, 2048); !errors.Is(err, context.Canceled) {
		t.Fatalf("GenerateKey with an ended context: err = %v, want context.Canceled", err)
	}
	if _, err := src.Signer(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Signer with an ended context: err = %v, want context.Canceled", err)
	}
	wantNoKey(t, src, "after an ended GenerateKey")
}

func keyString(t *testing.T, src caKeySource) {
	s := src.String()
	if s == "" || strings.Contains(s, "PRIVATE KEY") {
		t.Fatalf("String() = %q: want the source's name", s)
	}
	if err := src.GenerateKey(ctxFor(t), 2048); err != nil {
		t.Fatal(err)
	}
	if src.String() != s {
		t.Fatalf("String() changed with the key: %q, then %q", s, src.String())
	}
}

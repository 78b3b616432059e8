package farmtest

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/compilefarm/compilefarm/pkg/farm"
)

// TestCAKeySource checks that a farm.CAKeySource keeps its contract.
// newSource is called once per subtest and returns open, which gives a new
// value of one fresh source holding no key (its own file, its own secret,
// its own KMS alias) on each call: values of one source stand for
// processes sharing it. How the driver protects the key at rest is for its
// own tests. The keys it makes are 2048-bit RSA keys.
func TestCAKeySource(t *testing.T, newSource func(t *testing.T) (open func() farm.CAKeySource)) {
	t.Helper()
	tests := []struct {
		name string
		run  func(t *testing.T, open func() farm.CAKeySource)
	}{
		{"EmptyIsNotFound", keyEmpty},
		{"GenerateThenSign", keyGenerate},
		{"GenerateWhenPresentIsConflict", keyGenerateConflict},
		{"ConcurrentGeneratesOneWins", keyConcurrent},
		{"InvalidSizeIsInvalid", keyInvalidSize},
		{"EndedContextChangesNothing", keyEndedContext},
		{"StringNamesTheSourceNotTheKey", keyString},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.run(t, newSource(t)) })
	}
}

// TestCAKeyImporter checks the ImportKey of a farm.CAKeyImporter; run
// TestCAKeySource on the driver too. newSource is as TestCAKeySource's.
func TestCAKeyImporter(t *testing.T, newSource func(t *testing.T) (open func() farm.CAKeyImporter)) {
	t.Helper()
	keys := importKeys()
	for _, name := range slices.Sorted(maps.Keys(keys)) {
		k := keys[name]
		t.Run("Import "+name, func(t *testing.T) { importFormat(t, newSource(t), k.pem, k.pub) })
	}
	tests := []struct {
		name string
		run  func(t *testing.T, open func() farm.CAKeyImporter)
	}{
		{"LargestKey", importLargest},
		{"InvalidKeyIsInvalid", importInvalid},
		{"ImportOverKeyIsConflict", importConflict},
		{"ImportOverGeneratedIsConflict", importOverGenerated},
		{"ConcurrentImportsOneWins", importConcurrent},
		{"EndedContextChangesNothing", importEndedContext},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.run(t, newSource(t)) })
	}
}

// keyBits is the size of the keys the suite generates: the smallest the
// contract allows, for speed.
const keyBits = farm.MinCAKeyBits

// signer returns src's Signer, failing the test on an error.
func signer(t *testing.T, src farm.CAKeySource, what string) crypto.Signer {
	t.Helper()
	s, err := src.Signer(ctxFor(t, waitLong))
	must(t, what+": Signer", err)
	if s == nil || s.Public() == nil {
		t.Fatalf("%s: Signer returned no key", what)
	}
	return s
}

// wantNoKey checks src holds no key: Signer is ErrNotFound.
func wantNoKey(t *testing.T, src farm.CAKeySource, what string) {
	t.Helper()
	_, err := src.Signer(ctxFor(t, waitLong))
	wantErrIs(t, what+": Signer", err, farm.ErrNotFound)
}

// wantSigns checks s signs a SHA-256 digest as the CA asks it to (PKCS #1
// v1.5 for RSA, ASN.1 for ECDSA) and the signature verifies with pub.
func wantSigns(t *testing.T, s crypto.Signer, pub crypto.PublicKey, what string) {
	t.Helper()
	digest := sha256.Sum256([]byte("tbsCertificate of " + what))
	sig, err := s.Sign(rand.Reader, digest[:], crypto.SHA256)
	must(t, what+": Sign", err)
	switch k := pub.(type) {
	case *rsa.PublicKey:
		if err := rsa.VerifyPKCS1v15(k, crypto.SHA256, digest[:], sig); err != nil {
			t.Fatalf("%s: the signature does not verify with the public key: %v", what, err)
		}
	case *ecdsa.PublicKey:
		if !ecdsa.VerifyASN1(k, digest[:], sig) {
			t.Fatalf("%s: the signature does not verify with the public key", what)
		}
	default:
		t.Fatalf("%s: a public key of type %T", what, pub)
	}
}

// samePublic reports whether a and b are the same public key.
func samePublic(a, b crypto.PublicKey) bool {
	k, ok := a.(interface{ Equal(crypto.PublicKey) bool })
	return ok && k.Equal(b)
}

func keyEmpty(t *testing.T, open func() farm.CAKeySource) {
	wantNoKey(t, open(), "a fresh source")
	wantNoKey(t, open(), "another value of the fresh source")
}

// keyGenerate: GenerateKey makes an RSA key of the size asked for, whose
// Signer signs; its Public is stable across calls and source values.
func keyGenerate(t *testing.T, open func() farm.CAKeySource) {
	src := open()
	must(t, "GenerateKey", src.GenerateKey(ctxFor(t, waitLong), keyBits))
	s := signer(t, src, "after GenerateKey")
	pub, ok := s.Public().(*rsa.PublicKey)
	if !ok {
		t.Fatalf("GenerateKey made a %T key, want RSA", s.Public())
	}
	if pub.N.BitLen() != keyBits {
		t.Fatalf("GenerateKey(%d) made a %d-bit key", keyBits, pub.N.BitLen())
	}
	wantSigns(t, s, pub, "the generated key")
	if again := signer(t, src, "Signer again"); !samePublic(again.Public(), pub) {
		t.Fatalf("a second Signer has another key")
	}
	other := signer(t, open(), "another value of the source")
	if !samePublic(other.Public(), pub) {
		t.Fatalf("another value of the source has another key")
	}
	wantSigns(t, other, pub, "the generated key, through another value of the source")
}

func keyGenerateConflict(t *testing.T, open func() farm.CAKeySource) {
	src := open()
	ctx := ctxFor(t, waitLong)
	must(t, "GenerateKey", src.GenerateKey(ctx, keyBits))
	pub := signer(t, src, "after GenerateKey").Public()
	wantErrIs(t, "a second GenerateKey", src.GenerateKey(ctx, keyBits), farm.ErrConflict)
	wantErrIs(t, "GenerateKey through another value", open().GenerateKey(ctx, keyBits), farm.ErrConflict)
	if !samePublic(signer(t, open(), "after refused GenerateKeys").Public(), pub) {
		t.Fatalf("a refused GenerateKey changed the key")
	}
}

// keyConcurrent: of GenerateKeys racing on an empty source, each through
// its own value of it, exactly one wins, the others are ErrConflict, and
// every Signer after them is the winner's.
func keyConcurrent(t *testing.T, open func() farm.CAKeySource) {
	ctx := ctxFor(t, waitLong)
	const n = 4
	errs := make([]error, n)
	pubs := make([]crypto.PublicKey, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		src := open()
		wg.Go(func() {
			<-start
			if errs[i] = src.GenerateKey(ctx, keyBits); errs[i] != nil && !errors.Is(errs[i], farm.ErrConflict) {
				return
			}
			s, err := src.Signer(ctx)
			if err != nil {
				errs[i] = err
				return
			}
			pubs[i] = s.Public()
		})
	}
	close(start)
	wg.Wait()
	oneWinner(t, "GenerateKeys", errs)
	for i := range pubs {
		if !samePublic(pubs[i], pubs[0]) {
			t.Fatalf("Signers after racing GenerateKeys hold different keys (%d and 0)", i)
		}
	}
	if !samePublic(signer(t, open(), "after racing GenerateKeys").Public(), pubs[0]) {
		t.Fatalf("a new value of the source holds another key than the winner's")
	}
}

func keyInvalidSize(t *testing.T, open func() farm.CAKeySource) {
	src := open()
	for _, bits := range []int{0, 1024, farm.MinCAKeyBits - 1, farm.MaxCAKeyBits + 1} {
		err := src.GenerateKey(ctxFor(t, waitLong), bits)
		wantErrIs(t, "GenerateKey of a key too small or too large", err, farm.ErrInvalid)
	}
	wantNoKey(t, src, "after refused sizes")
}

func keyEndedContext(t *testing.T, open func() farm.CAKeySource) {
	src := open()
	ended, cancel := context.WithCancel(ctxFor(t, waitLong))
	cancel()
	wantErrIs(t, "GenerateKey with an ended context", src.GenerateKey(ended, keyBits), context.Canceled)
	_, err := src.Signer(ended)
	wantErrIs(t, "Signer with an ended context", err, context.Canceled)
	wantNoKey(t, open(), "after a GenerateKey with an ended context")
}

// keyString: String names the source, stays the same, and never shows
// the key.
func keyString(t *testing.T, open func() farm.CAKeySource) {
	src := open()
	name := src.String()
	if strings.TrimSpace(name) == "" {
		t.Fatal("String is empty")
	}
	must(t, "GenerateKey", src.GenerateKey(ctxFor(t, waitLong), keyBits))
	if got := src.String(); got != name {
		t.Fatalf("String changed from %q to %q when the key was made", name, got)
	}
	if strings.Contains(name, "PRIVATE KEY") || strings.Contains(name, "MII") {
		t.Fatalf("String %q shows a key", name)
	}
}

// importKeys are keys as Puppet Server and OpenSSL write them, made once.
var importKeys = sync.OnceValue(func() map[string]struct {
	pem []byte
	pub crypto.PublicKey
} {
	rsaKey, err := rsa.GenerateKey(rand.Reader, keyBits)
	if err != nil {
		panic(err)
	}
	ecKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		panic(err)
	}
	sec1, err := x509.MarshalECPrivateKey(ecKey)
	if err != nil {
		panic(err)
	}
	rsa8, err := x509.MarshalPKCS8PrivateKey(rsaKey)
	if err != nil {
		panic(err)
	}
	ec8, err := x509.MarshalPKCS8PrivateKey(ecKey)
	if err != nil {
		panic(err)
	}
	enc := func(typ string, der []byte) []byte { return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}) }
	return map[string]struct {
		pem []byte
		pub crypto.PublicKey
	}{
		"PKCS#1 RSA (Puppet Server's ca_key.pem)": {enc("RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(rsaKey)), rsaKey.Public()},
		"SEC 1 ECDSA":  {enc("EC PRIVATE KEY", sec1), ecKey.Public()},
		"PKCS#8 RSA":   {enc("PRIVATE KEY", rsa8), rsaKey.Public()},
		"PKCS#8 ECDSA": {enc("PRIVATE KEY", ec8), ecKey.Public()},
	}
})

// rsaImportKey is the PKCS#1 key of importKeys.
func rsaImportKey() ([]byte, crypto.PublicKey) {
	k := importKeys()["PKCS#1 RSA (Puppet Server's ca_key.pem)"]
	return k.pem, k.pub
}

// importFormat: key imports into a fresh source, whose Signer then is
// that key, from every value of the source.
func importFormat(t *testing.T, open func() farm.CAKeyImporter, keyPEM []byte, pub crypto.PublicKey) {
	src := open()
	must(t, "ImportKey", src.ImportKey(ctxFor(t, waitLong), bytes.Clone(keyPEM)))
	for what, src := range map[string]farm.CAKeySource{"the importing value": src, "another value": open()} {
		s := signer(t, src, what+" after ImportKey")
		if !samePublic(s.Public(), pub) {
			t.Fatalf("%s: Signer after ImportKey holds another key than the imported one", what)
		}
		wantSigns(t, s, pub, "the imported key through "+what)
	}
}

func importLargest(t *testing.T, open func() farm.CAKeyImporter) {
	keyPEM, pub := rsaImportKey()
	// A key followed by text up to MaxCAKey bytes, as a file with comments
	// after the key would be.
	padded := append(bytes.Clone(keyPEM), bytes.Repeat([]byte("#"), farm.MaxCAKey-len(keyPEM))...)
	src := open()
	must(t, "ImportKey of MaxCAKey bytes", src.ImportKey(ctxFor(t, waitLong), padded))
	s := signer(t, open(), "after importing the largest key")
	if !samePublic(s.Public(), pub) {
		t.Fatalf("Signer after ImportKey holds another key than the imported one")
	}
}

func importInvalid(t *testing.T, open func() farm.CAKeyImporter) {
	keyPEM, _ := rsaImportKey()
	src := open()
	for name, key := range map[string][]byte{
		"nil":                  nil,
		"empty":                {},
		"garbage":              []byte("this is not a key"),
		"a certificate":        pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte{0x30, 0x00}}),
		"a key of bad DER":     pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: []byte("garbage")}),
		"larger than MaxCAKey": append(bytes.Clone(keyPEM), bytes.Repeat([]byte("#"), farm.MaxCAKey+1-len(keyPEM))...),
	} {
		wantErrIs(t, "ImportKey of "+name, src.ImportKey(ctxFor(t, waitLong), key), farm.ErrInvalid)
	}
	wantNoKey(t, open(), "after refused keys")
}

func importConflict(t *testing.T, open func() farm.CAKeyImporter) {
	ctx := ctxFor(t, waitLong)
	keyPEM, pub := rsaImportKey()
	src := open()
	must(t, "ImportKey", src.ImportKey(ctx, keyPEM))
	wantErrIs(t, "a second ImportKey", src.ImportKey(ctx, importKeys()["PKCS#8 ECDSA"].pem), farm.ErrConflict)
	wantErrIs(t, "the same ImportKey again", open().ImportKey(ctx, keyPEM), farm.ErrConflict)
	wantErrIs(t, "GenerateKey over an imported key", src.GenerateKey(ctx, keyBits), farm.ErrConflict)
	if !samePublic(signer(t, open(), "after refused changes").Public(), pub) {
		t.Fatalf("a refused ImportKey or GenerateKey changed the key")
	}
}

func importOverGenerated(t *testing.T, open func() farm.CAKeyImporter) {
	ctx := ctxFor(t, waitLong)
	src := open()
	must(t, "GenerateKey", src.GenerateKey(ctx, keyBits))
	pub := signer(t, src, "after GenerateKey").Public()
	keyPEM, _ := rsaImportKey()
	wantErrIs(t, "ImportKey over a generated key", open().ImportKey(ctx, keyPEM), farm.ErrConflict)
	if !samePublic(signer(t, open(), "after a refused ImportKey").Public(), pub) {
		t.Fatalf("a refused ImportKey changed the key")
	}
}

// importConcurrent: of ImportKeys and GenerateKeys racing on an empty
// source exactly one wins, and every Signer after them is the winner's.
func importConcurrent(t *testing.T, open func() farm.CAKeyImporter) {
	ctx := ctxFor(t, waitLong)
	rsaPEM, _ := rsaImportKey()
	ecPEM := importKeys()["SEC 1 ECDSA"].pem
	calls := []func(farm.CAKeyImporter) error{
		func(src farm.CAKeyImporter) error { return src.ImportKey(ctx, rsaPEM) },
		func(src farm.CAKeyImporter) error { return src.ImportKey(ctx, ecPEM) },
		func(src farm.CAKeyImporter) error { return src.GenerateKey(ctx, keyBits) },
		func(src farm.CAKeyImporter) error { return src.ImportKey(ctx, rsaPEM) },
	}
	errs := make([]error, len(calls))
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i, call := range calls {
		src := open()
		wg.Go(func() {
			<-start
			errs[i] = call(src)
		})
	}
	close(start)
	wg.Wait()
	oneWinner(t, "ImportKeys and GenerateKeys", errs)
	pub := signer(t, open(), "after the race").Public()
	for i := range 3 {
		if !samePublic(signer(t, open(), "after the race, again").Public(), pub) {
			t.Fatalf("values of the source disagree on the key after the race (%d)", i)
		}
	}
}

func importEndedContext(t *testing.T, open func() farm.CAKeyImporter) {
	keyPEM, _ := rsaImportKey()
	ended, cancel := context.WithCancel(ctxFor(t, waitLong))
	cancel()
	wantErrIs(t, "ImportKey with an ended context", open().ImportKey(ended, keyPEM), context.Canceled)
	wantNoKey(t, open(), "after an ImportKey with an ended context")
}

// oneWinner fails t unless exactly one of the racing calls' errs is nil
// and every other is ErrConflict.
func oneWinner(t *testing.T, what string, errs []error) {
	t.Helper()
	winners := 0
	for i, err := range errs {
		switch {
		case err == nil:
			winners++
		case !errors.Is(err, farm.ErrConflict):
			t.Fatalf("racing call %d of %s: %v, want success or ErrConflict", i, what, err)
		}
	}
	if winners != 1 {
		t.Fatalf("%d of %d racing %s succeeded, want exactly 1", winners, len(errs), what)
	}
}

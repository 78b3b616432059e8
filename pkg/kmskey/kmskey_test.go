package kmskey

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"math/big"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/kms"
	"github.com/aws/aws-sdk-go-v2/service/kms/types"

	"github.com/compilefarm/compilefarm/internal/emulator"
	"github.com/compilefarm/compilefarm/pkg/awscalls"
	"github.com/compilefarm/compilefarm/pkg/farm"
	"github.com/compilefarm/compilefarm/pkg/farm/farmtest"
)

// emu is the KMS emulator (local-kms) the tests share.
var emu *emulator.Process

// TestMain runs one KMS emulator on a loopback port. Without it the tests
// fail, naming the script that installs it.
func TestMain(m *testing.M) { emulator.Main(m, emulator.KMS(&emu)) }

// client is a KMS client of the emulator; counter, when given, counts its
// calls.
func client(counter *awscalls.Counter) *kms.Client {
	o := kms.Options{
		Region:       "us-east-1",
		Credentials:  credentials.NewStaticCredentialsProvider("test", "test", ""),
		BaseEndpoint: aws.String(emu.URL),
	}
	if counter != nil {
		o.APIOptions = append(o.APIOptions, counter.APIOption)
	}
	return kms.New(o)
}

var seq atomic.Int64

// aliasName returns a new alias for one test.
func newAlias() string { return fmt.Sprintf("alias/compilefarm/test/ca-%d", seq.Add(1)) }

func needEmulator(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("needs the KMS emulator; skipped with -short")
	}
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// TestKeyContract runs farm.CAKeySource's suite against new aliases of the
// emulator: each value of a source is a new Key with its own client on one
// alias, as processes sharing the key.
func TestKeyContract(t *testing.T) {
	needEmulator(t)
	farmtest.TestCAKeySource(t, func(t *testing.T) func() farm.CAKeySource {
		alias := newAlias()
		return func() farm.CAKeySource { return NewKey(client(nil), alias) }
	})
}

// TestGenerateKeySizes: GenerateKey makes the RSA sizes KMS has; sizes the
// contract allows but KMS does not make are ErrInvalid, saying which it
// makes, and leave no key.
func TestGenerateKeySizes(t *testing.T) {
	needEmulator(t)
	tests := []struct {
		bits int
		want error
	}{
		{3072, nil},
		{8192, farm.ErrInvalid},
		{farm.MaxCAKeyBits, farm.ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.bits), func(t *testing.T) {
			k := NewKey(client(nil), newAlias())
			err := k.GenerateKey(ctxFor(t), tt.bits)
			if tt.want != nil {
				if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), "KMS makes 2048, 3072 or 4096") {
					t.Fatalf("GenerateKey(%d): err = %v, want %v naming the sizes KMS makes", tt.bits, err, tt.want)
				}
				if _, err := k.Signer(ctxFor(t)); !errors.Is(err, farm.ErrNotFound) {
					t.Fatalf("Signer after a refused GenerateKey(%d): err = %v, want ErrNotFound", tt.bits, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("GenerateKey(%d): %v", tt.bits, err)
			}
			s, err := k.Signer(ctxFor(t))
			if err != nil {
				t.Fatal(err)
			}
			if pub, ok := s.Public().(*rsa.PublicKey); !ok || pub.N.BitLen() != tt.bits {
				t.Fatalf("GenerateKey(%d) made a %T key", tt.bits, s.Public())
			}
		})
	}
}

// makeKey creates a key of spec and usage in the emulator, under a new
// alias, and returns the alias and the key's ID.
func makeKey(t *testing.T, spec types.KeySpec, usage types.KeyUsageType) (string, string) {
	t.Helper()
	ctx := ctxFor(t)
	out, err := client(nil).CreateKey(ctx, &kms.CreateKeyInput{KeySpec: spec, KeyUsage: usage})
	if err != nil {
		t.Fatalf("create a %s %s key: %v", spec, usage, err)
	}
	alias := newAlias()
	if _, err := client(nil).CreateAlias(ctx, &kms.CreateAliasInput{AliasName: aws.String(alias), TargetKeyId: out.KeyMetadata.KeyId}); err != nil {
		t.Fatal(err)
	}
	return alias, aws.ToString(out.KeyMetadata.KeyId)
}

// TestCertificateAndCRL signs a CA certificate, a node's certificate and a
// CRL through Go's crypto/x509 with KMS keys of each kind, and verifies
// them with the CA certificate.
func TestCertificateAndCRL(t *testing.T) {
	needEmulator(t)
	tests := []struct {
		spec types.KeySpec
		alg  x509.SignatureAlgorithm
	}{
		{types.KeySpecRsa2048, x509.SHA256WithRSA},
		{types.KeySpecRsa2048, x509.SHA256WithRSAPSS},
		{types.KeySpecRsa3072, x509.SHA384WithRSAPSS},
		{types.KeySpecRsa4096, x509.SHA256WithRSA},
		{types.KeySpecRsa4096, x509.SHA512WithRSAPSS},
		{types.KeySpecEccNistP256, x509.ECDSAWithSHA256},
		{types.KeySpecEccNistP384, x509.ECDSAWithSHA384},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s/%s", tt.spec, tt.alg), func(t *testing.T) {
			alias, _ := makeKey(t, tt.spec, types.KeyUsageTypeSignVerify)
			signer, err := NewKey(client(nil), alias).Signer(ctxFor(t))
			if err != nil {
				t.Fatal(err)
			}
			caCert := signCA(t, signer, tt.alg)
			if err := caCert.CheckSignatureFrom(caCert); err != nil {
				t.Fatalf("the CA certificate's signature: %v", err)
			}
			leaf := signLeaf(t, signer, caCert, tt.alg)
			roots := x509.NewCertPool()
			roots.AddCert(caCert)
			if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
				t.Fatalf("the node's certificate does not verify with the CA: %v", err)
			}
			crl := signCRL(t, signer, caCert, leaf, tt.alg)
			if err := crl.CheckSignatureFrom(caCert); err != nil {
				t.Fatalf("the CRL's signature: %v", err)
			}
			if len(crl.RevokedCertificateEntries) != 1 || crl.RevokedCertificateEntries[0].SerialNumber.Cmp(leaf.SerialNumber) != 0 {
				t.Fatalf("the CRL revokes %v, want the node's serial %v", crl.RevokedCertificateEntries, leaf.SerialNumber)
			}
		})
	}
}

func signCA(t *testing.T, signer crypto.Signer, alg x509.SignatureAlgorithm) *x509.Certificate {
	t.Helper()
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "Puppet CA: kmskey test"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		SignatureAlgorithm:    alg,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, signer.Public(), signer)
	if err != nil {
		t.Fatalf("sign the CA certificate (%s): %v", alg, err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func signLeaf(t *testing.T, signer crypto.Signer, ca *x509.Certificate, alg x509.SignatureAlgorithm) *x509.Certificate {
	t.Helper()
	nodeKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:       big.NewInt(2),
		Subject:            pkix.Name{CommonName: "node1.example.com"},
		DNSNames:           []string{"node1.example.com"},
		NotBefore:          now.Add(-time.Hour),
		NotAfter:           now.Add(time.Hour),
		KeyUsage:           x509.KeyUsageDigitalSignature,
		ExtKeyUsage:        []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth},
		SignatureAlgorithm: alg,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, nodeKey.Public(), signer)
	if err != nil {
		t.Fatalf("sign the node's certificate (%s): %v", alg, err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func signCRL(t *testing.T, signer crypto.Signer, ca, revoked *x509.Certificate, alg x509.SignatureAlgorithm) *x509.RevocationList {
	t.Helper()
	now := time.Now()
	der, err := x509.CreateRevocationList(rand.Reader, &x509.RevocationList{
		Number:             big.NewInt(1),
		ThisUpdate:         now,
		NextUpdate:         now.Add(24 * time.Hour),
		SignatureAlgorithm: alg,
		RevokedCertificateEntries: []x509.RevocationListEntry{
			{SerialNumber: revoked.SerialNumber, RevocationTime: now},
		},
	}, ca, signer)
	if err != nil {
		t.Fatalf("sign the CRL (%s): %v", alg, err)
	}
	crl, err := x509.ParseRevocationList(der)
	if err != nil {
		t.Fatal(err)
	}
	return crl
}

// TestSignerRefuses: keys the CA cannot sign with are ErrInvalid, saying
// why; keys and aliases that do not exist are ErrNotFound.
func TestSignerRefuses(t *testing.T) {
	needEmulator(t)
	ctx := ctxFor(t)
	kc := client(nil)
	symmetric, _ := makeKey(t, types.KeySpecSymmetricDefault, types.KeyUsageTypeEncryptDecrypt)
	encrypting, _ := makeKey(t, types.KeySpecRsa2048, types.KeyUsageTypeEncryptDecrypt)
	secp256k1, _ := makeKey(t, types.KeySpecEccSecgP256k1, types.KeyUsageTypeSignVerify)
	disabled, disabledID := makeKey(t, types.KeySpecRsa2048, types.KeyUsageTypeSignVerify)
	if _, err := kc.DisableKey(ctx, &kms.DisableKeyInput{KeyId: aws.String(disabledID)}); err != nil {
		t.Fatal(err)
	}
	deleted, deletedID := makeKey(t, types.KeySpecRsa2048, types.KeyUsageTypeSignVerify)
	if _, err := kc.ScheduleKeyDeletion(ctx, &kms.ScheduleKeyDeletionInput{KeyId: aws.String(deletedID), PendingWindowInDays: aws.Int32(7)}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, id string
		want     error
		say      string
	}{
		{"symmetric key", symmetric, farm.ErrInvalid, "not SIGN_VERIFY"},
		{"RSA encryption key", encrypting, farm.ErrInvalid, "not SIGN_VERIFY"},
		{"secp256k1 key", secp256k1, farm.ErrInvalid, "ECC_SECG_P256K1"},
		{"disabled key", disabled, farm.ErrInvalid, "aws kms enable-key"},
		{"key pending deletion", deleted, farm.ErrInvalid, "aws kms cancel-key-deletion"},
		{"missing alias", newAlias(), farm.ErrNotFound, "alias"},
		{"missing key ID", "0b1c2d3e-1111-2222-3333-444455556666", farm.ErrNotFound, "0b1c2d3e"},
		{"missing key ARN", "arn:aws:kms:us-east-1:111122223333:key/0b1c2d3e-1111-2222-3333-444455556666", farm.ErrNotFound, "0b1c2d3e"},
		{"no ID", "", farm.ErrInvalid, "no key ID"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewKey(kc, tt.id).Signer(ctx)
			if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.say) {
				t.Fatalf("Signer of %s: err = %v, want %v saying %q", tt.id, err, tt.want, tt.say)
			}
			if !strings.Contains(err.Error(), "KMS key "+tt.id) {
				t.Fatalf("error %q does not name the key", err)
			}
		})
	}
}

// TestSignRefuses: what KMS cannot sign is refused before any call; a key
// disabled after its signer was made is ErrInvalid at the Sign.
func TestSignRefuses(t *testing.T) {
	needEmulator(t)
	ctx := ctxFor(t)
	rsaAlias, rsaID := makeKey(t, types.KeySpecRsa2048, types.KeyUsageTypeSignVerify)
	ecAlias, _ := makeKey(t, types.KeySpecEccNistP256, types.KeyUsageTypeSignVerify)
	counter := awscalls.New()
	rsaSigner, err := NewKey(client(counter), rsaAlias).Signer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ecSigner, err := NewKey(client(counter), ecAlias).Signer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	d256 := sha256.Sum256([]byte("x"))
	d384 := sha512.Sum384([]byte("x"))
	tests := []struct {
		name   string
		s      crypto.Signer
		digest []byte
		opts   crypto.SignerOpts
		say    string
	}{
		{"SHA-1", rsaSigner, d256[:20], crypto.SHA1, "the hash is SHA-1"},
		{"no hash", rsaSigner, d256[:], crypto.Hash(0), "the hash is none"},
		{"nil options", rsaSigner, d256[:], nil, "no signer options"},
		{"short digest", rsaSigner, d256[:31], crypto.SHA256, "not 31"},
		{"PSS salt of 20 bytes", rsaSigner, d256[:], &rsa.PSSOptions{SaltLength: 20, Hash: crypto.SHA256}, "not 20"},
		{"P-256 key, SHA-384 digest", ecSigner, d384[:], crypto.SHA384, "signs with [ECDSA_SHA_256] only"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tt.s.Sign(rand.Reader, tt.digest, tt.opts)
			if !errors.Is(err, farm.ErrInvalid) || !strings.Contains(err.Error(), tt.say) {
				t.Fatalf("Sign: err = %v, want ErrInvalid saying %q", err, tt.say)
			}
		})
	}
	if n := calls(counter, "Sign"); n != 0 {
		t.Fatalf("refused Signs made %d kms:Sign calls, want 0", n)
	}

	if _, err := client(nil).DisableKey(ctx, &kms.DisableKeyInput{KeyId: aws.String(rsaID)}); err != nil {
		t.Fatal(err)
	}
	_, err = rsaSigner.Sign(rand.Reader, d256[:], crypto.SHA256)
	if !errors.Is(err, farm.ErrInvalid) || !strings.Contains(err.Error(), "DisabledException") ||
		!strings.Contains(err.Error(), fmt.Sprintf("SHA-256 digest %x", d256[:8])) || !strings.Contains(err.Error(), rsaAlias) {
		t.Fatalf("Sign with a disabled key: err = %v, want ErrInvalid naming the digest, the key and DisabledException", err)
	}
}

// calls is the number of op calls counter counted.
func calls(counter *awscalls.Counter, op string) int64 {
	var n int64
	for _, c := range counter.Snapshot() {
		if c.Service == "KMS" && c.Operation == op {
			n += c.Calls
		}
	}
	return n
}

// TestGenerateKeyNames: GenerateKey creates a key under an alias, named by
// name or by ARN; a key ID or ARN cannot be created.
func TestGenerateKeyNames(t *testing.T) {
	needEmulator(t)
	ctx := ctxFor(t)
	kc := client(nil)
	_, keyID := makeKey(t, types.KeySpecRsa2048, types.KeyUsageTypeSignVerify)
	keyARN := "arn:aws:kms:us-east-1:111122223333:key/" + keyID
	aliasByARN := "arn:aws:kms:us-east-1:111122223333:" + newAlias()
	tests := []struct {
		name, id string
		want     error
	}{
		{"existing key ID", keyID, farm.ErrConflict},
		{"existing key ARN", keyARN, farm.ErrConflict},
		{"missing key ID", "0b1c2d3e-1111-2222-3333-444455556666", farm.ErrInvalid},
		{"AWS's alias", "alias/aws/compilefarm", farm.ErrInvalid},
		{"no ID", "", farm.ErrInvalid},
		{"alias ARN", aliasByARN, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := NewKey(kc, tt.id).GenerateKey(ctx, 2048)
			if tt.want == nil && err != nil || !errors.Is(err, tt.want) {
				t.Fatalf("GenerateKey of %q: err = %v, want %v", tt.id, err, tt.want)
			}
		})
	}
	// The alias created by ARN is the same one by name.
	_, name, _ := strings.Cut(aliasByARN, ":alias/")
	a, err := NewKey(kc, aliasByARN).Signer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewKey(kc, "alias/"+name).Signer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !a.Public().(*rsa.PublicKey).Equal(b.Public()) {
		t.Fatal("the alias by ARN and by name sign with different keys")
	}
}

// TestConcurrentGenerateKeysLeaveNoOrphan: processes racing to create one
// alias (here one client and Key each) end with one key under it, and
// every key a loser made is scheduled for deletion.
func TestConcurrentGenerateKeysLeaveNoOrphan(t *testing.T) {
	needEmulator(t)
	ctx := ctxFor(t)
	alias := newAlias()
	const n = 4
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			errs[i] = NewKey(client(nil), alias).GenerateKey(ctx, 2048)
		})
	}
	close(start)
	wg.Wait()
	won := 0
	for _, err := range errs {
		if err == nil {
			won++
		} else if !errors.Is(err, farm.ErrConflict) {
			t.Fatalf("GenerateKey: %v", err)
		}
	}
	if won != 1 {
		t.Fatalf("%d GenerateKeys won, want 1: %v", won, errs)
	}
	winner, err := client(nil).DescribeKey(ctx, &kms.DescribeKeyInput{KeyId: aws.String(alias)})
	if err != nil {
		t.Fatal(err)
	}
	states := map[types.KeyState]int{}
	for _, md := range keysDescribed(t, "("+alias+")") {
		states[md.KeyState]++
		if md.KeyState == types.KeyStateEnabled && aws.ToString(md.KeyId) != aws.ToString(winner.KeyMetadata.KeyId) {
			t.Errorf("key %s is enabled but not under %s", aws.ToString(md.KeyId), alias)
		}
	}
	if states[types.KeyStateEnabled] != 1 || states[types.KeyStatePendingDeletion] != n-1 || len(states) != 2 {
		t.Fatalf("keys made for %s by %d racing GenerateKeys: %v; want 1 Enabled, %d PendingDeletion", alias, n, states, n-1)
	}
}

// keysDescribed returns the metadata of every key of the emulator whose
// description contains s.
func keysDescribed(t *testing.T, s string) []*types.KeyMetadata {
	t.Helper()
	ctx := ctxFor(t)
	kc := client(nil)
	var out []*types.KeyMetadata
	p := kms.NewListKeysPaginator(kc, &kms.ListKeysInput{})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range page.Keys {
			d, err := kc.DescribeKey(ctx, &kms.DescribeKeyInput{KeyId: k.KeyId})
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(aws.ToString(d.KeyMetadata.Description), s) {
				out = append(out, d.KeyMetadata)
			}
		}
	}
	return out
}

// TestAWSCalls pins the calls each operation makes: GenerateKey
// DescribeKey, CreateKey, CreateAlias; Signer DescribeKey and GetPublicKey
// once per Key; each Sign one Sign; a refused GenerateKey DescribeKey.
func TestAWSCalls(t *testing.T) {
	needEmulator(t)
	ctx := ctxFor(t)
	counter := awscalls.New()
	k := NewKey(client(counter), newAlias())
	want := map[string]int64{}
	check := func(step string) {
		t.Helper()
		for _, op := range []string{"DescribeKey", "GetPublicKey", "CreateKey", "CreateAlias", "ScheduleKeyDeletion", "Sign"} {
			if got := calls(counter, op); got != want[op] {
				t.Errorf("after %s: %d %s calls, want %d (%v)", step, got, op, want[op], counter.Snapshot())
			}
		}
	}
	if err := k.GenerateKey(ctx, 2048); err != nil {
		t.Fatal(err)
	}
	want["DescribeKey"], want["CreateKey"], want["CreateAlias"] = 1, 1, 1
	check("GenerateKey")
	s, err := k.Signer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want["DescribeKey"], want["GetPublicKey"] = 2, 1
	check("Signer")
	if again, err := k.Signer(ctx); err != nil || again != s {
		t.Fatalf("second Signer: %v, %v; want the same signer", again, err)
	}
	check("a second Signer")
	digest := sha256.Sum256([]byte("x"))
	for range 3 {
		if _, err := s.Sign(rand.Reader, digest[:], crypto.SHA256); err != nil {
			t.Fatal(err)
		}
	}
	want["Sign"] = 3
	check("three Signs")
	if err := k.GenerateKey(ctx, 2048); !errors.Is(err, farm.ErrConflict) {
		t.Fatalf("GenerateKey of a made key: %v", err)
	}
	want["DescribeKey"] = 3
	check("a refused GenerateKey")
}

// TestSignTimeout: a KMS that does not answer ends a Sign after the
// signer's timeout, as ErrTransient naming the digest.
func TestSignTimeout(t *testing.T) {
	addr, stop := silentServer(t)
	defer stop()
	kc := kms.New(kms.Options{
		Region:       "us-east-1",
		Credentials:  credentials.NewStaticCredentialsProvider("test", "test", ""),
		BaseEndpoint: aws.String("http://" + addr),
	})
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	s := &signer{client: kc, name: "KMS key alias/silent", arn: "arn:aws:kms:us-east-1:111122223333:key/silent", pub: key.Public(), timeout: 300 * time.Millisecond}
	digest := sha256.Sum256([]byte("x"))
	start := time.Now()
	_, err = s.Sign(rand.Reader, digest[:], crypto.SHA256)
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("Sign took %v with a timeout of 300ms", took)
	}
	if !errors.Is(err, farm.ErrTransient) || !errors.Is(err, context.DeadlineExceeded) ||
		!strings.Contains(err.Error(), "SHA-256 digest") || !strings.Contains(err.Error(), "alias/silent") {
		t.Fatalf("Sign against a silent KMS: err = %v, want ErrTransient and DeadlineExceeded naming the digest and key", err)
	}
}

// BenchmarkSign measures one Sign (one kms:Sign round trip to the
// emulator) with an RSA-4096 key, as the CA signs a certificate.
func BenchmarkSign(b *testing.B) {
	if testing.Short() {
		b.Skip("needs the KMS emulator; skipped with -short")
	}
	ctx := context.Background()
	k := NewKey(client(nil), newAlias())
	if err := k.GenerateKey(ctx, 4096); err != nil {
		b.Fatal(err)
	}
	s, err := k.Signer(ctx)
	if err != nil {
		b.Fatal(err)
	}
	digest := sha256.Sum256([]byte("x"))
	for b.Loop() {
		if _, err := s.Sign(rand.Reader, digest[:], crypto.SHA256); err != nil {
			b.Fatal(err)
		}
	}
}

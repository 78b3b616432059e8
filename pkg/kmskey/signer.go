package kmskey

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/rsa"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kms"
	"github.com/aws/aws-sdk-go-v2/service/kms/types"

	"github.com/compilefarm/compilefarm/pkg/farm"
)

// signer is the crypto.Signer of a KMS key: Public is the key's public
// half, read once; each Sign is one kms:Sign of the digest.
type signer struct {
	client *kms.Client
	name   string // "KMS key alias/...", for messages
	// arn is the key's ARN, which Sign names rather than the alias: the
	// signatures stay those of pub even if the alias is moved to another
	// key.
	arn     string
	pub     crypto.PublicKey
	algs    []types.SigningAlgorithmSpec // what KMS says the key signs with
	timeout time.Duration
}

// Public returns the key's public half (*rsa.PublicKey or
// *ecdsa.PublicKey).
func (s *signer) Public() crypto.PublicKey { return s.pub }

// Sign asks KMS to sign digest, a hash made with opts.HashFunc() (SHA-256,
// SHA-384 or SHA-512): RSASSA-PSS when opts is an *rsa.PSSOptions (KMS's
// salt is as long as the digest), else PKCS #1 v1.5 for an RSA key; ECDSA
// (an ASN.1 DER signature) for an ECC key. rand is not used: KMS makes its
// own randomness. One kms:Sign call, bounded by SignTimeout; errors name
// the digest, the algorithm and the key.
func (s *signer) Sign(_ io.Reader, digest []byte, opts crypto.SignerOpts) ([]byte, error) {
	var h crypto.Hash
	if opts != nil {
		h = opts.HashFunc()
	}
	what := "sign " + describeDigest(h, digest) + " with " + s.name
	alg, err := algorithm(s.pub, digest, opts)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	what += " (" + string(alg) + ")"
	if len(s.algs) > 0 && !slices.Contains(s.algs, alg) {
		return nil, fmt.Errorf("%s: the key signs with %v only: %w", what, s.algs, farm.ErrInvalid)
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	out, err := s.client.Sign(ctx, &kms.SignInput{
		KeyId:            aws.String(s.arn),
		Message:          digest,
		MessageType:      types.MessageTypeDigest,
		SigningAlgorithm: alg,
	})
	if err != nil {
		return nil, translate(what, err)
	}
	if len(out.Signature) == 0 {
		return nil, fmt.Errorf("%s: KMS answered without a signature", what)
	}
	return out.Signature, nil
}

// algorithm is the KMS signing algorithm for a digest of pub's key signed
// with opts; ErrInvalid for what KMS cannot sign.
func algorithm(pub crypto.PublicKey, digest []byte, opts crypto.SignerOpts) (types.SigningAlgorithmSpec, error) {
	if opts == nil {
		return "", fmt.Errorf("no signer options (the digest's hash): %w", farm.ErrInvalid)
	}
	h := opts.HashFunc()
	i := slices.Index(hashes, h)
	if i < 0 {
		name := "none"
		if h != 0 {
			name = h.String()
		}
		return "", fmt.Errorf("KMS signs SHA-256, SHA-384 or SHA-512 digests; the hash is %s: %w", name, farm.ErrInvalid)
	}
	if len(digest) != h.Size() {
		return "", fmt.Errorf("a %s digest is %d bytes, not %d: %w", h, h.Size(), len(digest), farm.ErrInvalid)
	}
	switch pub.(type) {
	case *rsa.PublicKey:
		pss, ok := opts.(*rsa.PSSOptions)
		if !ok {
			return pkcs1[i], nil
		}
		switch pss.SaltLength {
		case rsa.PSSSaltLengthAuto, rsa.PSSSaltLengthEqualsHash, h.Size():
			return pssAlgs[i], nil
		}
		return "", fmt.Errorf("KMS's PSS salt is %d bytes (the digest's length), not %d: %w", h.Size(), pss.SaltLength, farm.ErrInvalid)
	case *ecdsa.PublicKey:
		return ecdsaAlgs[i], nil
	}
	return "", fmt.Errorf("a %T key: %w", pub, farm.ErrInvalid)
}

// The hashes KMS signs digests of, and the algorithms of each, in the
// same order.
var (
	hashes    = []crypto.Hash{crypto.SHA256, crypto.SHA384, crypto.SHA512}
	pkcs1     = []types.SigningAlgorithmSpec{types.SigningAlgorithmSpecRsassaPkcs1V15Sha256, types.SigningAlgorithmSpecRsassaPkcs1V15Sha384, types.SigningAlgorithmSpecRsassaPkcs1V15Sha512}
	pssAlgs   = []types.SigningAlgorithmSpec{types.SigningAlgorithmSpecRsassaPssSha256, types.SigningAlgorithmSpecRsassaPssSha384, types.SigningAlgorithmSpecRsassaPssSha512}
	ecdsaAlgs = []types.SigningAlgorithmSpec{types.SigningAlgorithmSpecEcdsaSha256, types.SigningAlgorithmSpecEcdsaSha384, types.SigningAlgorithmSpecEcdsaSha512}
)

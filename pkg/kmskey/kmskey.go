// Package kmskey keeps the CA's private key in an AWS KMS asymmetric key
// (key usage SIGN_VERIFY): the CA key source of front doors on AWS, whose
// key never leaves KMS. The CA signs certificates and CRLs through a
// crypto.Signer whose Sign asks KMS to sign the digest (kms:Sign with
// MessageType DIGEST); no process of the farm ever holds the private key.
//
// # Keys
//
// A Key is named by what --ca-key-kms takes: a key ID, a key ARN, an alias
// name ("alias/compilefarm/prod/ca") or an alias ARN. The CDK stack creates
// one RSA_4096 key per stage under the alias alias/compilefarm/<stage>/ca;
// `broker ca init` on a fresh site may instead have GenerateKey create it
// (an alias only: KMS chooses key IDs). Signer works with RSA keys
// (RSA_2048, RSA_3072, RSA_4096: PKCS #1 v1.5 or PSS, as the caller's
// options ask) and NIST ECC keys (ECC_NIST_P256, P384, P521: ECDSA).
//
// # AWS calls
//
//   - Signer: DescribeKey and GetPublicKey the first time it succeeds on a
//     Key; none after that (the signer, pinned to the key's ARN, is kept).
//   - each Sign of the signer: one Sign, bounded by SignTimeout.
//   - GenerateKey of an alias: DescribeKey, then, when the alias is free,
//     CreateKey and CreateAlias; when CreateAlias fails (a lost race), also
//     DescribeKey of the alias and ScheduleKeyDeletion of the key it made.
//     Of a key ID or ARN: DescribeKey.
//
// # Custody
//
// A key GenerateKey (or the stack) creates is made inside KMS and cannot be
// exported: the fleet may ask KMS to sign with it (kms:Sign) and read its
// public half, never its private half; who may sign is the key policy's and
// IAM's to say, and every Sign is in CloudTrail. Rotating it means a new
// CA (a new key, a new CA certificate, every agent enrolled again): KMS's
// automatic rotation does not apply to asymmetric keys.
//
// # Importing a Puppet Server CA key
//
// The farm does not import a key into KMS (Key has no ImportKey). A site
// moving from Puppet Server that keeps its ca_key.pem has two routes:
//
//   - --ca-key-secret: the farm stores the PEM in a Secrets Manager secret
//     (pkg/cakey). Tasks that sign read the private key into memory:
//     custody is weaker.
//   - KMS's own import, run by an operator: create a key with
//     `aws kms create-key --origin EXTERNAL --key-spec RSA_4096 --key-usage
//     SIGN_VERIFY` (the spec of the key being imported), get a wrapping key
//     and token with `aws kms get-parameters-for-import --wrapping-algorithm
//     RSA_AES_KEY_WRAP_SHA_256 --wrapping-key-spec RSA_4096`, wrap the key
//     in PKCS #8 DER form (`openssl pkcs8 -topk8 -nocrypt -outform DER -in
//     ca_key.pem`) as AWS's "Encrypt the key material" step says, then
//     `aws kms import-key-material --expiration-model
//     KEY_MATERIAL_DOES_NOT_EXPIRE` and `aws kms create-alias`; then start
//     with --ca-key-kms and the alias. KMS then signs with it, but the key
//     existed outside KMS (on the Puppet Server, in its backups, on the
//     machine that wrapped it): destroy those copies, and know that KMS
//     cannot vouch for them.
//
// # Errors
//
// SDK errors are translated here and never returned: a key or alias that
// does not exist is farm.ErrNotFound; an alias or key that already exists
// for GenerateKey is farm.ErrConflict; a key KMS cannot sign with for the
// CA (wrong usage or spec, disabled, pending deletion or import), a bad
// bits and a digest or option Sign cannot serve are farm.ErrInvalid;
// throttling, KMS's internal errors, timeouts and connection failures are
// farm.ErrTransient. Access denied carries no kind and names the IAM
// actions to grant.
//
// # Permissions
//
// Signing (the fleet): kms:DescribeKey, kms:GetPublicKey and kms:Sign on
// the key. GenerateKey (broker ca init, an administrator): also
// kms:CreateKey and kms:TagResource (the key is created with tags), and
// kms:CreateAlias on the alias and the key, kms:ScheduleKeyDeletion on the
// keys it creates.
//
// # Concurrency
//
// A Key and its signer are safe for concurrent use. Of concurrent
// GenerateKeys of one alias, in this process or any other, exactly one
// succeeds: CreateAlias is atomic in KMS, and every loser schedules the
// key it created for deletion (after 7 days, the shortest wait KMS allows)
// and returns farm.ErrConflict.
package kmskey

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/rsa"
	"crypto/x509"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kms"
	"github.com/aws/aws-sdk-go-v2/service/kms/types"

	"github.com/compilefarm/compilefarm/pkg/farm"
)

// SignTimeout bounds each Sign of a signer: crypto.Signer's Sign takes no
// context, so it makes its own. KMS answers a Sign in tens of
// milliseconds; the SDK's retries of a throttled or failed call fit in it.
const SignTimeout = 10 * time.Second

// DeletionWindowDays is how long a key GenerateKey created and could not
// name (it lost a race for the alias) waits before KMS deletes it: the
// shortest wait KMS allows. `aws kms cancel-key-deletion` takes it back.
const DeletionWindowDays = 7

// Key is the CA key in the KMS key (or alias) it names: a
// farm.CAKeySource, but no farm.CAKeyImporter (see "Importing a Puppet
// Server CA key").
type Key struct {
	client *kms.Client
	id     string

	signTimeout time.Duration
	// mu (a one-slot semaphore, so a waiting Signer can give up with its
	// context) guards signer.
	mu     chan struct{}
	signer *signer
}

var _ farm.CAKeySource = (*Key)(nil)

// NewKey returns the key source of keyID: a key ID, key ARN, alias name
// ("alias/...") or alias ARN, in client's account and region.
func NewKey(client *kms.Client, keyID string) *Key {
	return &Key{client: client, id: keyID, signTimeout: SignTimeout, mu: make(chan struct{}, 1)}
}

// String names the key in messages: "KMS key alias/compilefarm/prod/ca".
func (k *Key) String() string { return "KMS key " + k.id }

// Signer returns a crypto.Signer that signs with the key inside KMS: the
// key's public half and, for each Sign, one kms:Sign call. ErrNotFound when
// no such key or alias exists; ErrInvalid, saying what is wrong and what to
// do, when the key exists but cannot sign for the CA. After the first
// success the same signer is returned without asking KMS again.
func (k *Key) Signer(ctx context.Context) (crypto.Signer, error) {
	if err := farm.CheckSigner(ctx, k); err != nil {
		return nil, err
	}
	select {
	case k.mu <- struct{}{}:
		defer func() { <-k.mu }()
	case <-ctx.Done():
		return nil, fmt.Errorf("load CA key from %s: %w", k, ctx.Err())
	}
	if k.signer != nil {
		return k.signer, nil
	}
	s, err := k.load(ctx)
	if err != nil {
		return nil, err
	}
	k.signer = s
	return s, nil
}

// load asks KMS for the key's metadata and public half.
func (k *Key) load(ctx context.Context) (*signer, error) {
	if k.id == "" {
		return nil, fmt.Errorf("load CA key from %s: no key ID or alias given: %w", k, farm.ErrInvalid)
	}
	md, err := k.describe(ctx, "load CA key from "+k.String())
	if err != nil {
		return nil, err
	}
	if err := usable(md); err != nil {
		return nil, fmt.Errorf("load CA key from %s: %w", k, err)
	}
	arn := aws.ToString(md.Arn)
	out, err := k.client.GetPublicKey(ctx, &kms.GetPublicKeyInput{KeyId: aws.String(arn)})
	if err != nil {
		return nil, translate("read the public key of "+k.String(), err)
	}
	pub, err := x509.ParsePKIXPublicKey(out.PublicKey)
	if err != nil {
		return nil, fmt.Errorf("load CA key from %s: KMS's public key does not parse: %v", k, err)
	}
	switch pub.(type) {
	case *rsa.PublicKey, *ecdsa.PublicKey:
	default:
		return nil, fmt.Errorf("load CA key from %s: a %T public key: %w", k, pub, farm.ErrInvalid)
	}
	algs := out.SigningAlgorithms
	if len(algs) == 0 {
		algs = md.SigningAlgorithms
	}
	return &signer{client: k.client, name: k.String(), arn: arn, pub: pub, algs: algs, timeout: k.signTimeout}, nil
}

// describe is DescribeKey of the key, translated; what says what for.
func (k *Key) describe(ctx context.Context, what string) (*types.KeyMetadata, error) {
	out, err := k.client.DescribeKey(ctx, &kms.DescribeKeyInput{KeyId: aws.String(k.id)})
	if err != nil {
		return nil, translate(what, err)
	}
	if out.KeyMetadata == nil {
		return nil, fmt.Errorf("%s: KMS answered DescribeKey without metadata", what)
	}
	return out.KeyMetadata, nil
}

// usable says why md's key cannot sign for the CA (ErrInvalid), or nil.
func usable(md *types.KeyMetadata) error {
	if md.KeyUsage != types.KeyUsageTypeSignVerify {
		return fmt.Errorf("key %s is for %s, not SIGN_VERIFY: the CA needs an asymmetric signing key (RSA_4096): %w",
			aws.ToString(md.KeyId), md.KeyUsage, farm.ErrInvalid)
	}
	switch md.KeySpec {
	case types.KeySpecRsa2048, types.KeySpecRsa3072, types.KeySpecRsa4096,
		types.KeySpecEccNistP256, types.KeySpecEccNistP384, types.KeySpecEccNistP521:
	default:
		return fmt.Errorf("key %s has key spec %s, which X.509 certificates cannot use: create an RSA_4096 key: %w",
			aws.ToString(md.KeyId), md.KeySpec, farm.ErrInvalid)
	}
	switch md.KeyState {
	case types.KeyStateEnabled:
	case types.KeyStateDisabled:
		return fmt.Errorf("key %s is disabled: enable it (aws kms enable-key) to sign: %w", aws.ToString(md.KeyId), farm.ErrInvalid)
	case types.KeyStatePendingDeletion, types.KeyStatePendingReplicaDeletion:
		when := ""
		if md.DeletionDate != nil {
			when = " on " + md.DeletionDate.UTC().Format(time.RFC3339)
		}
		return fmt.Errorf("key %s is scheduled for deletion%s: cancel it (aws kms cancel-key-deletion) and enable it to sign: %w",
			aws.ToString(md.KeyId), when, farm.ErrInvalid)
	case types.KeyStatePendingImport:
		return fmt.Errorf("key %s has no key material yet: import it (aws kms import-key-material) to sign: %w", aws.ToString(md.KeyId), farm.ErrInvalid)
	default:
		return fmt.Errorf("key %s is %s, not Enabled: %w", aws.ToString(md.KeyId), md.KeyState, farm.ErrInvalid)
	}
	if !md.Enabled {
		return fmt.Errorf("key %s is not enabled: %w", aws.ToString(md.KeyId), farm.ErrInvalid)
	}
	return nil
}

// GenerateKey creates an RSA key of bits bits (2048, 3072 or 4096, the
// sizes KMS makes; else ErrInvalid) inside KMS under the Key's alias, when the alias does not
// exist; ErrConflict, changing nothing, when it does. A Key named by a key
// ID or ARN cannot be created (KMS chooses key IDs): ErrConflict when that
// key exists, ErrInvalid when it does not. Of concurrent GenerateKeys of
// one alias exactly one succeeds; the others schedule the key they created
// for deletion and return ErrConflict.
func (k *Key) GenerateKey(ctx context.Context, bits int) error {
	if err := farm.CheckGenerateKey(ctx, k, bits); err != nil {
		return err
	}
	spec, ok := rsaSpecs[bits]
	if !ok {
		return fmt.Errorf("create CA key in %s: an RSA key of %d bits: KMS makes 2048, 3072 or 4096: %w", k, bits, farm.ErrInvalid)
	}
	alias, isAlias := aliasName(k.id)
	switch {
	case k.id == "":
		return fmt.Errorf("create CA key in %s: no alias given: %w", k, farm.ErrInvalid)
	case isAlias && strings.HasPrefix(alias, "alias/aws/"):
		return fmt.Errorf("create CA key in %s: alias/aws/ is AWS's own: name another alias: %w", k, farm.ErrInvalid)
	}
	md, err := k.describe(ctx, "create CA key in "+k.String())
	switch {
	case err == nil:
		return fmt.Errorf("create CA key in %s: key %s (%s, %s) is already there: %w",
			k, aws.ToString(md.KeyId), md.KeySpec, md.KeyState, farm.ErrConflict)
	case !errors.Is(err, farm.ErrNotFound):
		return err
	case !isAlias:
		return fmt.Errorf("create CA key in %s: no such key, and KMS chooses key IDs: name an alias (alias/compilefarm/<stage>/ca) to create a key: %w",
			k, farm.ErrInvalid)
	}
	keyID, err := k.createKey(ctx, spec, alias)
	if err != nil {
		return err
	}
	return k.nameKey(ctx, keyID, alias)
}

// createKey creates a signing key of spec in KMS, not yet named, and
// returns its ID.
func (k *Key) createKey(ctx context.Context, spec types.KeySpec, alias string) (string, error) {
	out, err := k.client.CreateKey(ctx, &kms.CreateKeyInput{
		KeySpec:     spec,
		KeyUsage:    types.KeyUsageTypeSignVerify,
		Description: aws.String("compilefarm Puppet CA key (" + alias + ")"),
		Tags: []types.Tag{
			{TagKey: aws.String("compilefarm:purpose"), TagValue: aws.String("puppet-ca")},
			{TagKey: aws.String("compilefarm:alias"), TagValue: aws.String(alias)},
		},
	})
	if err != nil {
		return "", translate("create CA key in "+k.String(), err)
	}
	if out.KeyMetadata == nil || out.KeyMetadata.KeyId == nil {
		return "", fmt.Errorf("create CA key in %s: KMS answered CreateKey without a key ID", k)
	}
	return aws.ToString(out.KeyMetadata.KeyId), nil
}

// nameKey points alias at keyID, the key createKey just made. When that
// fails, the key must not be left behind unnamed: unless the alias turns
// out to point at it after all (a CreateAlias whose answer was lost and
// whose retry found the alias), it is scheduled for deletion, even when
// ctx ended. Another key under the alias is ErrConflict.
func (k *Key) nameKey(ctx context.Context, keyID, alias string) error {
	_, err := k.client.CreateAlias(ctx, &kms.CreateAliasInput{AliasName: aws.String(alias), TargetKeyId: aws.String(keyID)})
	if err == nil {
		return nil
	}
	err = translate("name CA key "+keyID+" "+alias+" in "+k.String(), err)
	if errors.Is(err, farm.ErrConflict) {
		err = fmt.Errorf("create CA key in %s: another process created it first: %w", k, farm.ErrConflict)
	}
	cleanup, cancel := context.WithTimeout(context.WithoutCancel(ctx), SignTimeout)
	defer cancel()
	out, derr := k.client.DescribeKey(cleanup, &kms.DescribeKeyInput{KeyId: aws.String(alias)})
	if derr == nil && out.KeyMetadata != nil && aws.ToString(out.KeyMetadata.KeyId) == keyID {
		return nil // named after all
	}
	if derr != nil {
		if derr = translate("look up "+alias, derr); !errors.Is(derr, farm.ErrNotFound) {
			return fmt.Errorf("%w; and whether %s names the new key %s is unknown (%v): if it does not, delete the key (aws kms schedule-key-deletion --key-id %s)",
				err, alias, keyID, derr, keyID)
		}
	}
	if _, derr := k.client.ScheduleKeyDeletion(cleanup, &kms.ScheduleKeyDeletionInput{
		KeyId: aws.String(keyID), PendingWindowInDays: aws.Int32(DeletionWindowDays),
	}); derr != nil {
		return fmt.Errorf("%w; and the unnamed key %s was not scheduled for deletion (%v): delete it (aws kms schedule-key-deletion --key-id %s)",
			err, keyID, translate("schedule its deletion", derr), keyID)
	}
	return err
}

// rsaSpecs are the KMS key specs of the RSA sizes GenerateKey makes.
var rsaSpecs = map[int]types.KeySpec{
	2048: types.KeySpecRsa2048,
	3072: types.KeySpecRsa3072,
	4096: types.KeySpecRsa4096,
}

// aliasName returns the alias name ("alias/...") id names, by name or by
// ARN ("arn:aws:kms:region:account:alias/..."), and whether it names one.
func aliasName(id string) (string, bool) {
	if strings.HasPrefix(id, "alias/") {
		return id, true
	}
	if strings.HasPrefix(id, "arn:") {
		// arn:partition:kms:region:account:resource
		if parts := strings.SplitN(id, ":", 6); len(parts) == 6 && strings.HasPrefix(parts[5], "alias/") {
			return parts[5], true
		}
	}
	return "", false
}

// describeDigest names a digest in messages: its hash and first bytes.
func describeDigest(h crypto.Hash, digest []byte) string {
	name := "unhashed"
	if h != 0 {
		name = h.String()
	}
	return fmt.Sprintf("%s digest %x… (%d bytes)", name, digest[:min(len(digest), 8)], len(digest))
}

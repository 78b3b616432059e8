// Package cakey keeps the CA's private key in an AWS Secrets Manager
// secret: a farm.CAKeyImporter for fleets that sign on AWS with a key
// brought from Puppet Server, so the key never sits on a task's disk or in
// the CA's DynamoDB table (it is read into the signing tasks' memory; a
// key that must never leave AWS lives in KMS instead, package kmskey).
package cakey

import (
	"context"
	"crypto"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/aws/smithy-go"

	"github.com/compilefarm/compilefarm/pkg/farm"
	"github.com/compilefarm/compilefarm/pkg/pki"
)

// Secret is a farm.CAKeyImporter in the Secrets Manager secret ID (a name
// or an ARN), whose SecretString is the PEM key. Whoever can read the
// secret holds the CA key: the tasks that sign with it read it into
// memory. It makes RSA keys of any size the contract allows (PKCS#1) and
// keeps an imported key's bytes as given.
type Secret struct {
	client *secretsmanager.Client
	id     string
}

var _ farm.CAKeyImporter = (*Secret)(nil)

// NewSecret returns the key source of secret id.
func NewSecret(client *secretsmanager.Client, id string) *Secret {
	return &Secret{client: client, id: id}
}

// String names the secret in messages.
func (s *Secret) String() string { return "Secrets Manager secret " + s.id }

// Signer reads the secret's current value and parses it; ErrNotFound when
// the secret or its value does not exist. The key then signs in memory.
func (s *Secret) Signer(ctx context.Context) (crypto.Signer, error) {
	if err := farm.CheckSigner(ctx, s); err != nil {
		return nil, err
	}
	keyPEM, err := s.value(ctx)
	if err != nil {
		return nil, err
	}
	key, err := pki.ParsePrivateKey(keyPEM)
	if err != nil {
		return nil, fmt.Errorf("read CA key from %s: %w", s, err)
	}
	return key, nil
}

// value reads the secret's current value; ErrNotFound when the secret or
// its value does not exist.
func (s *Secret) value(ctx context.Context) ([]byte, error) {
	out, err := s.client.GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: aws.String(s.id)})
	if err != nil {
		return nil, s.translate("read CA key", err)
	}
	if out.SecretString == nil || *out.SecretString == "" {
		if len(out.SecretBinary) > 0 {
			return out.SecretBinary, nil
		}
		return nil, fmt.Errorf("read CA key from %s: the secret is empty: %w", s, farm.ErrNotFound)
	}
	return []byte(*out.SecretString), nil
}

// GenerateKey makes an RSA key (PKCS#1) in this process and stores it as
// ImportKey does; when the secret holds a key it returns ErrConflict
// without making one.
func (s *Secret) GenerateKey(ctx context.Context, bits int) error {
	if err := farm.CheckGenerateKey(ctx, s, bits); err != nil {
		return err
	}
	if _, err := s.value(ctx); err == nil {
		return fmt.Errorf("generate CA key in %s: the secret already holds a key: %w", s, farm.ErrConflict)
	} else if !errors.Is(err, farm.ErrNotFound) {
		return err
	}
	_, keyPEM, err := pki.NewRSAKey(bits)
	if err != nil {
		return fmt.Errorf("generate CA key in %s: %w", s, err)
	}
	if err := ctx.Err(); err != nil { // generating a large key takes seconds
		return fmt.Errorf("generate CA key in %s: %w", s, err)
	}
	return s.store(ctx, keyPEM)
}

// ImportKey stores keyPEM, as given, once it parses.
func (s *Secret) ImportKey(ctx context.Context, keyPEM []byte) error {
	if err := farm.CheckImportKey(ctx, s, keyPEM); err != nil {
		return err
	}
	if _, err := pki.ParsePrivateKey(keyPEM); err != nil {
		return fmt.Errorf("import CA key into %s: %w: %w", s, err, farm.ErrInvalid)
	}
	return s.store(ctx, keyPEM)
}

// firstVersion is the client request token of the secret's first value:
// Secrets Manager refuses a second, different value under one token, so of
// several processes giving a secret its first value only one succeeds,
// whether they create the secret or fill one the infra stack made empty.
const firstVersion = "compilefarm-ca-key-first-version-0001"

// store creates the secret holding keyPEM; ErrConflict when a secret with
// a value already exists. Creating a secret is atomic: of concurrent
// stores one creates it, the others are told it exists and return
// ErrConflict. A secret that exists without a value (made by the infra
// stack, say) gets keyPEM as its first value, under firstVersion, so that
// there too exactly one store succeeds (Secrets Manager's promise for a
// reused client request token; the moto emulator the tests run against
// overwrites instead, so that case is not tested here).
func (s *Secret) store(ctx context.Context, keyPEM []byte) error {
	_, err := s.client.CreateSecret(ctx, &secretsmanager.CreateSecretInput{
		Name:               aws.String(s.id),
		Description:        aws.String("compilefarm Puppet CA private key (PEM)"),
		SecretString:       aws.String(string(keyPEM)),
		ClientRequestToken: aws.String(firstVersion),
	})
	if err == nil {
		return nil
	}
	var api smithy.APIError
	if !errors.As(err, &api) || api.ErrorCode() != "ResourceExistsException" {
		return s.translate("store CA key", err)
	}
	if _, err := s.value(ctx); err == nil {
		return fmt.Errorf("store CA key in %s: the secret already holds a key: %w", s, farm.ErrConflict)
	} else if !errors.Is(err, farm.ErrNotFound) {
		return err
	}
	_, err = s.client.PutSecretValue(ctx, &secretsmanager.PutSecretValueInput{
		SecretId: aws.String(s.id), SecretString: aws.String(string(keyPEM)), ClientRequestToken: aws.String(firstVersion),
	})
	if errors.As(err, &api) && api.ErrorCode() == "ResourceExistsException" {
		return fmt.Errorf("store CA key in %s: another process gave the secret its first value: %w", s, farm.ErrConflict)
	}
	if err != nil {
		return s.translate("store CA key", err)
	}
	return nil
}

func (s *Secret) translate(what string, err error) error {
	var api smithy.APIError
	if errors.As(err, &api) {
		switch api.ErrorCode() {
		case "ResourceNotFoundException":
			return fmt.Errorf("%s from %s: %s: %w", what, s, api.ErrorMessage(), farm.ErrNotFound)
		case "AccessDeniedException", "DecryptionFailure":
			return fmt.Errorf("%s from %s: %s (give the task role secretsmanager:GetSecretValue on it, and kms:Decrypt on its key)", what, s, api.ErrorMessage())
		}
	}
	return fmt.Errorf("%s from %s: %w", what, s, err)
}

// Package cakey keeps the CA's private key in an AWS Secrets Manager
// secret: the farm.CAKeySource of front doors that sign on AWS, so the key never
// sits on a task's disk or in the CA's DynamoDB table.
package cakey

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/aws/smithy-go"

	"github.com/compilefarm/compilefarm/pkg/farm"
)

// Secret is a farm.CAKeySource in the Secrets Manager secret ID (a name or an
// ARN), whose SecretString is the PEM key.
type Secret struct {
	client *secretsmanager.Client
	id     string
}

var _ farm.CAKeySource = (*Secret)(nil)

// NewSecret returns the key source of secret id.
func NewSecret(client *secretsmanager.Client, id string) *Secret {
	return &Secret{client: client, id: id}
}

// String names the secret in messages.
func (s *Secret) String() string { return "Secrets Manager secret " + s.id }

// LoadKey reads the secret's current value; ErrNotFound when the secret or
// its value does not exist.
func (s *Secret) LoadKey(ctx context.Context) ([]byte, error) {
	if err := farm.CheckLoadKey(ctx, s); err != nil {
		return nil, err
	}
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

// CreateKey creates the secret holding keyPEM; ErrConflict when a secret
// with a value already exists. Creating a secret is atomic: of concurrent
// CreateKeys one creates it, the others are told it exists and return
// ErrConflict. A secret that exists without a value (made by the infra
// stack, say) gets keyPEM as its first value; Secrets Manager writes a
// value without a condition, so two CreateKeys racing on such a secret may
// both succeed, the later value staying (the CA then refuses to start on a
// key that does not match its certificate, loudly).
func (s *Secret) CreateKey(ctx context.Context, keyPEM []byte) error {
	if err := farm.CheckCreateKey(ctx, s, keyPEM); err != nil {
		return err
	}
	_, err := s.client.CreateSecret(ctx, &secretsmanager.CreateSecretInput{
		Name:         aws.String(s.id),
		Description:  aws.String("compilefarm Puppet CA private key (PEM)"),
		SecretString: aws.String(string(keyPEM)),
	})
	if err == nil {
		return nil
	}
	var api smithy.APIError
	if !errors.As(err, &api) || api.ErrorCode() != "ResourceExistsException" {
		return s.translate("store CA key", err)
	}
	if _, err := s.LoadKey(ctx); err == nil {
		return fmt.Errorf("store CA key in %s: the secret already holds a key: %w", s, farm.ErrConflict)
	} else if !errors.Is(err, farm.ErrNotFound) {
		return err
	}
	if _, err := s.client.PutSecretValue(ctx, &secretsmanager.PutSecretValueInput{
		SecretId: aws.String(s.id), SecretString: aws.String(string(keyPEM)),
	}); err != nil {
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

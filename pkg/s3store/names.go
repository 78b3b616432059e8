package s3store

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/compilefarm/compilefarm/pkg/farm"
)

var _ farm.NameStore = (*Store)(nil)

// nameKey returns the object key of name in space, whose object holds the
// digest the name points at (64 hex characters):
//
//	<Options.Prefix><sp>/names/<name>!
//
// inside its space's prefix. Content keys of a space start with two hex
// digits, so they never meet "names/". The '!' (which no name holds) ends
// every name's key, so that no key is the "parent directory" of another
// ("a!" and "a/b!"): S3-compatible stores that keep keys as files
// (versitygw's posix backend, MinIO) cannot hold both "a" and "a/b".
func (s *Store) nameKey(space farm.Space, name string) string {
	return s.prefix + string(space) + "/names/" + name + "!"
}

// PutName makes name in space point at d; a name already pointing at
// another digest is farm.ErrConflict and keeps it. It creates the object
// with If-None-Match: *, as Put does: when S3 answers 412 the name exists,
// and PutName reads it to tell "the same digest" (success) from "another
// digest". Names need s3:GetObject and s3:PutObject, as content does.
func (s *Store) PutName(ctx context.Context, space farm.Space, name string, d farm.Digest) error {
	if err := farm.CheckPutName(ctx, space, name, d); err != nil {
		return err
	}
	key := s.nameKey(space, name)
	where := fmt.Sprintf("put name s3://%s/%s", s.bucket, key)
	body := []byte(d)
	exists, err := s.create(ctx, key, body, sha256.Sum256(body), "text/plain")
	if err != nil {
		return translateAt(where, s.bucket, err)
	}
	if !exists {
		return nil
	}
	// Tell "the same digest" (success) from "another digest".
	old, err := s.GetName(ctx, space, name)
	if err != nil {
		return fmt.Errorf("%s: it exists, but reading it failed: %w", where, err)
	}
	if old != d {
		return fmt.Errorf("%s: it points at %s, not %s: %w", where, old, d, farm.ErrConflict)
	}
	return nil
}

// GetName returns the digest name in space points at.
func (s *Store) GetName(ctx context.Context, space farm.Space, name string) (farm.Digest, error) {
	if err := farm.CheckGetName(ctx, space, name); err != nil {
		return "", err
	}
	key := s.nameKey(space, name)
	where := fmt.Sprintf("get name s3://%s/%s", s.bucket, key)
	out, err := s.client.GetObject(ctx, &s3.GetObjectInput{
		Bucket: aws.String(s.bucket),
		Key:    aws.String(key),
	})
	if err != nil {
		return "", translateAt(where, s.bucket, err)
	}
	defer out.Body.Close()
	b, err := io.ReadAll(io.LimitReader(out.Body, 128))
	if err != nil {
		return "", translateAt(where, s.bucket, fmt.Errorf("read body: %w", err))
	}
	d := farm.Digest(b)
	if !d.Valid() {
		return "", fmt.Errorf("%s: the object holds %q, not a sha256 digest: %w", where, b, farm.ErrInvalid)
	}
	return d, nil
}

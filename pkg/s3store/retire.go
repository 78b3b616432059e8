package s3store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/url"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/compilefarm/compilefarm/pkg/farm"
)

var _ farm.ContentRetirer = (*Store)(nil)

// RetiredTagKey and RetiredTagValue are the object tag Retire sets; the
// stack's lifecycle rule (infra/farmstack/storage.go) expires the
// catalogs carrying it. Keep sets the key to KeptTagValue, which no rule
// selects. The store sets no other tag on its objects.
const (
	RetiredTagKey   = "compilefarm-superseded"
	RetiredTagValue = "true"
	KeptTagValue    = "false"
)

// PutNew is Put that also reports whether the object was there (S3
// answered 412 to If-None-Match: *). One PutObject.
func (s *Store) PutNew(ctx context.Context, space farm.Space, data []byte) (farm.Digest, bool, error) {
	if err := farm.CheckContentPut(ctx, space); err != nil {
		return "", false, err
	}
	sum := sha256.Sum256(data)
	d := farm.Digest(hex.EncodeToString(sum[:]))
	key := s.key(space, d)
	// When the object exists, its key is the SHA-256 of data, and S3
	// verified the checksum when it was written: the same bytes are stored.
	existed, err := s.create(ctx, key, data, sum, "application/octet-stream")
	if err != nil {
		return "", false, translate("put", s.bucket, key, err)
	}
	return d, existed, nil
}

// Retire copies the object onto itself, the same bytes, with the tag
// RetiredTagKey=RetiredTagValue in place of any others: one CopyObject, a
// copy inside S3 billed as one PUT request. A copy, not PutObjectTagging,
// because S3 lifecycle counts a rule's days from the object's
// Last-Modified, which tagging leaves alone: the copy starts the
// retention at the Retire, not at the day the catalog was first stored.
func (s *Store) Retire(ctx context.Context, space farm.Space, d farm.Digest) error {
	if err := farm.CheckContentRetire(ctx, space, d); err != nil {
		return err
	}
	key := s.key(space, d)
	_, err := s.client.CopyObject(ctx, &s3.CopyObjectInput{
		Bucket:            aws.String(s.bucket),
		Key:               aws.String(key),
		CopySource:        aws.String(copySource(s.bucket, key)),
		MetadataDirective: types.MetadataDirectiveReplace, // required to copy an object onto itself
		ContentType:       aws.String("application/octet-stream"),
		TaggingDirective:  types.TaggingDirectiveReplace,
		Tagging:           aws.String(url.QueryEscape(RetiredTagKey) + "=" + url.QueryEscape(RetiredTagValue)),
		ChecksumAlgorithm: types.ChecksumAlgorithmSha256,
	})
	if err != nil {
		return translate("retire", s.bucket, key, err)
	}
	return nil
}

// Keep replaces the object's tags (the store sets none but its own) with
// RetiredTagKey=KeptTagValue: one PutObjectTagging, the one action Retire
// needs too (an empty tag set is not accepted everywhere, and
// DeleteObjectTagging would be another IAM action).
func (s *Store) Keep(ctx context.Context, space farm.Space, d farm.Digest) error {
	if err := farm.CheckContentKeep(ctx, space, d); err != nil {
		return err
	}
	key := s.key(space, d)
	_, err := s.client.PutObjectTagging(ctx, &s3.PutObjectTaggingInput{
		Bucket:  aws.String(s.bucket),
		Key:     aws.String(key),
		Tagging: &types.Tagging{TagSet: []types.Tag{{Key: aws.String(RetiredTagKey), Value: aws.String(KeptTagValue)}}},
	})
	if err != nil {
		return translate("keep", s.bucket, key, err)
	}
	return nil
}

// Retired reads the object's tags: one GetObjectTagging.
func (s *Store) Retired(ctx context.Context, space farm.Space, d farm.Digest) (bool, error) {
	if err := farm.CheckContentRetired(ctx, space, d); err != nil {
		return false, err
	}
	key := s.key(space, d)
	out, err := s.client.GetObjectTagging(ctx, &s3.GetObjectTaggingInput{
		Bucket: aws.String(s.bucket),
		Key:    aws.String(key),
	})
	if err != nil {
		return false, translate("retired", s.bucket, key, err)
	}
	for _, t := range out.TagSet {
		if aws.ToString(t.Key) == RetiredTagKey && aws.ToString(t.Value) == RetiredTagValue {
			return true, nil
		}
	}
	return false, nil
}

// copySource is CopyObject's x-amz-copy-source for key in bucket:
// "bucket/key" URL-encoded, every byte but unreserved ones and '/' as %XX
// ('+' too, which some S3-compatible stores read as a space).
func copySource(bucket, key string) string {
	var b strings.Builder
	for _, c := range []byte(bucket + "/" + key) {
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', strings.IndexByte("-_.~/", c) >= 0:
			b.WriteByte(c)
		default:
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

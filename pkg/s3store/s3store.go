// Package s3store is the farm.ContentStore driver for Amazon S3 (and
// S3-compatible stores): immutable blobs addressed by their SHA-256.
//
// # Key layout
//
// A blob d of space sp lives at
//
//	<Options.Prefix><sp>/<d[0:2]>/<d>
//
// e.g. "catalogs/3f/3f9a…c2". The space comes first so that each space is a
// prefix of its own, which is what S3 lifecycle rules, replication and IAM
// policies select on (reports can expire while catalogs stay). Within a
// space, the first two hex digits of the digest spread keys evenly over 256
// sub-prefixes, so S3 can partition a busy space's request rate (S3 scales
// per prefix); the full digest as the last element keeps every key
// self-describing. This is the same layout as the embedded driver's
// directories (pkg/localstore), so a store can be copied between them with
// `aws s3 sync`.
//
// # Writes
//
// Put sends the object with its SHA-256 (x-amz-checksum-sha256), so S3
// rejects bytes damaged on the way, and with If-None-Match: * so a stored
// object is never overwritten: a 412 Precondition Failed means the same
// bytes are already there, which for a content-addressed store is success.
// Concurrent Puts of the same bytes therefore all succeed and leave exactly
// one object. The one write onto a stored object is Retire's copy of its
// own bytes (below).
//
// # Retirement
//
// The store is a farm.ContentRetirer (retire.go): Retire copies an object
// onto itself with the tag compilefarm-superseded=true (RetiredTagKey),
// which restarts its age, and Keep sets the tag to false. A lifecycle
// rule of the bucket selecting the tag (the stack's, on catalogs/) removes
// retired objects its days after their Retire; without such a rule the
// tag removes nothing.
//
// # Names
//
// The store is also a farm.NameStore (names.go): a name is a small object
// holding the digest it points at, at <Options.Prefix><sp>/names/<name>!,
// inside its space's prefix (so one lifecycle rule or IAM statement on
// "<sp>/" covers a space's content and names), created with
// If-None-Match: * so that it is written once.
//
// # Errors
//
// SDK errors are translated here and never returned: a missing key is
// farm.ErrNotFound; throttling, 5xx answers, timeouts and connection failures
// are farm.ErrTransient; a malformed space or digest, and an object whose
// bytes do not hash to its key, are farm.ErrInvalid. Other failures (access
// denied, missing bucket) carry no domain kind: retrying will not help.
// Context cancellation is returned as context.Canceled (and a deadline as
// farm.ErrTransient and context.DeadlineExceeded).
//
// # Permissions
//
// The store needs s3:GetObject, s3:PutObject and s3:ListBucket on the bucket:
// without ListBucket, S3 answers 403 instead of 404 for a missing key and Has
// and Get cannot tell "absent" from "forbidden". Retire and Keep need
// s3:PutObjectTagging too (a CopyObject that sets tags needs it besides
// GetObject and PutObject), Retired s3:GetObjectTagging.
package s3store

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/compilefarm/compilefarm/internal/backoff"
	"github.com/compilefarm/compilefarm/pkg/farm"
)

var _ farm.ContentStore = (*Store)(nil)

// Options tune a Store. The zero value is ready to use.
type Options struct {
	// Prefix is put in front of every key, e.g. "farm-prod/" to share a
	// bucket between deployments. It is used as is (end it with "/").
	Prefix string
	// ConflictRetries bounds how often Put retries after S3 answers 409
	// ConditionalRequestConflict (another conditional write of the same key
	// in flight). Zero means 5.
	ConflictRetries int
}

// Store is a farm.ContentStore in one S3 bucket. It is safe for concurrent
// use (the S3 client is).
type Store struct {
	client  *s3.Client
	bucket  string
	prefix  string
	retries int
}

// New returns a Store keeping blobs in bucket through client. The bucket
// must exist; New makes no request.
func New(client *s3.Client, bucket string, opts Options) *Store {
	r := opts.ConflictRetries
	if r <= 0 {
		r = 5
	}
	return &Store{client: client, bucket: bucket, prefix: opts.Prefix, retries: r}
}

// NewFromConfig returns a Store using an S3 client made from cfg, which a
// main loads with config.LoadDefaultConfig, so the standard AWS settings
// apply (AWS_REGION, credentials, AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL).
// When an endpoint override is in effect (LocalStack, an emulator, an
// S3-compatible service) the client uses path-style addressing, which those
// expect.
func NewFromConfig(cfg aws.Config, bucket string, opts Options) *Store {
	client := s3.NewFromConfig(cfg, PathStyleForCustomEndpoint)
	return New(client, bucket, opts)
}

// PathStyleForCustomEndpoint is an s3.Options function that turns on
// path-style addressing when the client has an endpoint override
// (s3.NewFromConfig has already resolved AWS_ENDPOINT_URL_S3 and
// AWS_ENDPOINT_URL into BaseEndpoint when it runs option functions).
func PathStyleForCustomEndpoint(o *s3.Options) {
	if o.BaseEndpoint != nil && *o.BaseEndpoint != "" {
		o.UsePathStyle = true
	}
}

// Bucket returns the bucket the store writes to.
func (s *Store) Bucket() string { return s.bucket }

// key returns the object key of blob d in space (see the package doc).
func (s *Store) key(space farm.Space, d farm.Digest) string {
	return s.prefix + string(space) + "/" + string(d[:2]) + "/" + string(d)
}

// Put stores data in space under its SHA-256 and returns the digest. It is
// idempotent: when the object already exists (S3 answers 412 to
// If-None-Match: *) it succeeds without writing.
func (s *Store) Put(ctx context.Context, space farm.Space, data []byte) (farm.Digest, error) {
	d, _, err := s.PutNew(ctx, space, data)
	return d, err
}

// create writes body at key unless an object is there already (PutObject
// with If-None-Match: *; exists reports S3's 412), with the body's SHA-256
// (sum) for S3 to check. While another conditional write of the key is in
// flight (AWS S3 answers 409 then) it retries: once that write finishes,
// the retry gets 412. Errors are the SDK's, for the caller to translate.
func (s *Store) create(ctx context.Context, key string, body []byte, sum [sha256.Size]byte, contentType string) (exists bool, err error) {
	checksum := base64.StdEncoding.EncodeToString(sum[:])
	for attempt := 0; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return false, err
		}
		_, err := s.client.PutObject(ctx, &s3.PutObjectInput{
			Bucket: aws.String(s.bucket),
			Key:    aws.String(key),
			// A fresh reader per attempt: the SDK reads (and may seek) it.
			Body:              bytes.NewReader(body),
			ContentLength:     aws.Int64(int64(len(body))),
			ContentType:       aws.String(contentType),
			ChecksumAlgorithm: types.ChecksumAlgorithmSha256,
			ChecksumSHA256:    aws.String(checksum),
			IfNoneMatch:       aws.String("*"),
		})
		if err == nil {
			return false, nil
		}
		switch errorCode(err) {
		case "PreconditionFailed":
			return true, nil
		case "ConditionalRequestConflict":
			if attempt < s.retries {
				if err := backoff.Sleep(ctx, time.Duration(attempt+1)*50*time.Millisecond); err != nil {
					return false, err
				}
				continue
			}
		}
		return false, err
	}
}

// Get returns the blob d of space after checking that its bytes hash to d.
// An unknown digest is farm.ErrNotFound; an object whose bytes do not match
// its key is an error naming the key and wrapping farm.ErrInvalid.
func (s *Store) Get(ctx context.Context, space farm.Space, d farm.Digest) ([]byte, error) {
	if err := farm.CheckContentGet(ctx, space, d); err != nil {
		return nil, err
	}
	key := s.key(space, d)
	out, err := s.client.GetObject(ctx, &s3.GetObjectInput{
		Bucket: aws.String(s.bucket),
		Key:    aws.String(key),
	}, func(o *s3.Options) {
		// The whole object is hashed below against its key, which is
		// stronger than the stored checksum; skip the SDK's own pass.
		o.ResponseChecksumValidation = aws.ResponseChecksumValidationWhenRequired
		o.DisableLogOutputChecksumValidationSkipped = true
	})
	if err != nil {
		return nil, translate("get", s.bucket, key, err)
	}
	defer out.Body.Close()
	var buf bytes.Buffer
	if out.ContentLength != nil && *out.ContentLength > 0 && *out.ContentLength < 1<<31 {
		buf.Grow(int(*out.ContentLength))
	}
	if _, err := io.Copy(&buf, out.Body); err != nil {
		return nil, translate("get", s.bucket, key, fmt.Errorf("read body: %w", err))
	}
	b := buf.Bytes()
	if got := farm.DigestOf(b); got != d {
		return nil, fmt.Errorf("get content: object s3://%s/%s is corrupt (its %d bytes hash to %s): %w",
			s.bucket, key, len(b), got, farm.ErrInvalid)
	}
	return b, nil
}

// Has reports whether space holds the blob d (a HEAD request; it does not
// read or verify the bytes, Get does).
func (s *Store) Has(ctx context.Context, space farm.Space, d farm.Digest) (bool, error) {
	if err := farm.CheckContentHas(ctx, space, d); err != nil {
		return false, err
	}
	key := s.key(space, d)
	_, err := s.client.HeadObject(ctx, &s3.HeadObjectInput{
		Bucket: aws.String(s.bucket),
		Key:    aws.String(key),
	})
	if err == nil {
		return true, nil
	}
	err = translate("has", s.bucket, key, err)
	if errors.Is(err, farm.ErrNotFound) {
		return false, nil
	}
	return false, err
}

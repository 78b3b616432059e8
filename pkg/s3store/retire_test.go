package s3store

import (
	"bytes"
	"io"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/compilefarm/compilefarm/pkg/farm"
	"github.com/compilefarm/compilefarm/pkg/farm/farmtest"
)

func TestContentRetirerContract(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the S3 emulator; skipped with -short")
	}
	farmtest.TestContentRetirer(t, func(t *testing.T) farm.ContentRetirer {
		return newStore(t, Options{})
	})
}

// The contract again with a key prefix that needs encoding in a copy
// source.
func TestContentRetirerContractWithPrefix(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the S3 emulator; skipped with -short")
	}
	farmtest.TestContentRetirer(t, func(t *testing.T) farm.ContentRetirer {
		return newStore(t, Options{Prefix: "deploy a+b/"})
	})
}

// objectProbe reads an object's Last-Modified and tags.
type objectProbe struct {
	t      *testing.T
	c      *s3.Client
	bucket string
	key    string
}

func (p objectProbe) head() *s3.HeadObjectOutput {
	p.t.Helper()
	h, err := p.c.HeadObject(ctx(p.t), &s3.HeadObjectInput{Bucket: aws.String(p.bucket), Key: aws.String(p.key)})
	if err != nil {
		p.t.Fatalf("head %s: %v", p.key, err)
	}
	return h
}

func (p objectProbe) tags() map[string]string {
	p.t.Helper()
	out, err := p.c.GetObjectTagging(ctx(p.t), &s3.GetObjectTaggingInput{Bucket: aws.String(p.bucket), Key: aws.String(p.key)})
	if err != nil {
		p.t.Fatalf("get tags of %s: %v", p.key, err)
	}
	m := map[string]string{}
	for _, tg := range out.TagSet {
		m[aws.ToString(tg.Key)] = aws.ToString(tg.Value)
	}
	return m
}

// TestRetireTags: Retire leaves the one tag the stack's lifecycle rule
// selects, and the same bytes and content type; Keep sets it to false.
func TestRetireTags(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the S3 emulator; skipped with -short")
	}
	s := newStore(t, Options{})
	data := []byte(`{"name":"web01.example.com"}`)
	d, err := s.Put(ctx(t), farm.SpaceCatalogs, data)
	if err != nil {
		t.Fatal(err)
	}
	p := objectProbe{t, newClient(), s.bucket, s.key(farm.SpaceCatalogs, d)}
	if err := s.Retire(ctx(t), farm.SpaceCatalogs, d); err != nil {
		t.Fatal(err)
	}
	if got := p.tags(); len(got) != 1 || got[RetiredTagKey] != RetiredTagValue || RetiredTagKey+"="+RetiredTagValue != "compilefarm-superseded=true" {
		t.Errorf("tags after Retire = %v, want only compilefarm-superseded=true", got)
	}
	if got := aws.ToString(p.head().ContentType); got != "application/octet-stream" {
		t.Errorf("content type after Retire = %q", got)
	}
	out, err := p.c.GetObject(ctx(t), &s3.GetObjectInput{Bucket: aws.String(s.bucket), Key: aws.String(p.key)})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(out.Body)
	out.Body.Close()
	if !bytes.Equal(b, data) {
		t.Errorf("bytes after Retire = %q, want %q", b, data)
	}
	if err := s.Keep(ctx(t), farm.SpaceCatalogs, d); err != nil {
		t.Fatal(err)
	}
	if got := p.tags(); len(got) != 1 || got[RetiredTagKey] != "false" {
		t.Errorf("tags after Keep = %v, want only compilefarm-superseded=false", got)
	}
}

// TestRetireRestartsAge: Retire moves the object's Last-Modified, which
// lifecycle days count from, to its own time; Keep leaves it. Against
// moto: versitygw keeps a file's time when it is copied onto itself.
func TestRetireRestartsAge(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the S3 emulator moto; skipped with -short")
	}
	c := newClient(func(o *s3.Options) { o.BaseEndpoint = aws.String(moto.URL) })
	bucket := "farm-age"
	if _, err := c.CreateBucket(ctx(t), &s3.CreateBucketInput{Bucket: aws.String(bucket)}); err != nil {
		t.Fatal(err)
	}
	s := New(c, bucket, Options{})
	d, err := s.Put(ctx(t), farm.SpaceCatalogs, []byte(`{"name":"web01.example.com"}`))
	if err != nil {
		t.Fatal(err)
	}
	p := objectProbe{t, c, bucket, s.key(farm.SpaceCatalogs, d)}
	stored := aws.ToTime(p.head().LastModified)
	time.Sleep(1100 * time.Millisecond) // Last-Modified has whole seconds
	if err := s.Retire(ctx(t), farm.SpaceCatalogs, d); err != nil {
		t.Fatal(err)
	}
	retired := aws.ToTime(p.head().LastModified)
	if !retired.After(stored) {
		t.Errorf("Last-Modified after Retire = %v, not after the Put's %v: lifecycle days would count from the Put", retired, stored)
	}
	if got := p.tags(); got[RetiredTagKey] != RetiredTagValue {
		t.Errorf("tags after Retire = %v", got)
	}
	time.Sleep(1100 * time.Millisecond)
	if err := s.Keep(ctx(t), farm.SpaceCatalogs, d); err != nil {
		t.Fatal(err)
	}
	if got := aws.ToTime(p.head().LastModified); !got.Equal(retired) {
		t.Errorf("Last-Modified after Keep = %v, want the Retire's %v", got, retired)
	}
}

package s3store

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/compilefarm/compilefarm/internal/emulator"
	"github.com/compilefarm/compilefarm/pkg/farm"
	"github.com/compilefarm/compilefarm/pkg/farm/farmtest"
)

// The S3 emulator all tests of this package share: versitygw over a posix
// directory (emu.Dir: one directory per bucket), started by TestMain on a
// free loopback port. moto (started as the Secrets Manager emulator; its
// server answers S3 too) serves the one test whose S3 behaviour versitygw
// does not have: a copy of an object onto itself restarts its
// Last-Modified (TestRetireRestartsAge).
var (
	emu     *emulator.Process
	moto    *emulator.Process
	buckets atomic.Int64
)

func TestMain(m *testing.M) { emulator.Main(m, emulator.S3(&emu), emulator.SecretsManager(&moto)) }

// newClient returns an S3 client for the emulator; optFns adjust it.
func newClient(optFns ...func(*s3.Options)) *s3.Client {
	if emu == nil { // -short: TestMain started no emulator
		panic("this test needs the S3 emulator: begin it with if testing.Short() { t.Skip(\"needs the S3 emulator; skipped with -short\") }")
	}
	opts := s3.Options{
		Region:       "us-east-1",
		Credentials:  credentials.NewStaticCredentialsProvider("test", "test", ""),
		BaseEndpoint: aws.String(emu.URL),
		UsePathStyle: true,
	}
	return s3.New(opts, optFns...)
}

// newBucket creates a fresh bucket and returns its name.
func newBucket(t *testing.T) string {
	t.Helper()
	if testing.Short() { // also for a test that forgot its own guard
		t.Skip("needs the S3 emulator; skipped with -short")
	}
	name := fmt.Sprintf("farm-test-%04d", buckets.Add(1))
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if _, err := newClient().CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(name)}); err != nil {
		t.Fatalf("create bucket %s: %v", name, err)
	}
	return name
}

func newStore(t *testing.T, opts Options) *Store {
	t.Helper()
	if testing.Short() { // also for a test that forgot its own guard
		t.Skip("needs the S3 emulator; skipped with -short")
	}
	return New(newClient(), newBucket(t), opts)
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	t.Cleanup(cancel)
	return c
}

func TestContentStoreContract(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the S3 emulator; skipped with -short")
	}
	farmtest.TestContentStore(t, func(t *testing.T) farm.ContentStore {
		return newStore(t, Options{})
	})
}

// The contract again with a key prefix, as when deployments share a bucket.
func TestContentStoreContractWithPrefix(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the S3 emulator; skipped with -short")
	}
	farmtest.TestContentStore(t, func(t *testing.T) farm.ContentStore {
		return newStore(t, Options{Prefix: "deploy-a/"})
	})
}

// listKeys returns every key in bucket.
func listKeys(t *testing.T, bucket string) []string {
	t.Helper()
	var keys []string
	p := s3.NewListObjectsV2Paginator(newClient(), &s3.ListObjectsV2Input{Bucket: aws.String(bucket)})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx(t))
		if err != nil {
			t.Fatalf("list %s: %v", bucket, err)
		}
		for _, o := range page.Contents {
			keys = append(keys, aws.ToString(o.Key))
		}
	}
	return keys
}

func TestKeyLayout(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the S3 emulator; skipped with -short")
	}
	for _, prefix := range []string{"", "farm/prod/"} {
		t.Run("prefix="+prefix, func(t *testing.T) {
			s := newStore(t, Options{Prefix: prefix})
			data := []byte("key layout")
			d, err := s.Put(ctx(t), farm.SpaceCatalogs, data)
			if err != nil {
				t.Fatal(err)
			}
			want := prefix + "catalogs/" + string(d[:2]) + "/" + string(d)
			if got := s.key(farm.SpaceCatalogs, d); got != want {
				t.Fatalf("Key = %q, want %q", got, want)
			}
			if keys := listKeys(t, s.Bucket()); len(keys) != 1 || keys[0] != want {
				t.Fatalf("bucket holds %q, want exactly [%q]", keys, want)
			}
			// versitygw's posix backend maps keys to paths: the same layout
			// as pkg/localstore's directories.
			b, err := os.ReadFile(filepath.Join(emu.Dir, s.Bucket(), filepath.FromSlash(want)))
			if err != nil || !bytes.Equal(b, data) {
				t.Fatalf("file for key %s: %q, %v", want, b, err)
			}
		})
	}
}

// captureHeaders records the headers of every PUT request the client sends,
// as they go on the wire (after the SDK's checksum and signing steps), and
// the HTTP status of each answer.
type captureHeaders struct {
	mu       sync.Mutex
	got      []http.Header
	statuses []int
}

func (c *captureHeaders) add(stack *middleware.Stack) error {
	return stack.Finalize.Add(middleware.FinalizeMiddlewareFunc("captureHeaders",
		func(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (middleware.FinalizeOutput, middleware.Metadata, error) {
			if req, ok := in.Request.(*smithyhttp.Request); ok && req.Method == http.MethodPut {
				c.mu.Lock()
				c.got = append(c.got, req.Header.Clone())
				c.mu.Unlock()
				out, md, err := next.HandleFinalize(ctx, in)
				if resp, ok := awsmiddleware.GetRawResponse(md).(*smithyhttp.Response); ok {
					c.mu.Lock()
					c.statuses = append(c.statuses, resp.StatusCode)
					c.mu.Unlock()
				} else if re := (*smithyhttp.ResponseError)(nil); errors.As(err, &re) {
					c.mu.Lock()
					c.statuses = append(c.statuses, re.HTTPStatusCode())
					c.mu.Unlock()
				}
				return out, md, err
			}
			return next.HandleFinalize(ctx, in)
		}), middleware.After)
}

func TestPutSendsChecksumAndIfNoneMatch(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the S3 emulator; skipped with -short")
	}
	var c captureHeaders
	s := New(newClient(func(o *s3.Options) { o.APIOptions = append(o.APIOptions, c.add) }), newBucket(t), Options{})
	data := []byte("checksummed bytes")
	if _, err := s.Put(ctx(t), farm.SpaceContent, data); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.got) != 1 {
		t.Fatalf("%d PUT requests, want 1", len(c.got))
	}
	h := c.got[0]
	if got, want := h.Get("X-Amz-Checksum-Sha256"), base64.StdEncoding.EncodeToString(sum[:]); got != want {
		t.Errorf("x-amz-checksum-sha256 = %q, want %q", got, want)
	}
	if got := h.Get("If-None-Match"); got != "*" {
		t.Errorf("If-None-Match = %q, want *", got)
	}
}

// wrongChecksum replaces the SHA-256 checksum of every PutObject with the
// checksum of other bytes, before the SDK's checksum middleware sees it.
func wrongChecksum(stack *middleware.Stack) error {
	return stack.Initialize.Add(middleware.InitializeMiddlewareFunc("wrongChecksum",
		func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
			if p, ok := in.Parameters.(*s3.PutObjectInput); ok {
				other := sha256.Sum256([]byte("other bytes"))
				cp := *p
				cp.ChecksumSHA256 = aws.String(base64.StdEncoding.EncodeToString(other[:]))
				in.Parameters = &cp
			}
			return next.HandleInitialize(ctx, in)
		}), middleware.Before)
}

// The store sends the checksum, and S3 (here versitygw) rejects bytes that
// do not match it: nothing is stored and the error is transient (the bytes
// were damaged on the way; sending them again may work).
func TestWrongChecksumIsRejected(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the S3 emulator; skipped with -short")
	}
	bucket := newBucket(t)
	bad := New(newClient(func(o *s3.Options) {
		o.APIOptions = append(o.APIOptions, wrongChecksum)
		o.RetryMaxAttempts = 1
	}), bucket, Options{})
	data := []byte("these bytes do not match the checksum sent")
	_, err := bad.Put(ctx(t), farm.SpaceContent, data)
	if !errors.Is(err, farm.ErrTransient) {
		t.Fatalf("put with a wrong checksum: err = %v, want farm.ErrTransient", err)
	}
	t.Logf("rejected as expected: %v", err)
	good := New(newClient(), bucket, Options{})
	ok, err := good.Has(ctx(t), farm.SpaceContent, farm.DigestOf(data))
	if err != nil || ok {
		t.Fatalf("after a rejected put: has = %v, %v; want false", ok, err)
	}
	if keys := listKeys(t, bucket); len(keys) != 0 {
		t.Fatalf("rejected put left objects: %q", keys)
	}
}

// The emulator honours If-None-Match: * (so the store's idempotence is not an
// accident of the emulator overwriting): a second conditional write of a key
// gets 412 and leaves the first object.
func TestEmulatorHonoursIfNoneMatch(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the S3 emulator; skipped with -short")
	}
	bucket := newBucket(t)
	c := newClient()
	put := func(body string) error {
		_, err := c.PutObject(ctx(t), &s3.PutObjectInput{
			Bucket: aws.String(bucket), Key: aws.String("k"),
			Body: strings.NewReader(body), IfNoneMatch: aws.String("*"),
		})
		return err
	}
	if err := put("first"); err != nil {
		t.Fatal(err)
	}
	err := put("second")
	if code := errorCode(err); code != "PreconditionFailed" {
		t.Fatalf("second conditional put: code %q (err %v), want PreconditionFailed", code, err)
	}
	out, err := c.GetObject(ctx(t), &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String("k")})
	if err != nil {
		t.Fatal(err)
	}
	defer out.Body.Close()
	var b bytes.Buffer
	b.ReadFrom(out.Body)
	if b.String() != "first" {
		t.Fatalf("object = %q after a refused overwrite, want %q", b.String(), "first")
	}
}

// Concurrent Puts of the same bytes all succeed and leave exactly one object.
func TestConcurrentPutsLeaveOneObject(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the S3 emulator; skipped with -short")
	}
	var c captureHeaders
	s := New(newClient(func(o *s3.Options) { o.APIOptions = append(o.APIOptions, c.add) }), newBucket(t), Options{})
	data := bytes.Repeat([]byte("concurrent "), 10000)
	const n = 24
	var wg sync.WaitGroup
	errs := make(chan error, n)
	start := make(chan struct{})
	for range n {
		wg.Go(func() {
			<-start
			d, err := s.Put(ctx(t), farm.SpaceCatalogs, data)
			if err == nil && d != farm.DigestOf(data) {
				err = fmt.Errorf("digest %s", d)
			}
			errs <- err
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	d := farm.DigestOf(data)
	if keys := listKeys(t, s.Bucket()); len(keys) != 1 || keys[0] != s.key(farm.SpaceCatalogs, d) {
		t.Fatalf("bucket holds %q, want exactly one object", keys)
	}
	got, err := s.Get(ctx(t), farm.SpaceCatalogs, d)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("get: %d bytes, %v", len(got), err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.got) < n {
		t.Fatalf("%d PUT requests for %d Puts: the puts did not all reach the emulator", len(c.got), n)
	}
	// If-None-Match at work: one write won, every other was refused with
	// 412 (and counted as success by the store).
	count := map[int]int{}
	for _, st := range c.statuses {
		count[st]++
	}
	if count[http.StatusOK] != 1 || count[http.StatusPreconditionFailed] != len(c.statuses)-1 {
		t.Fatalf("answers to %d concurrent PUTs: %v; want one 200 and the rest 412", len(c.statuses), count)
	}
	t.Logf("answers to %d concurrent PUTs: %v", len(c.statuses), count)
}

func TestCorruptObjectIsDetected(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the S3 emulator; skipped with -short")
	}
	corruptions := []struct {
		name    string
		corrupt func(t *testing.T, s *Store, key string)
	}{
		{"overwritten through S3", func(t *testing.T, s *Store, key string) {
			_, err := newClient().PutObject(ctx(t), &s3.PutObjectInput{
				Bucket: aws.String(s.Bucket()), Key: aws.String(key),
				Body: strings.NewReader("not the bytes the key names"),
			})
			if err != nil {
				t.Fatal(err)
			}
		}},
		{"file changed behind the store's back", func(t *testing.T, s *Store, key string) {
			p := filepath.Join(emu.Dir, s.Bucket(), filepath.FromSlash(key))
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			b[len(b)/2] ^= 0xff // one flipped byte, same length
			if err := os.WriteFile(p, b, 0o644); err != nil {
				t.Fatal(err)
			}
		}},
		{"truncated file", func(t *testing.T, s *Store, key string) {
			p := filepath.Join(emu.Dir, s.Bucket(), filepath.FromSlash(key))
			if err := os.Truncate(p, 3); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, c := range corruptions {
		t.Run(c.name, func(t *testing.T) {
			s := newStore(t, Options{})
			data := []byte("the true contents of this blob, long enough to corrupt")
			d, err := s.Put(ctx(t), farm.SpaceContent, data)
			if err != nil {
				t.Fatal(err)
			}
			key := s.key(farm.SpaceContent, d)
			c.corrupt(t, s, key)
			got, err := s.Get(ctx(t), farm.SpaceContent, d)
			if !errors.Is(err, farm.ErrInvalid) {
				t.Fatalf("get of a corrupt object: %q, err %v; want farm.ErrInvalid", got, err)
			}
			if !strings.Contains(err.Error(), key) {
				t.Fatalf("error %q does not name the key %s", err, key)
			}
			if got != nil {
				t.Fatalf("get of a corrupt object returned bytes %q", got)
			}
		})
	}
}

// A store whose endpoint does not answer reports transient errors.
func TestUnreachableIsTransient(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the S3 emulator; skipped with -short")
	}
	port, err := emulator.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	s := New(newClient(func(o *s3.Options) {
		o.BaseEndpoint = aws.String("http://127.0.0.1:" + strconv.Itoa(port))
		o.RetryMaxAttempts = 1
	}), "farm", Options{})
	d := farm.DigestOf([]byte("x"))
	_, err = s.Put(ctx(t), farm.SpaceContent, []byte("x"))
	wantTransient(t, "put", err)
	_, err = s.Get(ctx(t), farm.SpaceContent, d)
	wantTransient(t, "get", err)
	_, err = s.Has(ctx(t), farm.SpaceContent, d)
	wantTransient(t, "has", err)
}

func wantTransient(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, farm.ErrTransient) {
		t.Fatalf("%s against a closed port: err = %v, want farm.ErrTransient", what, err)
	}
}

func TestMissingBucketIsNotNotFound(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the S3 emulator; skipped with -short")
	}
	s := New(newClient(), "no-such-bucket-here", Options{})
	_, err := s.Get(ctx(t), farm.SpaceContent, farm.DigestOf([]byte("x")))
	if err == nil || errors.Is(err, farm.ErrNotFound) || errors.Is(err, farm.ErrTransient) {
		t.Fatalf("get from a missing bucket: err = %v; want a permanent error that is not ErrNotFound", err)
	}
	_, err = s.Put(ctx(t), farm.SpaceContent, []byte("x"))
	if err == nil || errors.Is(err, farm.ErrTransient) {
		t.Fatalf("put into a missing bucket: err = %v; want a permanent error", err)
	}
}

func TestCanceledContext(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the S3 emulator; skipped with -short")
	}
	s := newStore(t, Options{})
	c, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := s.Put(c, farm.SpaceContent, []byte("x"))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("put with a canceled context: %v", err)
	}
	_, err = s.Get(c, farm.SpaceContent, farm.DigestOf([]byte("x")))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("get with a canceled context: %v", err)
	}
}

func TestPutInvalidSpace(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the S3 emulator; skipped with -short")
	}
	s := newStore(t, Options{})
	for _, sp := range []farm.Space{"", "Catalogs", "../x", "a/b"} {
		if _, err := s.Put(ctx(t), sp, []byte("x")); !errors.Is(err, farm.ErrInvalid) {
			t.Errorf("put in space %q: err = %v, want farm.ErrInvalid", sp, err)
		}
	}
}

// NewFromConfig takes the standard AWS configuration, as a main loads it
// from the environment, and addresses an endpoint override path-style.
func TestNewFromConfig(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the S3 emulator; skipped with -short")
	}
	dir := t.TempDir()
	// "localhost" rather than 127.0.0.1: the SDK would pick virtual-host
	// addressing (bucket.localhost) for a name, so this checks path style.
	endpoint := "http://localhost:" + emu.Addr[strings.LastIndex(emu.Addr, ":")+1:]
	for k, v := range map[string]string{
		"AWS_ENDPOINT_URL_S3":         endpoint,
		"AWS_ACCESS_KEY_ID":           "test",
		"AWS_SECRET_ACCESS_KEY":       "test",
		"AWS_SESSION_TOKEN":           "",
		"AWS_REGION":                  "us-east-1",
		"AWS_PROFILE":                 "",
		"AWS_CONFIG_FILE":             filepath.Join(dir, "config"),
		"AWS_SHARED_CREDENTIALS_FILE": filepath.Join(dir, "credentials"),
		"AWS_EC2_METADATA_DISABLED":   "true",
	} {
		t.Setenv(k, v)
	}
	cfg, err := config.LoadDefaultConfig(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	s := NewFromConfig(cfg, newBucket(t), Options{})
	if o := s.client.Options(); !o.UsePathStyle || aws.ToString(o.BaseEndpoint) != endpoint {
		t.Fatalf("client options: UsePathStyle=%v BaseEndpoint=%q; want path style at %s", o.UsePathStyle, aws.ToString(o.BaseEndpoint), endpoint)
	}
	data := []byte("configured from the environment")
	d, err := s.Put(ctx(t), farm.SpaceFacts, data)
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.Get(ctx(t), farm.SpaceFacts, d)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("get: %q, %v", got, err)
	}

	// Without an override (real AWS) addressing stays virtual-host style.
	t.Setenv("AWS_ENDPOINT_URL_S3", "")
	os.Unsetenv("AWS_ENDPOINT_URL_S3")
	cfg, err = config.LoadDefaultConfig(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if o := NewFromConfig(cfg, "b", Options{}).client.Options(); o.UsePathStyle {
		t.Fatal("path style without an endpoint override")
	}
}

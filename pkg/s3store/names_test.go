package s3store

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/compilefarm/compilefarm/pkg/farm"
	"github.com/compilefarm/compilefarm/pkg/farm/farmtest"
)

func TestNameStoreContract(t *testing.T) {
	farmtest.TestNameStore(t, func(t *testing.T) farm.NameStore {
		return newStore(t, Options{})
	})
}

func TestNameStoreContractWithPrefix(t *testing.T) {
	farmtest.TestNameStore(t, func(t *testing.T) farm.NameStore {
		return newStore(t, Options{Prefix: "deploy-a/"})
	})
}

// TestNameLayout: a name is an object in its space's prefix, holding the
// digest, next to (and never among) the space's content keys; it is
// created with If-None-Match: *.
func TestNameLayout(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the S3 emulator; skipped with -short")
	}
	for _, prefix := range []string{"", "farm/prod/"} {
		t.Run("prefix="+prefix, func(t *testing.T) {
			var c captureHeaders
			s := New(newClient(func(o *s3.Options) { o.APIOptions = append(o.APIOptions, c.add) }), newBucket(t), Options{Prefix: prefix})
			d, err := s.Put(ctx(t), farm.SpaceFilebucket, []byte("old content"))
			if err != nil {
				t.Fatal(err)
			}
			if err := s.PutName(ctx(t), farm.SpaceFilebucket, "md5/0123abcd", d); err != nil {
				t.Fatal(err)
			}
			want := prefix + "filebucket/names/md5/0123abcd!"
			keys := listKeys(t, s.Bucket())
			if len(keys) != 2 || !strings.Contains(strings.Join(keys, " "), want) {
				t.Fatalf("bucket holds %q, want the blob and %q", keys, want)
			}
			b, err := os.ReadFile(filepath.Join(emu.Dir, s.Bucket(), filepath.FromSlash(want)))
			if err != nil || string(b) != string(d) {
				t.Fatalf("object %s holds %q, %v; want the digest %s", want, b, err, d)
			}
			c.mu.Lock()
			defer c.mu.Unlock()
			last := c.got[len(c.got)-1]
			if last.Get("If-None-Match") != "*" || last.Get("X-Amz-Checksum-Sha256") == "" {
				t.Errorf("PutName sent If-None-Match %q, x-amz-checksum-sha256 %q; want * and a checksum",
					last.Get("If-None-Match"), last.Get("X-Amz-Checksum-Sha256"))
			}
		})
	}
}

// TestCorruptNameIsInvalid: an object that does not hold a digest (written
// by something else) is reported, not returned.
func TestCorruptNameIsInvalid(t *testing.T) {
	s := newStore(t, Options{})
	if _, err := newClient().PutObject(ctx(t), &s3.PutObjectInput{
		Bucket: aws.String(s.Bucket()), Key: aws.String(s.nameKey(farm.SpaceFilebucket, "md5/bad")),
		Body: strings.NewReader("not a digest"),
	}); err != nil {
		t.Fatal(err)
	}
	_, err := s.GetName(ctx(t), farm.SpaceFilebucket, "md5/bad")
	if !errors.Is(err, farm.ErrInvalid) || !strings.Contains(err.Error(), "filebucket/names/md5/bad") {
		t.Fatalf("get a corrupt name: %v, want ErrInvalid naming the key", err)
	}
	// PutName of it cannot compare, and says so without overwriting.
	err = s.PutName(ctx(t), farm.SpaceFilebucket, "md5/bad", farm.DigestOf([]byte("x")))
	if !errors.Is(err, farm.ErrInvalid) {
		t.Fatalf("put over a corrupt name: %v, want ErrInvalid", err)
	}
}

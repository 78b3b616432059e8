package farmtest

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/compilefarm/compilefarm/pkg/farm"
)

var allSpaces = []farm.Space{farm.SpaceCatalogs, farm.SpaceContent, farm.SpaceFacts, farm.SpaceReports, farm.SpaceCode}

// TestContentStore checks that a farm.ContentStore keeps its contract.
// newStore returns a fresh, empty store for each subtest.
func TestContentStore(t *testing.T, newStore func(t *testing.T) farm.ContentStore) {
	t.Helper()
	tests := []struct {
		name string
		run  func(t *testing.T, s farm.ContentStore)
	}{
		{"PutReturnsDigestAndGetReturnsBytes", contentPutGet},
		{"PutIsIdempotent", contentPutIdempotent},
		{"EmptyAndLargeBlobs", contentSizes},
		{"UnknownDigestIsNotFound", contentUnknown},
		{"MalformedDigestIsInvalid", contentMalformed},
		{"MalformedSpaceIsInvalid", contentBadSpace},
		{"EndedContextChangesNothing", contentEndedContext},
		{"SpacesAreSeparate", contentSpaces},
		{"BlobsAreImmutable", contentImmutable},
		{"ConcurrentPutsOfSameBytes", contentConcurrentSame},
		{"ConcurrentPutsAndGets", contentConcurrentMixed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.run(t, newStore(t)) })
	}
}

func randomBytes(t *testing.T, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

func contentPutGet(t *testing.T, s farm.ContentStore) {
	ctx := ctxFor(t, waitLong)
	data := []byte(`{"name":"web01.example.com","version":1}`)
	d, err := s.Put(ctx, farm.SpaceCatalogs, data)
	must(t, "put", err)
	if want := farm.DigestOf(data); d != want {
		t.Fatalf("put returned digest %q, want sha256 %q", d, want)
	}
	got, err := s.Get(ctx, farm.SpaceCatalogs, d)
	must(t, "get", err)
	if !bytes.Equal(got, data) {
		t.Fatalf("get returned %q, want %q", got, data)
	}
	ok, err := s.Has(ctx, farm.SpaceCatalogs, d)
	must(t, "has", err)
	if !ok {
		t.Fatal("has = false after put")
	}
}

func contentPutIdempotent(t *testing.T, s farm.ContentStore) {
	ctx := ctxFor(t, waitLong)
	data := randomBytes(t, 4096)
	d1, err := s.Put(ctx, farm.SpaceContent, data)
	must(t, "first put", err)
	for i := range 3 {
		d, err := s.Put(ctx, farm.SpaceContent, bytes.Clone(data))
		must(t, fmt.Sprintf("put again (%d)", i+2), err)
		if d != d1 {
			t.Fatalf("put again returned %q, first put %q", d, d1)
		}
	}
	got, err := s.Get(ctx, farm.SpaceContent, d1)
	must(t, "get", err)
	if !bytes.Equal(got, data) {
		t.Fatal("get after repeated puts returned other bytes")
	}
}

func contentSizes(t *testing.T, s farm.ContentStore) {
	ctx := ctxFor(t, waitLong)
	for _, n := range []int{0, 1, 300 << 10, 5 << 20} {
		t.Run(fmt.Sprintf("%dB", n), func(t *testing.T) {
			data := randomBytes(t, n)
			d, err := s.Put(ctx, farm.SpaceContent, data)
			must(t, "put", err)
			if d != farm.DigestOf(data) {
				t.Fatalf("digest %q, want %q", d, farm.DigestOf(data))
			}
			got, err := s.Get(ctx, farm.SpaceContent, d)
			must(t, "get", err)
			if !bytes.Equal(got, data) {
				t.Fatalf("get returned %d bytes, want the %d put", len(got), n)
			}
		})
	}
}

func contentUnknown(t *testing.T, s farm.ContentStore) {
	ctx := ctxFor(t, waitLong)
	_, err := s.Put(ctx, farm.SpaceContent, []byte("something else"))
	must(t, "put", err)
	unknown := farm.DigestOf([]byte("never stored"))
	for _, sp := range allSpaces {
		_, err := s.Get(ctx, sp, unknown)
		wantErrIs(t, fmt.Sprintf("get unknown digest in %s", sp), err, farm.ErrNotFound)
		ok, err := s.Has(ctx, sp, unknown)
		must(t, fmt.Sprintf("has unknown digest in %s", sp), err)
		if ok {
			t.Fatalf("has unknown digest in %s = true", sp)
		}
	}
}

func contentMalformed(t *testing.T, s farm.ContentStore) {
	ctx := ctxFor(t, waitLong)
	good := string(farm.DigestOf([]byte("x")))
	bad := []struct{ name, d string }{
		{"empty", ""},
		{"short", good[:63]},
		{"long", good + "0"},
		{"uppercase", strings.ToUpper(good)},
		{"not hex", "g" + good[1:]},
		{"path traversal", "../../../../etc/passwd"},
		{"slash", good[:2] + "/" + good[3:]},
		{"sha256 prefix", "sha256:" + good},
	}
	for _, b := range bad {
		t.Run(b.name, func(t *testing.T) {
			_, err := s.Get(ctx, farm.SpaceContent, farm.Digest(b.d))
			wantErrIs(t, "get", err, farm.ErrInvalid)
			_, err = s.Has(ctx, farm.SpaceContent, farm.Digest(b.d))
			wantErrIs(t, "has", err, farm.ErrInvalid)
		})
	}
}

// contentBadSpace: a space that is not a plain lowercase name is
// ErrInvalid in every method, and Put stores nothing.
func contentBadSpace(t *testing.T, s farm.ContentStore) {
	ctx := ctxFor(t, waitLong)
	data := []byte("in a bad space")
	d := farm.DigestOf(data)
	for _, sp := range []farm.Space{"", "Content", "../content", "a/b", "content!"} {
		_, err := s.Put(ctx, sp, data)
		wantErrIs(t, fmt.Sprintf("put in space %q", sp), err, farm.ErrInvalid)
		_, err = s.Get(ctx, sp, d)
		wantErrIs(t, fmt.Sprintf("get from space %q", sp), err, farm.ErrInvalid)
		_, err = s.Has(ctx, sp, d)
		wantErrIs(t, fmt.Sprintf("has in space %q", sp), err, farm.ErrInvalid)
	}
	for _, sp := range allSpaces {
		if ok, err := s.Has(ctx, sp, d); err != nil || ok {
			t.Fatalf("has in %s after puts in bad spaces = %v, %v; want false", sp, ok, err)
		}
	}
}

// contentEndedContext: a call whose context has ended returns its error,
// and Put stores nothing.
func contentEndedContext(t *testing.T, s farm.ContentStore) {
	ctx := ctxFor(t, waitLong)
	ended, cancel := context.WithCancel(ctx)
	cancel()
	data := []byte("put with an ended context")
	d := farm.DigestOf(data)
	_, err := s.Put(ended, farm.SpaceContent, data)
	wantErrIs(t, "put with an ended context", err, context.Canceled)
	_, err = s.Get(ended, farm.SpaceContent, d)
	wantErrIs(t, "get with an ended context", err, context.Canceled)
	_, err = s.Has(ended, farm.SpaceContent, d)
	wantErrIs(t, "has with an ended context", err, context.Canceled)
	if ok, err := s.Has(ctx, farm.SpaceContent, d); err != nil || ok {
		t.Fatalf("has after a put with an ended context = %v, %v; want false", ok, err)
	}
}

// contentSpaces: a blob is visible only in the space it was put in, and the
// same bytes may live in two spaces independently.
func contentSpaces(t *testing.T, s farm.ContentStore) {
	ctx := ctxFor(t, waitLong)
	for i, put := range allSpaces {
		data := []byte(fmt.Sprintf("only in %s (%d)", put, i))
		d, err := s.Put(ctx, put, data)
		must(t, "put", err)
		for _, other := range allSpaces {
			ok, err := s.Has(ctx, other, d)
			must(t, "has", err)
			_, gerr := s.Get(ctx, other, d)
			if other == put {
				if !ok || gerr != nil {
					t.Fatalf("blob put in %s: has=%v get err=%v in its own space", put, ok, gerr)
				}
				continue
			}
			if ok {
				t.Fatalf("blob put in %s is visible (has) in %s", put, other)
			}
			wantErrIs(t, fmt.Sprintf("get blob of %s from %s", put, other), gerr, farm.ErrNotFound)
		}
	}
	// The same bytes may live in two spaces independently.
	data := []byte("shared bytes")
	d1, err := s.Put(ctx, farm.SpaceFacts, data)
	must(t, "put facts", err)
	d2, err := s.Put(ctx, farm.SpaceReports, data)
	must(t, "put reports", err)
	if d1 != d2 {
		t.Fatalf("same bytes, different digests in two spaces: %s, %s", d1, d2)
	}
}

// contentImmutable: the store keeps its own copy; changing the slice handed
// to Put or returned by Get changes nothing stored.
func contentImmutable(t *testing.T, s farm.ContentStore) {
	ctx := ctxFor(t, waitLong)
	data := []byte("immutable blob contents")
	want := bytes.Clone(data)
	d, err := s.Put(ctx, farm.SpaceContent, data)
	must(t, "put", err)
	for i := range data {
		data[i] = 'X'
	}
	got, err := s.Get(ctx, farm.SpaceContent, d)
	must(t, "get after changing the put slice", err)
	if !bytes.Equal(got, want) {
		t.Fatalf("stored blob changed with the caller's slice: %q", got)
	}
	for i := range got {
		got[i] = 'Y'
	}
	again, err := s.Get(ctx, farm.SpaceContent, d)
	must(t, "get after changing the returned slice", err)
	if !bytes.Equal(again, want) {
		t.Fatalf("stored blob changed with a returned slice: %q", again)
	}
}

func contentConcurrentSame(t *testing.T, s farm.ContentStore) {
	ctx := ctxFor(t, waitLong)
	data := randomBytes(t, 256<<10)
	want := farm.DigestOf(data)
	const n = 32
	var wg sync.WaitGroup
	errs := make(chan error, n)
	start := make(chan struct{})
	for range n {
		wg.Go(func() {
			<-start
			d, err := s.Put(ctx, farm.SpaceCatalogs, data)
			if err != nil {
				errs <- err
				return
			}
			if d != want {
				errs <- fmt.Errorf("digest %s, want %s", d, want)
				return
			}
			got, err := s.Get(ctx, farm.SpaceCatalogs, d)
			if err != nil {
				errs <- fmt.Errorf("get right after put: %w", err)
				return
			}
			if !bytes.Equal(got, data) {
				errs <- fmt.Errorf("get right after put returned %d other bytes", len(got))
			}
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// contentConcurrentMixed: a Put that returned is visible to every later Get,
// also from other goroutines.
func contentConcurrentMixed(t *testing.T, s farm.ContentStore) {
	ctx := ctxFor(t, waitLong)
	const n = 16
	blobs := make([][]byte, n)
	for i := range blobs {
		blobs[i] = randomBytes(t, 1024+i)
	}
	stored := make([]chan farm.Digest, n)
	for i := range stored {
		stored[i] = make(chan farm.Digest, 1)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 2*n)
	for i := range n {
		wg.Go(func() {
			d, err := s.Put(ctx, farm.SpaceContent, blobs[i])
			if err != nil {
				errs <- err
				return
			}
			stored[i] <- d
		})
		wg.Go(func() {
			j := (i + 1) % n
			var d farm.Digest
			select {
			case d = <-stored[j]:
				stored[j] <- d
			case <-ctx.Done():
				errs <- ctx.Err()
				return
			}
			got, err := s.Get(ctx, farm.SpaceContent, d)
			if err != nil {
				errs <- fmt.Errorf("get of a returned put from another goroutine: %w", err)
				return
			}
			if !bytes.Equal(got, blobs[j]) {
				errs <- fmt.Errorf("blob %d: got other bytes", j)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

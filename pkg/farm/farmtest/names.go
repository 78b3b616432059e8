package farmtest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/compilefarm/compilefarm/pkg/farm"
)

// TestNameStore checks that a farm.NameStore keeps its contract. newStore
// returns a fresh, empty store for each subtest.
func TestNameStore(t *testing.T, newStore func(t *testing.T) farm.NameStore) {
	t.Helper()
	tests := []struct {
		name string
		run  func(t *testing.T, s farm.NameStore)
	}{
		{"PutThenGet", namePutGet},
		{"UnknownNameIsNotFound", nameUnknown},
		{"PutOfSameDigestIsIdempotent", namePutIdempotent},
		{"PutOfOtherDigestIsConflictAndKeepsFirst", namePutConflict},
		{"MalformedIsInvalid", nameMalformed},
		{"SpacesAreSeparate", nameSpaces},
		{"NamesAreExact", nameExact},
		{"ConcurrentPutsOfOneName", nameConcurrent},
		{"EndedContextChangesNothing", nameEndedContext},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.run(t, newStore(t)) })
	}
}

func digestOf(s string) farm.Digest { return farm.DigestOf([]byte(s)) }

// wantName fails the test unless name in space points at want.
func wantName(t *testing.T, s farm.NameStore, space farm.Space, name string, want farm.Digest) {
	t.Helper()
	got, err := s.GetName(ctxFor(t, waitLong), space, name)
	must(t, "get name "+name, err)
	if got != want {
		t.Fatalf("name %s points at %s, want %s", name, got, want)
	}
}

func namePutGet(t *testing.T, s farm.NameStore) {
	ctx := ctxFor(t, waitLong)
	names := map[string]farm.Digest{
		"md5/0123456789abcdef0123456789abcdef":                           digestOf("one"),
		"paths/" + string(digestOf("one")) + "/" + string(digestOf("p")): digestOf("one"),
		"x": digestOf("two"),
	}
	for name, d := range names {
		must(t, "put name "+name, s.PutName(ctx, farm.SpaceFilebucket, name, d))
	}
	for name, d := range names {
		wantName(t, s, farm.SpaceFilebucket, name, d)
	}
}

func nameUnknown(t *testing.T, s farm.NameStore) {
	ctx := ctxFor(t, waitLong)
	must(t, "put name", s.PutName(ctx, farm.SpaceFilebucket, "known", digestOf("x")))
	for _, sp := range []farm.Space{farm.SpaceFilebucket, farm.SpaceContent} {
		_, err := s.GetName(ctx, sp, "unknown")
		wantErrIs(t, fmt.Sprintf("get unknown name in %s", sp), err, farm.ErrNotFound)
	}
}

func namePutIdempotent(t *testing.T, s farm.NameStore) {
	ctx := ctxFor(t, waitLong)
	d := digestOf("content")
	for i := range 3 {
		must(t, fmt.Sprintf("put name (%d)", i+1), s.PutName(ctx, farm.SpaceFilebucket, "md5/aa", d))
	}
	wantName(t, s, farm.SpaceFilebucket, "md5/aa", d)
}

func namePutConflict(t *testing.T, s farm.NameStore) {
	ctx := ctxFor(t, waitLong)
	first, other := digestOf("first"), digestOf("other")
	must(t, "put name", s.PutName(ctx, farm.SpaceFilebucket, "md5/bb", first))
	err := s.PutName(ctx, farm.SpaceFilebucket, "md5/bb", other)
	wantErrIs(t, "put name again with another digest", err, farm.ErrConflict)
	wantName(t, s, farm.SpaceFilebucket, "md5/bb", first)
	// The first digest can still be put again.
	must(t, "put name again with its digest", s.PutName(ctx, farm.SpaceFilebucket, "md5/bb", first))
}

func nameMalformed(t *testing.T, s farm.NameStore) {
	ctx := ctxFor(t, waitLong)
	good := digestOf("x")
	badNames := []string{"", "/abs", "a//b", "a/../b", "..", "with space", strings.Repeat("n", farm.MaxNameSegment+1), "nul\x00"}
	for _, name := range badNames {
		t.Run(fmt.Sprintf("name %q", name), func(t *testing.T) {
			wantErrIs(t, "put", s.PutName(ctx, farm.SpaceFilebucket, name, good), farm.ErrInvalid)
			_, err := s.GetName(ctx, farm.SpaceFilebucket, name)
			wantErrIs(t, "get", err, farm.ErrInvalid)
		})
	}
	t.Run("space", func(t *testing.T) {
		wantErrIs(t, "put", s.PutName(ctx, "Bad/Space", "x", good), farm.ErrInvalid)
		_, err := s.GetName(ctx, "Bad/Space", "x")
		wantErrIs(t, "get", err, farm.ErrInvalid)
	})
	for _, d := range []farm.Digest{"", "abc", farm.Digest(strings.ToUpper(string(good))), "../" + good[3:]} {
		t.Run(fmt.Sprintf("digest %q", d), func(t *testing.T) {
			wantErrIs(t, "put", s.PutName(ctx, farm.SpaceFilebucket, "x", d), farm.ErrInvalid)
		})
	}
	// Nothing malformed was stored.
	_, err := s.GetName(ctx, farm.SpaceFilebucket, "x")
	wantErrIs(t, "get x after refused puts", err, farm.ErrNotFound)
}

func nameSpaces(t *testing.T, s farm.NameStore) {
	ctx := ctxFor(t, waitLong)
	a, b := digestOf("a"), digestOf("b")
	must(t, "put in filebucket", s.PutName(ctx, farm.SpaceFilebucket, "same", a))
	_, err := s.GetName(ctx, farm.SpaceContent, "same")
	wantErrIs(t, "get the filebucket's name from content", err, farm.ErrNotFound)
	// The same name may point elsewhere in another space.
	must(t, "put in content", s.PutName(ctx, farm.SpaceContent, "same", b))
	wantName(t, s, farm.SpaceFilebucket, "same", a)
	wantName(t, s, farm.SpaceContent, "same", b)
}

// nameExact: names are compared byte for byte: case matters, and a name may
// be a prefix (or a parent "directory") of another.
func nameExact(t *testing.T, s farm.NameStore) {
	ctx := ctxFor(t, waitLong)
	names := []string{"md5/ab", "md5/ab/c", "md5/AB", "md5/ab.", "md5", "md5/ab/c/d"}
	for i, name := range names {
		must(t, "put "+name, s.PutName(ctx, farm.SpaceFilebucket, name, digestOf(fmt.Sprint(i))))
	}
	for i, name := range names {
		wantName(t, s, farm.SpaceFilebucket, name, digestOf(fmt.Sprint(i)))
	}
	_, err := s.GetName(ctx, farm.SpaceFilebucket, "md5/a")
	wantErrIs(t, "get a prefix of a name", err, farm.ErrNotFound)
}

// nameEndedContext: a call whose context has ended returns its error, and
// PutName writes nothing.
func nameEndedContext(t *testing.T, s farm.NameStore) {
	ctx := ctxFor(t, waitLong)
	ended, cancel := context.WithCancel(ctx)
	cancel()
	wantErrIs(t, "put with an ended context", s.PutName(ended, farm.SpaceFilebucket, "md5/ended", digestOf("x")), context.Canceled)
	_, err := s.GetName(ended, farm.SpaceFilebucket, "md5/ended")
	wantErrIs(t, "get with an ended context", err, context.Canceled)
	_, err = s.GetName(ctx, farm.SpaceFilebucket, "md5/ended")
	wantErrIs(t, "get after a put with an ended context", err, farm.ErrNotFound)
}

// nameConcurrent: of concurrent PutNames of one new name with two digests,
// one digest wins; every put of it succeeds and every put of the other is
// ErrConflict.
func nameConcurrent(t *testing.T, s farm.NameStore) {
	ctx := ctxFor(t, waitLong)
	digests := []farm.Digest{digestOf("left"), digestOf("right")}
	const n = 32
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			errs[i] = s.PutName(ctx, farm.SpaceFilebucket, "md5/race", digests[i%2])
		})
	}
	close(start)
	wg.Wait()
	won, err := s.GetName(ctx, farm.SpaceFilebucket, "md5/race")
	must(t, "get the raced name", err)
	if won != digests[0] && won != digests[1] {
		t.Fatalf("the raced name points at %s, which no put gave", won)
	}
	for i, err := range errs {
		switch {
		case digests[i%2] == won && err != nil:
			t.Errorf("put %d of the winning digest: %v", i, err)
		case digests[i%2] != won && !errors.Is(err, farm.ErrConflict):
			t.Errorf("put %d of the losing digest: %v, want ErrConflict", i, err)
		}
	}
}

package farmtest

import (
	"context"
	"fmt"
	"testing"

	"github.com/compilefarm/compilefarm/pkg/farm"
)

// TestContentRetirer checks that a farm.ContentRetirer keeps its contract
// (ContentStore's is TestContentStore's). newStore returns a fresh, empty
// store for each subtest.
func TestContentRetirer(t *testing.T, newStore func(t *testing.T) farm.ContentRetirer) {
	t.Helper()
	tests := []struct {
		name string
		run  func(t *testing.T, s farm.ContentRetirer)
	}{
		{"PutNewTellsWhetherTheBlobExisted", retirePutNew},
		{"RetireMarksAndKeepTakesBack", retireMarkKeep},
		{"RetiredBlobStaysReadable", retireReadable},
		{"PutLeavesTheMark", retirePutLeavesMark},
		{"AbsentBlobIsNotFound", retireAbsent},
		{"SpacesAreSeparate", retireSpaces},
		{"MalformedAddressIsInvalid", retireMalformed},
		{"EndedContextChangesNothing", retireEndedContext},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.run(t, newStore(t)) })
	}
}

// wantRetired fails the test unless d of space carries a mark as want says.
func wantRetired(t *testing.T, s farm.ContentRetirer, space farm.Space, d farm.Digest, want bool) {
	t.Helper()
	got, err := s.Retired(ctxFor(t, waitLong), space, d)
	must(t, "retired", err)
	if got != want {
		t.Fatalf("retired(%s/%s) = %v, want %v", space, d, got, want)
	}
}

func retirePutNew(t *testing.T, s farm.ContentRetirer) {
	ctx := ctxFor(t, waitLong)
	data := randomBytes(t, 512)
	d, existed, err := s.PutNew(ctx, farm.SpaceCatalogs, data)
	must(t, "first put", err)
	if want := farm.DigestOf(data); d != want {
		t.Fatalf("put returned digest %q, want %q", d, want)
	}
	if existed {
		t.Fatal("first put of new bytes: existed = true")
	}
	for i := range 2 {
		d2, existed, err := s.PutNew(ctx, farm.SpaceCatalogs, data)
		must(t, fmt.Sprintf("put again (%d)", i+2), err)
		if d2 != d || !existed {
			t.Fatalf("put again: digest %q existed %v, want %q true", d2, existed, d)
		}
	}
	// A blob Put put exists for PutNew too.
	other := randomBytes(t, 64)
	if _, err := s.Put(ctx, farm.SpaceCatalogs, other); err != nil {
		t.Fatalf("put: %v", err)
	}
	if _, existed, err := s.PutNew(ctx, farm.SpaceCatalogs, other); err != nil || !existed {
		t.Fatalf("put new of bytes put before: existed %v, err %v; want true, nil", existed, err)
	}
	wantRetired(t, s, farm.SpaceCatalogs, d, false)
}

func retireMarkKeep(t *testing.T, s farm.ContentRetirer) {
	ctx := ctxFor(t, waitLong)
	d, err := s.Put(ctx, farm.SpaceCatalogs, randomBytes(t, 256))
	must(t, "put", err)
	wantRetired(t, s, farm.SpaceCatalogs, d, false)
	must(t, "retire", s.Retire(ctx, farm.SpaceCatalogs, d))
	wantRetired(t, s, farm.SpaceCatalogs, d, true)
	must(t, "retire again", s.Retire(ctx, farm.SpaceCatalogs, d))
	wantRetired(t, s, farm.SpaceCatalogs, d, true)
	must(t, "keep", s.Keep(ctx, farm.SpaceCatalogs, d))
	wantRetired(t, s, farm.SpaceCatalogs, d, false)
	must(t, "keep an unmarked blob", s.Keep(ctx, farm.SpaceCatalogs, d))
	wantRetired(t, s, farm.SpaceCatalogs, d, false)
	must(t, "retire after keep", s.Retire(ctx, farm.SpaceCatalogs, d))
	wantRetired(t, s, farm.SpaceCatalogs, d, true)
}

func retireReadable(t *testing.T, s farm.ContentRetirer) {
	ctx := ctxFor(t, waitLong)
	data := randomBytes(t, 3000)
	d, err := s.Put(ctx, farm.SpaceCatalogs, data)
	must(t, "put", err)
	must(t, "retire", s.Retire(ctx, farm.SpaceCatalogs, d))
	got, err := s.Get(ctx, farm.SpaceCatalogs, d)
	must(t, "get a retired blob", err)
	if string(got) != string(data) {
		t.Fatalf("get of a retired blob returned %d other bytes", len(got))
	}
	ok, err := s.Has(ctx, farm.SpaceCatalogs, d)
	must(t, "has", err)
	if !ok {
		t.Fatal("has = false for a retired blob")
	}
}

func retirePutLeavesMark(t *testing.T, s farm.ContentRetirer) {
	ctx := ctxFor(t, waitLong)
	data := randomBytes(t, 128)
	d, err := s.Put(ctx, farm.SpaceCatalogs, data)
	must(t, "put", err)
	must(t, "retire", s.Retire(ctx, farm.SpaceCatalogs, d))
	if _, err := s.Put(ctx, farm.SpaceCatalogs, data); err != nil {
		t.Fatalf("put a retired blob again: %v", err)
	}
	wantRetired(t, s, farm.SpaceCatalogs, d, true)
	if _, existed, err := s.PutNew(ctx, farm.SpaceCatalogs, data); err != nil || !existed {
		t.Fatalf("put new of a retired blob: existed %v, err %v; want true, nil", existed, err)
	}
	wantRetired(t, s, farm.SpaceCatalogs, d, true)
}

func retireAbsent(t *testing.T, s farm.ContentRetirer) {
	ctx := ctxFor(t, waitLong)
	d := farm.DigestOf([]byte("never put"))
	wantErrIs(t, "retire of an absent blob", s.Retire(ctx, farm.SpaceCatalogs, d), farm.ErrNotFound)
	wantErrIs(t, "keep of an absent blob", s.Keep(ctx, farm.SpaceCatalogs, d), farm.ErrNotFound)
	_, err := s.Retired(ctx, farm.SpaceCatalogs, d)
	wantErrIs(t, "retired of an absent blob", err, farm.ErrNotFound)
}

func retireSpaces(t *testing.T, s farm.ContentRetirer) {
	ctx := ctxFor(t, waitLong)
	data := randomBytes(t, 100)
	d, err := s.Put(ctx, farm.SpaceCatalogs, data)
	must(t, "put in catalogs", err)
	if _, err := s.Put(ctx, farm.SpaceContent, data); err != nil {
		t.Fatalf("put in content: %v", err)
	}
	must(t, "retire in catalogs", s.Retire(ctx, farm.SpaceCatalogs, d))
	wantRetired(t, s, farm.SpaceContent, d, false)
	wantErrIs(t, "retire in a space without the blob", s.Retire(ctx, farm.SpaceFacts, d), farm.ErrNotFound)
}

func retireMalformed(t *testing.T, s farm.ContentRetirer) {
	ctx := ctxFor(t, waitLong)
	good := farm.DigestOf([]byte("x"))
	for _, c := range []struct {
		space farm.Space
		d     farm.Digest
	}{{farm.SpaceCatalogs, "not-a-digest"}, {farm.SpaceCatalogs, farm.Digest("ABC" + good[3:])}, {"../catalogs", good}, {"", good}} {
		wantErrIs(t, fmt.Sprintf("retire %q/%q", c.space, c.d), s.Retire(ctx, c.space, c.d), farm.ErrInvalid)
		wantErrIs(t, fmt.Sprintf("keep %q/%q", c.space, c.d), s.Keep(ctx, c.space, c.d), farm.ErrInvalid)
		_, err := s.Retired(ctx, c.space, c.d)
		wantErrIs(t, fmt.Sprintf("retired %q/%q", c.space, c.d), err, farm.ErrInvalid)
	}
	_, _, err := s.PutNew(ctx, "Bad Space", []byte("x"))
	wantErrIs(t, "put new in a bad space", err, farm.ErrInvalid)
}

func retireEndedContext(t *testing.T, s farm.ContentRetirer) {
	ctx := ctxFor(t, waitLong)
	data := randomBytes(t, 64)
	d, err := s.Put(ctx, farm.SpaceCatalogs, data)
	must(t, "put", err)
	ended, cancel := context.WithCancel(ctx)
	cancel()
	wantErrIs(t, "retire with an ended context", s.Retire(ended, farm.SpaceCatalogs, d), context.Canceled)
	wantRetired(t, s, farm.SpaceCatalogs, d, false)
	must(t, "retire", s.Retire(ctx, farm.SpaceCatalogs, d))
	wantErrIs(t, "keep with an ended context", s.Keep(ended, farm.SpaceCatalogs, d), context.Canceled)
	wantRetired(t, s, farm.SpaceCatalogs, d, true)
	_, err = s.Retired(ended, farm.SpaceCatalogs, d)
	wantErrIs(t, "retired with an ended context", err, context.Canceled)
	fresh := randomBytes(t, 64)
	_, _, err = s.PutNew(ended, farm.SpaceCatalogs, fresh)
	wantErrIs(t, "put new with an ended context", err, context.Canceled)
	if ok, err := s.Has(ctx, farm.SpaceCatalogs, farm.DigestOf(fresh)); err != nil || ok {
		t.Fatalf("put new with an ended context stored the blob (has %v, err %v)", ok, err)
	}
}

package farmtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/compilefarm/compilefarm/pkg/farm"
)

// TestCAKeySource checks that a farm.CAKeySource keeps its contract.
// newSource returns a fresh source holding no key for each subtest (its own
// file, its own secret). How the driver protects the key at rest is for
// its own tests.
func TestCAKeySource(t *testing.T, newSource func(t *testing.T) farm.CAKeySource) {
	t.Helper()
	tests := []struct {
		name string
		run  func(t *testing.T, src farm.CAKeySource)
	}{
		{"EmptyIsNotFound", keyEmpty},
		{"CreateThenLoadIsByteExact", keyRoundTrip},
		{"LargestKey", keyLargest},
		{"CreateWhenPresentIsConflict", keyConflict},
		{"ConcurrentCreatesOneWins", keyConcurrent},
		{"InvalidKeyIsInvalid", keyInvalid},
		{"EndedContextChangesNothing", keyEndedContext},
		{"StringNamesTheSourceNotTheKey", keyString},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.run(t, newSource(t)) })
	}
}

// testKey is PEM text as the CA writes it, with what a careless driver
// would lose: CRLF line ends, a trailing newline, a distinct body per n.
func testKey(n int) []byte {
	body := strings.Repeat(fmt.Sprintf("MIIEpAIBAAKCAQEA%04dkeymaterial", n), 3)
	return []byte("-----BEGIN RSA PRIVATE KEY-----\r\n" + body + "\r\n" + body + "\n-----END RSA PRIVATE KEY-----\n")
}

func wantKey(t *testing.T, src farm.CAKeySource, what string, want []byte) {
	t.Helper()
	got, err := src.LoadKey(ctxFor(t, waitLong))
	must(t, what+": load key", err)
	if !bytes.Equal(got, want) {
		t.Fatalf("%s: LoadKey returned %d bytes %.40q, want the %d bytes %.40q stored", what, len(got), got, len(want), want)
	}
}

func wantNoKey(t *testing.T, src farm.CAKeySource, what string) {
	t.Helper()
	_, err := src.LoadKey(ctxFor(t, waitLong))
	wantErrIs(t, what+": load key", err, farm.ErrNotFound)
}

func keyEmpty(t *testing.T, src farm.CAKeySource) {
	wantNoKey(t, src, "a fresh source")
}

func keyRoundTrip(t *testing.T, src farm.CAKeySource) {
	key := testKey(1)
	must(t, "create key", src.CreateKey(ctxFor(t, waitLong), bytes.Clone(key)))
	wantKey(t, src, "after CreateKey", key)
	wantKey(t, src, "loaded again", key)
}

// keyLargest: a key of MaxCAKey bytes is kept whole.
func keyLargest(t *testing.T, src farm.CAKeySource) {
	key := bytes.Repeat([]byte("0123456789abcdef"), farm.MaxCAKey/16)
	must(t, "create a key of MaxCAKey bytes", src.CreateKey(ctxFor(t, waitLong), key))
	wantKey(t, src, "the largest key", key)
}

func keyConflict(t *testing.T, src farm.CAKeySource) {
	ctx := ctxFor(t, waitLong)
	first := testKey(1)
	must(t, "create key", src.CreateKey(ctx, first))
	wantErrIs(t, "create a second key", src.CreateKey(ctx, testKey(2)), farm.ErrConflict)
	wantErrIs(t, "create the same key again", src.CreateKey(ctx, first), farm.ErrConflict)
	wantKey(t, src, "after refused CreateKeys", first)
}

// keyConcurrent: of CreateKeys racing on an empty source exactly one wins,
// the others are ErrConflict, and the source holds the winner's key.
func keyConcurrent(t *testing.T, src farm.CAKeySource) {
	ctx := ctxFor(t, waitLong)
	const n = 8
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			errs[i] = src.CreateKey(ctx, testKey(i))
		})
	}
	close(start)
	wg.Wait()
	winner := -1
	for i, err := range errs {
		switch {
		case err == nil && winner >= 0:
			t.Fatalf("CreateKeys %d and %d both succeeded", winner, i)
		case err == nil:
			winner = i
		case !errors.Is(err, farm.ErrConflict):
			t.Fatalf("CreateKey %d: %v, want success or ErrConflict", i, err)
		}
	}
	if winner < 0 {
		t.Fatalf("no CreateKey of %d succeeded", n)
	}
	wantKey(t, src, "after racing CreateKeys", testKey(winner))
}

func keyInvalid(t *testing.T, src farm.CAKeySource) {
	ctx := ctxFor(t, waitLong)
	for name, key := range map[string][]byte{
		"nil":                  nil,
		"empty":                {},
		"larger than MaxCAKey": bytes.Repeat([]byte("k"), farm.MaxCAKey+1),
	} {
		wantErrIs(t, "create a key "+name, src.CreateKey(ctx, key), farm.ErrInvalid)
	}
	wantNoKey(t, src, "after refused keys")
}

func keyEndedContext(t *testing.T, src farm.CAKeySource) {
	ended, cancel := context.WithCancel(ctxFor(t, waitLong))
	cancel()
	wantErrIs(t, "create key with an ended context", src.CreateKey(ended, testKey(1)), context.Canceled)
	_, err := src.LoadKey(ended)
	wantErrIs(t, "load key with an ended context", err, context.Canceled)
	wantNoKey(t, src, "after a CreateKey with an ended context")
}

// keyString: String names the source, stays the same, and never shows
// the key.
func keyString(t *testing.T, src farm.CAKeySource) {
	name := src.String()
	if strings.TrimSpace(name) == "" {
		t.Fatal("String is empty")
	}
	key := testKey(7)
	must(t, "create key", src.CreateKey(ctxFor(t, waitLong), key))
	if got := src.String(); got != name {
		t.Fatalf("String changed from %q to %q when the key was stored", name, got)
	}
	if strings.Contains(src.String(), "keymaterial") {
		t.Fatalf("String %q shows the key", src.String())
	}
}

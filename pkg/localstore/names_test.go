package localstore_test

import (
	"context"
	"testing"

	"github.com/compilefarm/compilefarm/pkg/farm"
	"github.com/compilefarm/compilefarm/pkg/farm/farmtest"
)

func TestNameStore(t *testing.T) {
	farmtest.TestNameStore(t, func(t *testing.T) farm.NameStore { return open(t, t.TempDir()) })
}

// TestNamesSurviveReopen: a name is in state.db, synced before PutName
// returns, and read back by the next process.
func TestNamesSurviveReopen(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	d := farm.DigestOf([]byte("backed up"))
	s := open(t, dir)
	if err := s.PutName(ctx, farm.SpaceFilebucket, "md5/0123", d); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	got, err := open(t, dir).GetName(ctx, farm.SpaceFilebucket, "md5/0123")
	if err != nil || got != d {
		t.Fatalf("after reopen: %s, %v; want %s", got, err, d)
	}
}

package memstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/compilefarm/compilefarm/pkg/farm"
	"github.com/compilefarm/compilefarm/pkg/farm/farmtest"
	"github.com/compilefarm/compilefarm/pkg/memstore"
)

func TestContentStore(t *testing.T) {
	farmtest.TestContentStore(t, func(t *testing.T) farm.ContentStore { return memstore.New() })
}

func TestContentRetirer(t *testing.T) {
	farmtest.TestContentRetirer(t, func(t *testing.T) farm.ContentRetirer { return memstore.New() })
}

func TestNodeStore(t *testing.T) {
	farmtest.TestNodeStore(t, func(t *testing.T) farm.NodeStore { return memstore.New() })
	farmtest.TestNodeReports(t, func(t *testing.T) farm.NodeStore { return memstore.New() })
}

func TestEnvironmentStore(t *testing.T) {
	farmtest.TestEnvironmentStore(t, func(t *testing.T) farm.EnvironmentStore { return memstore.New() })
}

func newQueue(t *testing.T) farm.Queue {
	return memstore.NewQueue(memstore.QueueOptions{VisibilityTimeout: 2 * time.Second})
}

func TestQueue(t *testing.T) {
	farmtest.TestQueue(t, newQueue, farmtest.QueueCaps{Collapses: true, NodeExclusive: true, FinishedDeliveryIsNotFound: true})
}

func TestInvalidSpace(t *testing.T) {
	s := memstore.New()
	ctx := context.Background()
	for _, sp := range []farm.Space{"", "../x", "Catalogs", "a/b"} {
		if _, err := s.Put(ctx, sp, []byte("x")); !errors.Is(err, farm.ErrInvalid) {
			t.Errorf("put in space %q: %v, want ErrInvalid", sp, err)
		}
	}
}

// The store keeps its own copy of an environment: changing the record put or
// returned, through its Release pointer too, changes nothing stored.
func TestEnvironmentsAreCopies(t *testing.T) {
	s := memstore.New()
	ctx := context.Background()
	env := farm.Environment{Name: "production", CodeID: "new", Release: &farm.Release{Hold: true, Stable: "old", Nodes: []string{"a.example.com"}}}
	if err := s.PutEnvironment(ctx, env); err != nil {
		t.Fatal(err)
	}
	env.Release.Nodes[0] = "put.example.com"
	got, err := s.GetEnvironment(ctx, "production")
	if err != nil {
		t.Fatal(err)
	}
	got.Release.Percent = 50
	list, err := s.ListEnvironments(ctx)
	if err != nil {
		t.Fatal(err)
	}
	list[0].Release.Nodes[0] = "listed.example.com"
	again, err := s.GetEnvironment(ctx, "production")
	if err != nil {
		t.Fatal(err)
	}
	if r := again.Release; r.Percent != 0 || len(r.Nodes) != 1 || r.Nodes[0] != "a.example.com" {
		t.Fatalf("stored release changed with a caller's copy: %+v", r)
	}
}

func TestPresenceStore(t *testing.T) {
	farmtest.TestPresenceStore(t, func(t *testing.T) farm.PresenceStore { return memstore.New() })
}

func TestInbox(t *testing.T) {
	farmtest.TestInbox(t, func(t *testing.T) farm.Inbox { return memstore.New() })
}

func TestRunJobStore(t *testing.T) {
	farmtest.TestRunJobStore(t, func(t *testing.T) farm.RunJobStore { return memstore.New() })
}

func TestQueryStore(t *testing.T) {
	farmtest.TestQueryStore(t, func(t *testing.T) farm.QueryStore { return memstore.New() })
}

func TestOutbox(t *testing.T) {
	farmtest.TestOutbox(t, func(t *testing.T) farm.Outbox {
		return memstore.NewOutbox(memstore.OutboxOptions{VisibilityTimeout: 2 * time.Second})
	}, farmtest.OutboxCaps{ListsDeadLetters: true})
}

func TestCAKey(t *testing.T) {
	t.Run("CAKeySource", func(t *testing.T) {
		farmtest.TestCAKeySource(t, func(t *testing.T) func() farm.CAKeySource {
			k := memstore.NewCAKey()
			return func() farm.CAKeySource { return k }
		})
	})
	t.Run("CAKeyImporter", func(t *testing.T) {
		farmtest.TestCAKeyImporter(t, func(t *testing.T) func() farm.CAKeyImporter {
			k := memstore.NewCAKey()
			return func() farm.CAKeyImporter { return k }
		})
	})
}

func TestCAStore(t *testing.T) {
	farmtest.TestCAStore(t, func(t *testing.T) farm.CAStore { return memstore.NewCAStore() })
}

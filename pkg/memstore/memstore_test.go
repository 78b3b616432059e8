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

func TestNodeStore(t *testing.T) {
	farmtest.TestNodeStore(t, func(t *testing.T) farm.NodeStore { return memstore.New() })
}

func TestEnvironmentStore(t *testing.T) {
	farmtest.TestEnvironmentStore(t, func(t *testing.T) farm.EnvironmentStore { return memstore.New() })
}

func newQueue(t *testing.T) farm.Queue {
	return memstore.NewQueue(memstore.QueueOptions{VisibilityTimeout: 2 * time.Second})
}

func TestQueue(t *testing.T) {
	farmtest.TestQueue(t, newQueue, farmtest.QueueCaps{Collapses: true, NodeExclusive: true})
}

func TestQueueFinishedDeliveryIsNotFound(t *testing.T) {
	ctx := context.Background()
	q := newQueue(t)
	job := farm.Job{Certname: "a.example.com", Lane: farm.LaneUrgent, Seq: 1}
	if err := q.Enqueue(ctx, job); err != nil {
		t.Fatal(err)
	}
	d, err := q.Receive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Ack(ctx, d); err != nil {
		t.Fatal(err)
	}
	for name, err := range map[string]error{
		"ack again":       q.Ack(ctx, d),
		"retry after ack": q.Retry(ctx, d, 0),
		"ack unknown":     q.Ack(ctx, farm.Delivery{ID: "nope"}),
	} {
		if !errors.Is(err, farm.ErrNotFound) {
			t.Errorf("%s: %v, want ErrNotFound", name, err)
		}
	}
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

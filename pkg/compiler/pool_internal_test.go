package compiler

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/compilefarm/compilefarm/pkg/farm"
	"github.com/compilefarm/compilefarm/pkg/memstore"
)

// echoEngine compiles a catalog that shows the cf_role fact it was given.
type echoEngine struct{}

func (echoEngine) Compile(ctx context.Context, req Request) (Result, error) {
	b, err := json.Marshal(map[string]any{"name": req.Certname, "environment": req.Environment,
		"version": 1, "resources": []any{}, "facts_seen": req.Facts["cf_role"]})
	return Result{Catalog: b}, err
}

func (echoEngine) Close() error { return nil }

// staticCode is a Code whose catalogs are static already.
type staticCode struct{}

func (staticCode) EnvironmentPath(ctx context.Context, codeID string) (string, error) {
	return "/nonexistent/" + codeID, nil
}

func (staticCode) MakeStatic(ctx context.Context, catalog []byte, codeID string) ([]byte, error) {
	return catalog, nil
}

func (staticCode) Publish(ctx context.Context, codeID string, text []byte) ([]byte, error) {
	return text, nil
}

// TestPoolNewestWins delivers two compiles of one node and finishes them in
// both orders: the stored catalog is always the newer one.
func TestPoolNewestWins(t *testing.T) {
	for _, order := range []string{"in order", "reversed"} {
		t.Run(order, func(t *testing.T) {
			store := memstore.New()
			pool := &Pool{Queue: memstore.NewQueue(memstore.QueueOptions{}), Nodes: store, Content: store, Engine: echoEngine{}, Code: staticCode{}}
			ctx := context.Background()
			mk := func(role string, seq uint64) farm.Delivery {
				doc := []byte(`{"name":"n1","values":{"cf_role":"` + role + `"}}`)
				d, _ := store.Put(ctx, farm.SpaceFacts, doc)
				return farm.Delivery{Job: farm.Job{Certname: "n1", Environment: "production", CodeID: "code1",
					FactsDigest: d, Seq: seq, Lane: farm.LaneUrgent}, ID: fmt.Sprint(seq), Attempts: 1}
			}
			store.UpdateNode(ctx, "n1", func(n *farm.Node) error {
				n.RequestSeq = 2
				n.Requested = &farm.CompileRequest{Seq: 2, Environment: "production", CodeID: "code1"}
				return nil
			})
			old, newer := mk("web", 1), mk("db", 2)
			first, second := old, newer
			if order == "reversed" {
				first, second = newer, old
			}
			// Bypass the skip of superseded jobs for the old one by compiling
			// directly, as a second worker that read the node early would.
			for _, d := range []farm.Delivery{first, second} {
				pool.compile(ctx, d, pool.log())
			}
			n, _ := store.GetNode(ctx, "n1")
			if n.Catalog == nil || n.Catalog.Seq != 2 {
				t.Fatalf("stored catalog seq = %+v, want 2", n.Catalog)
			}
			b, _ := store.Get(ctx, farm.SpaceCatalogs, n.Catalog.Digest)
			var cat map[string]any
			json.Unmarshal(b, &cat)
			if cat["facts_seen"] != "db" {
				t.Errorf("catalog compiled from %v, want the newer facts (db)", cat["facts_seen"])
			}
		})
	}
}

// slowEngine compiles like echoEngine, after a pause.
type slowEngine struct{ pause time.Duration }

func (e slowEngine) Compile(ctx context.Context, req Request) (Result, error) {
	time.Sleep(e.pause)
	return echoEngine{}.Compile(ctx, req)
}

func (slowEngine) Close() error { return nil }

// TestHandleFinishesAfterSlowCompile: a compile longer than the time for
// finishing a delivery is still acknowledged (the finishing time counts
// from the compile's end), and the node gets its catalog.
func TestHandleFinishesAfterSlowCompile(t *testing.T) {
	defer func(d time.Duration) { finishTimeout = d }(finishTimeout)
	finishTimeout = 20 * time.Millisecond
	ctx := context.Background()
	store := memstore.New()
	queue := memstore.NewQueue(memstore.QueueOptions{})
	pool := &Pool{Queue: queue, Nodes: store, Content: store, Engine: slowEngine{pause: 100 * time.Millisecond}, Code: staticCode{}}
	doc := []byte(`{"name":"n1","values":{"cf_role":"web"}}`)
	fd, err := store.Put(ctx, farm.SpaceFacts, doc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.UpdateNode(ctx, "n1", func(n *farm.Node) error {
		n.Environment, n.RequestSeq = "production", 1
		n.Requested = &farm.CompileRequest{Seq: 1, Environment: "production", CodeID: "code1", FactsDigest: fd}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	job := farm.Job{Certname: "n1", Environment: "production", CodeID: "code1", FactsDigest: fd, Seq: 1, Lane: farm.LaneUrgent}
	if err := queue.Enqueue(ctx, job); err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	d, err := queue.Receive(rctx)
	if err != nil {
		t.Fatal(err)
	}
	pool.Handle(ctx, d)
	stats, err := queue.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range stats {
		if s.Depth != 0 || s.InFlight != 0 {
			t.Errorf("queue after the compile: %+v, want the job acknowledged", s)
		}
	}
	n, err := store.GetNode(ctx, "n1")
	if err != nil || n.Catalog == nil || n.Catalog.Seq != 1 {
		t.Errorf("node after the compile: %+v, %v; want its catalog of seq 1", n.Catalog, err)
	}
}

package aws

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/compilefarm/compilefarm/pkg/compiler"
	"github.com/compilefarm/compilefarm/pkg/farm"
	"github.com/compilefarm/compilefarm/test/e2e"
)

// jitterEngine compiles instantly-ish, after a random pause, so that
// compiles started in one order finish in another. The catalog names the
// facts it was compiled from.
type jitterEngine struct {
	mu  sync.Mutex
	rng *rand.Rand
}

func (e *jitterEngine) Compile(ctx context.Context, req compiler.Request) (compiler.Result, error) {
	e.mu.Lock()
	pause := time.Duration(e.rng.IntN(40)) * time.Millisecond
	e.mu.Unlock()
	select {
	case <-time.After(pause):
	case <-ctx.Done():
		return compiler.Result{}, ctx.Err()
	}
	b, _ := json.Marshal(map[string]any{"name": req.Certname, "environment": req.Environment, "version": 1,
		"resources": []any{map[string]any{"type": "Notify", "title": "facts", "exported": false,
			"parameters": map[string]any{"message": req.Facts["generation"]}}}})
	return compiler.Result{Catalog: b}, nil
}

func (e *jitterEngine) Close() error { return nil }

// plainCode needs no checkout and keeps catalogs as compiled.
type plainCode struct{}

func (plainCode) EnvironmentPath(ctx context.Context, codeID string) (string, error) {
	return "/nonexistent", nil
}
func (plainCode) MakeStatic(ctx context.Context, c []byte, codeID string) ([]byte, error) {
	return c, nil
}
func (plainCode) Publish(ctx context.Context, codeID string, text []byte) ([]byte, error) {
	return text, nil
}

// TestRedeliveryAndRaces: on the S3 and DynamoDB drivers, newer compile
// requests of a node arrive while older compiles run, jobs are delivered
// twice, and compiles finish in random order; every round ends with the
// catalog of the newest request and no failed delivery. Randomised, with
// the seed logged.
func TestRedeliveryAndRaces(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: real brokers, Ruby Puppet and a puppet agent; skipped with -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	a := e2e.StartAWS(t, ctx)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 7))
	pool := &compiler.Pool{Nodes: a.State, Content: a.Content, Engine: &jitterEngine{rng: rand.New(rand.NewPCG(seed, 8))}, Code: plainCode{}}
	if err := a.State.PutEnvironment(ctx, farm.Environment{Name: "production", CodeID: "code1"}); err != nil {
		t.Fatal(err)
	}
	const rounds = 40
	for r := 0; r < rounds; r++ {
		node := fmt.Sprintf("race%02d.example.test", r)
		generations := 2 + rng.IntN(4)
		var wg sync.WaitGroup
		var mu sync.Mutex
		var failed []string
		deliver := func(job farm.Job, receive int) {
			defer wg.Done()
			body, _ := json.Marshal(job)
			f := pool.HandleBatch(ctx, []compiler.BatchItem{{ID: fmt.Sprint(job.Seq, "-", receive), Body: body, ReceiveCount: receive}}, 3)
			mu.Lock()
			failed = append(failed, f...)
			mu.Unlock()
		}
		var jobs []farm.Job
		for g := 1; g <= generations; g++ {
			doc, _ := json.Marshal(map[string]any{"name": node, "values": map[string]any{"generation": g}})
			fd, err := a.Content.Put(ctx, farm.SpaceFacts, doc)
			if err != nil {
				t.Fatal(err)
			}
			// A newer upload: the request moves on while older compiles run.
			_, err = a.State.UpdateNode(ctx, node, func(n *farm.Node) error {
				n.Environment, n.FactsDigest = "production", fd
				n.RequestSeq++
				n.Requested = &farm.CompileRequest{Seq: n.RequestSeq, Environment: "production", CodeID: "code1", FactsDigest: fd}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			job := farm.Job{Certname: node, Environment: "production", CodeID: "code1", FactsDigest: fd, Seq: uint64(g), Lane: farm.LaneUrgent}
			jobs = append(jobs, job)
			wg.Add(1)
			go deliver(job, 1)
			if rng.IntN(2) == 0 { // delivered twice
				wg.Add(1)
				go deliver(job, 2)
			}
		}
		// Late redeliveries of random older jobs.
		for i := rng.IntN(3); i > 0; i-- {
			wg.Add(1)
			go deliver(jobs[rng.IntN(len(jobs))], 3)
		}
		wg.Wait()
		if len(failed) > 0 {
			t.Fatalf("round %d: deliveries failed: %v", r, failed)
		}
		n, err := a.State.GetNode(ctx, node)
		if err != nil || n.Catalog == nil {
			t.Fatalf("round %d: %v %+v", r, err, n)
		}
		if n.Catalog.Seq != uint64(generations) || n.Pending() {
			t.Fatalf("round %d: catalog seq %d, want the newest %d (pending %v)", r, n.Catalog.Seq, generations, n.Pending())
		}
		b, err := a.Content.Get(ctx, farm.SpaceCatalogs, n.Catalog.Digest)
		if err != nil {
			t.Fatal(err)
		}
		var cat struct {
			Resources []struct {
				Parameters struct {
					Message json.Number `json:"message"`
				} `json:"parameters"`
			} `json:"resources"`
		}
		if err := json.Unmarshal(b, &cat); err != nil || len(cat.Resources) != 1 || cat.Resources[0].Parameters.Message.String() != fmt.Sprint(generations) {
			t.Fatalf("round %d: stored catalog is not from the newest facts: %s", r, b)
		}
	}
}

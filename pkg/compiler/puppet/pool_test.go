package puppet

import (
	"context"
	"errors"
	"runtime"
	"testing"
)

func TestPoolPrefersWarmWorker(t *testing.T) {
	tests := []struct {
		name    string
		recent  [][]string // per worker, released in this order
		envpath string
		want    int
	}{
		{"worker that has the code", [][]string{{"/a"}, {"/b"}, {"/c"}}, "/a", 0},
		{"otherwise the most recently used", [][]string{{"/a"}, {"/b"}, {"/c"}}, "/z", 2},
		{"latest of several that have it", [][]string{{"/a"}, {"/b", "/a"}, {"/c"}}, "/a", 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var p pool
			for i, r := range tt.recent {
				p.put(&worker{n: i, recent: r})
			}
			w, err := p.get(t.Context(), tt.envpath)
			if err != nil {
				t.Fatal(err)
			}
			if w.n != tt.want {
				t.Errorf("got worker %d, want %d", w.n, tt.want)
			}
		})
	}
}

func TestPoolWaiters(t *testing.T) {
	var p pool
	// A waiter whose context ends gets an error and takes nothing.
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := p.get(ctx, ""); !errors.Is(err, context.Canceled) {
		t.Fatalf("get with cancelled ctx: err = %v", err)
	}
	// Waiters are served in order.
	got := make([]chan *worker, 2)
	for i := range got {
		got[i] = make(chan *worker, 1)
		go func() {
			w, err := p.get(t.Context(), "")
			if err != nil {
				t.Error(err)
			}
			got[i] <- w
		}()
		waitForWaiters(&p, i+1)
	}
	p.put(&worker{n: 0})
	p.put(&worker{n: 1})
	for i := range got {
		if w := <-got[i]; w == nil || w.n != i {
			t.Errorf("waiter %d got %+v, want worker %d", i, w, i)
		}
	}
	if len(p.idle) != 0 || len(p.waiters) != 0 {
		t.Errorf("pool not empty: %d idle, %d waiters", len(p.idle), len(p.waiters))
	}
}

// waitForWaiters blocks until n goroutines wait in p.
func waitForWaiters(p *pool, n int) {
	for {
		p.mu.Lock()
		k := len(p.waiters)
		p.mu.Unlock()
		if k >= n {
			return
		}
		runtime.Gosched()
	}
}

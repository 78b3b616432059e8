package puppet

import (
	"context"
	"slices"
	"sync"
)

// recentSize is how many environmentpaths the Go side remembers per worker;
// it matches worker.rb's environment cache (ENV_CACHE_SIZE).
const recentSize = 4

// worker is one slot of the pool; proc is nil while no process runs. A
// worker is owned by whoever took it from the pool.
type worker struct {
	n    int
	dir  string
	proc *process
	// recent are the environmentpaths this process compiled, newest last:
	// the ones whose parsed code it probably still holds.
	recent []string
}

// used records that w's process compiled envpath.
func (w *worker) used(envpath string) {
	w.recent = slices.DeleteFunc(w.recent, func(p string) bool { return p == envpath })
	w.recent = append(w.recent, envpath)
	if len(w.recent) > recentSize {
		w.recent = w.recent[len(w.recent)-recentSize:]
	}
}

// pool hands idle workers out. Waiters are served first come, first served;
// when several workers are idle, one that recently compiled the requested
// environmentpath is preferred (its parsed code is warm), then the most
// recently used one (so a lightly loaded engine keeps using warm workers).
type pool struct {
	mu      sync.Mutex
	idle    []*worker // most recently released last
	waiters []chan *worker
}

// get takes an idle worker for envpath, waiting until one is released or
// ctx ends.
func (p *pool) get(ctx context.Context, envpath string) (*worker, error) {
	p.mu.Lock()
	if len(p.idle) > 0 {
		i := len(p.idle) - 1
		for j := len(p.idle) - 1; j >= 0; j-- {
			if slices.Contains(p.idle[j].recent, envpath) {
				i = j
				break
			}
		}
		w := p.idle[i]
		p.idle = slices.Delete(p.idle, i, i+1)
		p.mu.Unlock()
		return w, nil
	}
	ch := make(chan *worker, 1)
	p.waiters = append(p.waiters, ch)
	p.mu.Unlock()

	select {
	case w := <-ch:
		return w, nil
	case <-ctx.Done():
		p.mu.Lock()
		if i := slices.Index(p.waiters, ch); i >= 0 {
			p.waiters = slices.Delete(p.waiters, i, i+1)
			p.mu.Unlock()
			return nil, ctx.Err()
		}
		p.mu.Unlock()
		// A worker was handed over as ctx ended: pass it on.
		p.put(<-ch)
		return nil, ctx.Err()
	}
}

// put returns w to the pool, handing it straight to the longest waiter.
func (p *pool) put(w *worker) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.waiters) > 0 {
		ch := p.waiters[0]
		p.waiters = slices.Delete(p.waiters, 0, 1)
		ch <- w // buffered; never blocks
		return
	}
	p.idle = append(p.idle, w)
}

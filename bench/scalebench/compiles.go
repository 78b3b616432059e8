package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/compilefarm/compilefarm/pkg/compiler"
	"github.com/compilefarm/compilefarm/pkg/facts"
	"github.com/compilefarm/compilefarm/pkg/farm"
	"github.com/compilefarm/compilefarm/pkg/metrics"
)

// receiveTimeout bounds the wait for one job: the benchmark only asks for
// jobs it queued, so an empty queue is a failure, not something to wait
// out.
const receiveTimeout = 2 * time.Minute

// outcomes counts compiles by result (metrics.Compile*), from the pool's
// metrics.
type outcomes map[string]int

// compileOutcomes reads the pool's compile counter.
func compileOutcomes(m *metrics.Farm) outcomes {
	out := outcomes{}
	for _, r := range []string{metrics.CompileOK, metrics.CompileUnchanged, metrics.CompileFailed, metrics.CompileTransient, metrics.CompileStale} {
		var pb dto.Metric
		if err := m.Compiles.WithLabelValues(r).Write(&pb); err == nil && pb.Counter != nil {
			if n := int(pb.Counter.GetValue()); n > 0 {
				out[r] = n
			}
		}
	}
	return out
}

func (o outcomes) sub(before outcomes) outcomes {
	out := outcomes{}
	for k, v := range o {
		if d := v - before[k]; d > 0 {
			out[k] = d
		}
	}
	return out
}

// compiled is the number of compiles that stored a catalog (new or
// unchanged).
func (o outcomes) compiled() int { return o[metrics.CompileOK] + o[metrics.CompileUnchanged] }

// runJobs takes n jobs from the queue and has the pool handle each (compile,
// store, move the pointer, ack), workers at a time, as Pool.Run's workers
// do. It fails when the queue has no job for receiveTimeout.
func runJobs(ctx context.Context, pool *compiler.Pool, q farm.Queue, n, workers int, p *progress) (time.Duration, error) {
	var (
		claimed, done atomic.Int64
		mu            sync.Mutex
		errs          []error
		wg            sync.WaitGroup
	)
	start := time.Now()
	stop := p.every(5*time.Second, func(el time.Duration) {
		p.printf("compiled %d of %d jobs (%.2f s per job)", done.Load(), n, el.Seconds()/float64(max(done.Load(), 1)))
	})
	defer stop()
	for range max(workers, 1) {
		wg.Go(func() {
			for claimed.Add(1) <= int64(n) {
				rctx, cancel := context.WithTimeout(ctx, receiveTimeout)
				d, err := q.Receive(rctx)
				cancel()
				if err != nil {
					if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
						err = fmt.Errorf("the queue had no job for %s after %d of %d", receiveTimeout, done.Load(), n)
					}
					mu.Lock()
					errs = append(errs, fmt.Errorf("receive a compile job: %w", err))
					mu.Unlock()
					return
				}
				pool.Handle(ctx, d)
				done.Add(1)
			}
		})
	}
	wg.Wait()
	return time.Since(start), errors.Join(errs...)
}

// warmUp has each of the engine's workers compile node 0 of fl with the
// environment's current code, outside the queue and the stores (the code
// library's checkout of the code_id aside, counted in r.lib). A worker's
// first compile of a code_id loads it, which takes seconds, more on a
// busy machine: the measured compiles should not include that, nor
// outlast compiler.Pool.Handle's 30 seconds for finishing a delivery,
// which run from the start of the compile (a delivery it cannot ack comes
// back after the queue's visibility timeout, in some later sample).
func warmUp(ctx context.Context, r *rig, fl *fleet, environment string, workers int) error {
	env, err := r.b.envs.GetEnvironment(ctx, environment)
	if err != nil {
		return fmt.Errorf("warm up: read environment %s: %w", environment, err)
	}
	path, err := r.worker.Code.EnvironmentPath(ctx, env.CodeID)
	if err != nil {
		return fmt.Errorf("warm up: check out code %s: %w", env.CodeID, err)
	}
	d, err := facts.Decode(fl.certname(0), fl.doc(0, 0))
	if err != nil {
		return fmt.Errorf("warm up: %w", err)
	}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for range max(workers, 1) {
		wg.Go(func() {
			_, err := r.engine.Compile(ctx, compiler.Request{
				Certname: fl.certname(0), Environment: environment, CodeID: env.CodeID, EnvironmentPath: path, Facts: d.Values,
			})
			if err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("warm up: compile %s with %s's code: %w", fl.certname(0), environment, err)
	}
	return nil
}

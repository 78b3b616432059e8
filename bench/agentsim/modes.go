package main

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"
)

// sleepUntil waits until t; false when ctx ends first.
func sleepUntil(ctx context.Context, t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err() == nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-timer.C:
		return true
	}
}

// runOne runs agent a, scheduled for at, in a --concurrency slot it
// already holds, and records the run in rs.
func (s *sim) runOne(ctx context.Context, rs *roundStats, a *agent, at time.Time) *runRecord {
	rs.running.Add(1)
	rec := s.runAgent(ctx, a, rs)
	rec.lag = max(rec.start.Sub(at), 0)
	rs.running.Add(-1)
	rs.done.Add(1)
	rs.add(rec)
	return rec
}

// herd runs every agent once, their start times spread evenly over window
// in a random order, at most --concurrency at once (a run that finds no
// free slot starts late: see Round.MaxStartLagSeconds).
func (s *sim) herd(ctx context.Context, rs *roundStats, window time.Duration) {
	order := rand.Perm(len(s.agents))
	sem := make(chan struct{}, s.cfg.concurrency)
	var wg sync.WaitGroup
	start := time.Now()
	for k, i := range order {
		at := start.Add(time.Duration(int64(window) * int64(k) / int64(len(order))))
		if !sleepUntil(ctx, at) {
			break
		}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			s.runOne(ctx, rs, s.agents[i], at)
		}()
	}
	wg.Wait()
}

// steady runs the agents as puppet agent daemons do for duration: each
// waits a random splay (uniform in [0, splay), Puppet's splay before its
// first run), then runs every runinterval, the next run runinterval after
// the start of the last one (at once when that is past). Runs start only
// within duration; those under way at its end finish. At most
// --concurrency runs at once.
func (s *sim) steady(ctx context.Context, rs *roundStats, duration, splay time.Duration) {
	sem := make(chan struct{}, s.cfg.concurrency)
	start := time.Now()
	end := start.Add(duration)
	maxRuns := int(duration/s.cfg.runinterval) + 2 // bounds each agent's loop
	var wg sync.WaitGroup
	for _, a := range s.agents {
		next := start
		if splay > 0 {
			next = start.Add(rand.N(splay))
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; n < maxRuns && next.Before(end); n++ {
				if !sleepUntil(ctx, next) {
					return
				}
				select {
				case sem <- struct{}{}:
				case <-ctx.Done():
					return
				}
				rec := s.runOne(ctx, rs, a, next)
				<-sem
				next = rec.start.Add(s.cfg.runinterval)
			}
		}()
	}
	wg.Wait()
}

package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/compilefarm/compilefarm/pkg/farm"
	"github.com/compilefarm/compilefarm/pkg/intake"
)

// FactChange is one fact change timed to the dependent node's recompile:
// node A's pdbbench_value changes; node B's catalog holds the value
// PuppetDB has for it (puppetdb_query in site.pp). Times are seconds
// from the start of A's fact upload.
type FactChange struct {
	Upload      float64 `json:"upload"`          // A's PUT /puppet/v3/facts answered (its replace facts is in the outbox)
	Delivered   float64 `json:"delivered"`       // PuppetDB accepted the command (the outbox's wait: compilefarm_puppetdb_delivery_seconds)
	InPuppetDB  float64 `json:"in_puppetdb"`     // PuppetDB answers the new value (polled every 50 ms)
	Queued      float64 `json:"queued"`          // the refresh round queued B's recompile (its request's time)
	CompileFrom float64 `json:"compile_started"` // B's compile started
	Compiled    float64 `json:"compiled"`        // B's new catalog is stored: the total
	Round       float64 `json:"round_seconds"`   // the refresh round's whole time
	RoundRuns   float64 `json:"round_runs"`      // queries that round ran
}

// factChange makes node B, which reads A's pdbbench_value through
// PuppetDB, and times o.factRounds changes of that value to B's
// recompile.
func (r *runner) factChange(ctx context.Context) error {
	nodes, err := r.fleet.enrol(ctx, []string{r.o.prefix + "-watcher." + domain})
	if err != nil {
		return err
	}
	watcher := nodes[0]
	watcher.extra["pdbbench_watch"] = r.watched.name
	if err := r.fleet.uploadAll(ctx, nodes); err != nil {
		return err
	}
	if _, err := r.settle(ctx); err != nil {
		return err
	}
	for i := range r.o.factRounds {
		fc, err := r.changeOnce(ctx, watcher, strconv.Itoa(i+1))
		if err != nil {
			return fmt.Errorf("change %d: %w", i+1, err)
		}
		r.progress(fmt.Sprintf("fact change %d: B recompiled %.2fs after A's upload (delivered %.2fs, queued %.2fs, compile %.2fs)",
			i+1, fc.Compiled, fc.Delivered, fc.Queued, fc.Compiled-fc.CompileFrom))
		r.res.FactChanges = append(r.res.FactChanges, fc)
	}
	return nil
}

// changeOnce sets A's pdbbench_value to value and follows it to B's
// recompile.
func (r *runner) changeOnce(ctx context.Context, watcher *node, value string) (FactChange, error) {
	var fc FactChange
	ex, err := r.admin.Explain(ctx, watcher.name)
	if err != nil {
		return fc, err
	}
	var seq uint64
	if ex.Request != nil {
		seq = ex.Request.Seq
	}
	before, err := r.b.scrape(ctx)
	if err != nil {
		return fc, err
	}
	r.watched.extra["pdbbench_value"] = value
	t0 := time.Now()
	since := func(t time.Time) float64 { return t.Sub(t0).Seconds() }
	if err := r.fleet.upload(ctx, r.watched); err != nil {
		return fc, err
	}
	fc.Upload = since(time.Now())
	// Delivered: the outbox's wait, from the delivery histogram once the
	// command is counted.
	err = r.waitFor(ctx, "A's replace facts to be delivered", time.Minute, 50*time.Millisecond, func() (bool, string, error) {
		s, err := r.b.scrape(ctx)
		if err != nil {
			return false, "", err
		}
		if command(s, "replace_facts", "delivered") <= command(before, "replace_facts", "delivered") {
			return false, fmt.Sprintf("%.0f commands in the outbox", s[mBacklog]), nil
		}
		if n := s[mDeliveryN] - before[mDeliveryN]; n > 0 {
			// Only A's command is in flight in this quiet farm.
			fc.Delivered = fc.Upload + (s[mDeliverySum]-before[mDeliverySum])/n
		}
		fc.Delivered = min(fc.Delivered, since(time.Now()))
		return true, "", nil
	})
	if err != nil {
		return fc, err
	}
	err = r.waitFor(ctx, "PuppetDB to answer A's new value", time.Minute, 50*time.Millisecond, func() (bool, string, error) {
		v, err := r.pdb.factValue(ctx, r.watched.name, "pdbbench_value")
		return v == value, fmt.Sprintf("PuppetDB has %q", v), err
	})
	if err != nil {
		return fc, err
	}
	fc.InPuppetDB = since(time.Now())
	// B's recompile: queued by the round (its request names the query),
	// then compiled.
	err = r.waitFor(ctx, "B's recompile", 3*time.Minute, 100*time.Millisecond, func() (bool, string, error) {
		ex, err := r.admin.Explain(ctx, watcher.name)
		if err != nil {
			return false, "", err
		}
		rq := ex.Request
		if rq == nil || rq.Seq <= seq {
			return false, "no new compile request", nil
		}
		if rq.Reason != farm.ReasonQuery {
			return false, "", fmt.Errorf("B's compile was requested for %q, not a PuppetDB query's answer", rq.Reason)
		}
		fc.Queued = since(rq.At)
		switch ex.State {
		case intake.RequestCompiled:
			return true, "", nil
		case intake.RequestPending:
			return false, "compile pending", nil
		}
		return false, "", fmt.Errorf("B's recompile ended %s: %s", ex.State, ex.Error)
	})
	if err != nil {
		return fc, err
	}
	st, err := r.compileStatus(ctx, watcher.name)
	if err != nil {
		return fc, err
	}
	fc.Compiled = since(st.At)
	fc.CompileFrom = since(st.At.Add(-st.Duration))
	// The round that queued B has finished by now or soon.
	err = r.waitFor(ctx, "the refresh round to finish", time.Minute, 100*time.Millisecond, func() (bool, string, error) {
		s, err := r.b.scrape(ctx)
		if err != nil {
			return false, "", err
		}
		if s[mRoundsCount] <= before[mRoundsCount] {
			return false, "round under way", nil
		}
		rd := roundBetween(before, s)
		fc.Round, fc.RoundRuns = rd.Seconds, rd.Runs
		return true, "", nil
	})
	return fc, err
}

// errFound stops a node listing once the node is found.
var errFound = errors.New("found")

// compileStatus is the latest compile of node (the operator API's node
// record).
func (r *runner) compileStatus(ctx context.Context, name string) (farm.CompileStatus, error) {
	var st *farm.CompileStatus
	err := r.admin.EachNode(ctx, environment, func(n farm.Node) error {
		if n.Certname != name {
			return nil
		}
		st = n.Compile
		return errFound
	})
	if err != nil && !errors.Is(err, errFound) {
		return farm.CompileStatus{}, err
	}
	if st == nil {
		return farm.CompileStatus{}, fmt.Errorf("node %s has no compile", name)
	}
	return *st, nil
}

package main

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/compilefarm/compilefarm/bench/internal/agentcert"
	"github.com/compilefarm/compilefarm/bench/internal/agentwire"
)

// simulate enrols the agents and runs the rounds o asks for. It returns
// the results so far along with an error that stopped it.
func simulate(ctx context.Context, o options, progress func(string)) (*Results, error) {
	facts, err := newFactTemplate(agentwire.RecordedCatalogRequest)
	if err != nil {
		return nil, err
	}
	report, err := newReportTemplate(recordedReport)
	if err != nil {
		return nil, err
	}
	res := &Results{Target: o.target, Environment: o.sim.env, Started: time.Now().UTC(), Agents: o.agents, Key: o.key,
		NodeRequest: o.sim.nodeRequest, Locales: o.sim.locales, FileMetadata: o.fileMetadata}
	farm, err := agentcert.FetchCA(ctx, o.target)
	if err != nil {
		return nil, err
	}
	agents, err := enrol(ctx, farm, o, &res.Enrol, progress)
	if err != nil {
		return res, err
	}
	s := &sim{cfg: o.sim, farm: farm, agents: agents, facts: facts, report: report,
		pluginsync: pluginsyncPaths(o.sim.env, o.sim.locales)}
	if o.state != "" {
		// The agents go on numbering their runs where the last invocation
		// with this --state left off (see runsFile).
		if s.firstRun, err = loadNextRun(o.state); err != nil {
			return res, err
		}
	}
	res.FirstRun = s.firstRun
	m := &monitor{metricsURL: o.metricsURL, brokerPID: o.brokerPID, progress: progress, every: o.progressEvery}

	round := func(name string, fill func(r *Round), expected int, fn func(rs *roundStats)) {
		r := Round{Name: name, Agents: len(agents), Concurrency: o.sim.concurrency, RunintervalSeconds: o.sim.runinterval.Seconds()}
		fill(&r)
		progress(fmt.Sprintf("%s: starting", r.describeShort()))
		m.measure(ctx, &r, expected, fn)
		progress(r.describe())
		res.Rounds = append(res.Rounds, r)
		if o.state != "" {
			if err := saveNextRun(o.state, s.nextRun()); err != nil {
				progress(err.Error())
			}
		}
	}
	if o.warmup {
		round("warm-up", func(*Round) {}, len(agents), func(rs *roundStats) { s.herd(ctx, rs, 0) })
	}
	switch o.mode {
	case "herd":
		for i := 1; i <= o.rounds && ctx.Err() == nil; i++ {
			name := "herd"
			if o.rounds > 1 {
				name = fmt.Sprintf("herd %d", i)
			}
			round(name, func(r *Round) { r.WindowSeconds = o.window.Seconds() }, len(agents),
				func(rs *roundStats) { s.herd(ctx, rs, o.window) })
		}
	case "steady":
		round("steady", func(r *Round) { r.DurationSeconds, r.SplaySeconds = o.duration.Seconds(), o.splay.Seconds() }, 0,
			func(rs *roundStats) { s.steady(ctx, rs, o.duration, o.splay) })
	}
	return res, ctx.Err()
}

// enrol gives every agent its certificate: from --state when it holds one
// for this CA, else through the CA (CSR, autosign), with progress lines.
func enrol(ctx context.Context, farm *agentcert.Farm, o options, st *Enrol, progress func(string)) ([]*agent, error) {
	names := make([]string, o.agents)
	for i := range names {
		names[i] = fmt.Sprintf("%s-%05d.%s", o.prefix, i, o.domain)
	}
	opts := agentcert.EnrolOptions{KeyType: o.key, Parallel: o.enrolParallel}
	if o.state != "" {
		store, err := agentcert.OpenStore(o.state)
		if err != nil {
			return nil, err
		}
		opts.Store = store
	}
	var fresh, reused atomic.Int64
	opts.Progress = func(fromStore bool) {
		if fromStore {
			reused.Add(1)
		} else {
			fresh.Add(1)
		}
	}
	progress(fmt.Sprintf("enrolling %d agents (%s keys) at %s", len(names), o.key, o.target))
	start := time.Now()
	done := make(chan struct{})
	go func() {
		tick := time.NewTicker(2 * time.Second)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				n, r := fresh.Load(), reused.Load()
				progress(fmt.Sprintf("enrolled %d/%d (%d new, %d from --state), %.0f new/s", n+r, len(names), n, r,
					float64(n)/time.Since(start).Seconds()))
			}
		}
	}()
	ids, err := farm.EnrolAll(ctx, names, opts)
	close(done)
	st.Seconds, st.New, st.Reused = round2(time.Since(start).Seconds()), fresh.Load(), reused.Load()
	if err != nil {
		return nil, fmt.Errorf("enrol (a name the CA signed before needs its --state, or another --prefix): %w", firstLines(err, 3))
	}
	progress(fmt.Sprintf("enrolled %d agents in %.1fs (%d new, %d from --state)", len(ids), st.Seconds, st.New, st.Reused))
	agents := make([]*agent, len(ids))
	for i, id := range ids {
		agents[i] = &agent{name: id.Name, cert: id.Cert, rename: agentwire.Renamer(id.Name)}
	}
	return agents, nil
}

// firstLines shortens a joined error of thousands of lines.
func firstLines(err error, n int) error {
	lines := strings.Split(err.Error(), "\n")
	if len(lines) <= n {
		return err
	}
	return fmt.Errorf("%s\n... and %d more", strings.Join(lines[:n], "\n"), len(lines)-n)
}

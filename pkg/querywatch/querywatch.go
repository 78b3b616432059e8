// Package querywatch keeps catalogs in step with the PuppetDB queries
// their compiles made: it runs each distinct recorded query again, once
// however many nodes made it, every interval and soon after the farm sent
// PuppetDB commands, and has the intake recompile the nodes whose
// recorded result differs from PuppetDB's answer now.
//
// The queries and what was last learnt of each are in a farm.QueryStore
// (the compile pool records them). A round pages through them and takes
// up each that is due: its CheckedAt (the start of the round that last
// took it up, by any refresher) is before the round's since time (an
// interval, less a tenth, before the round; or the latest Trigger), or it
// is due a recheck. Taking a query up is a SetQueryState of its CheckedAt
// over the version read, so of several refreshers sharing a store (fleet
// tasks) one runs it. Its answer's digest (farm.QueryResultDigest) is
// compared with the stored Result; when they differ, the intake queues the
// nodes whose catalog recorded another result (intake.RecompileQueriers),
// and the new Result is stored. A compile that ran the query before the
// change but moved its node's pointer after those nodes were paged would
// keep the old result unseen, so a change also sets Recheck: the nodes are
// checked once more, Settle after the change, when every such compile has
// ended. A query PuppetDB refuses or that fails is logged with the query;
// its stored result stays, and it is run again next round.
//
// A round costs one ListQueries per page, and per query taken up one
// write (its CheckedAt) and one PuppetDB query per distinct query (a query
// made in several environments is run once); a changed result adds the
// pages of the nodes that made it and one more write.
//
// Hence, while a refresher runs and PuppetDB answers, a catalog is served
// from a result PuppetDB no longer gives for at most an interval (until
// the next round) plus one compile; in the race above, until Settle after
// the change plus one compile.
package querywatch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/compilefarm/compilefarm/pkg/digestcache"
	"github.com/compilefarm/compilefarm/pkg/farm"
	"github.com/compilefarm/compilefarm/pkg/intake"
	"github.com/compilefarm/compilefarm/pkg/metrics"
)

// Defaults of a Refresher's settings.
const (
	DefaultInterval     = 5 * time.Minute
	DefaultDebounce     = 10 * time.Second
	DefaultSettle       = 3 * time.Minute
	DefaultQueryTimeout = time.Minute
)

// PuppetDB runs queries (pkg/puppetdb.Client).
type PuppetDB interface {
	// Query runs a query (PQL, or an AST as JSON) and returns PuppetDB's
	// answer, a JSON array.
	Query(ctx context.Context, query string) ([]byte, error)
}

// Store is the part of farm.QueryStore a refresher reads and writes.
type Store interface {
	ListQueries(ctx context.Context, l farm.QueryList) (farm.QueryPage, error)
	SetQueryState(ctx context.Context, st farm.QueryState) (farm.QueryState, error)
}

// Content holds the query texts, in farm.SpaceCatalogs by QueryDigest
// (farm.ContentStore.Get).
type Content interface {
	Get(ctx context.Context, space farm.Space, d farm.Digest) ([]byte, error)
}

// Intake queues the nodes whose recorded result of a query differs
// (intake.Intake).
type Intake interface {
	RecompileQueriers(ctx context.Context, c intake.QueryChange) (intake.QueriersResult, error)
}

// Refresher runs the recorded PuppetDB queries again (see the package
// doc). Make one with New; set the optional fields before Run.
type Refresher struct {
	PuppetDB PuppetDB
	Queries  Store
	Content  Content
	Intake   Intake
	// Interval is how often every query is run again
	// (--puppetdb-query-refresh); DefaultInterval when 0.
	Interval time.Duration
	// Debounce is how long after a Trigger the round starts, so that a
	// burst of commands makes one round; DefaultDebounce when 0.
	Debounce time.Duration
	// Settle is how long after a change the nodes are checked again: more
	// than a compile can take; DefaultSettle when 0.
	Settle time.Duration
	// QueryTimeout bounds one query; DefaultQueryTimeout when 0.
	QueryTimeout time.Duration
	Metrics      *metrics.QueryRefresh // nil: none
	Log          *slog.Logger          // slog.Default() when nil
	Now          func() time.Time

	trigger chan struct{}
	texts   digestcache.Cache[string] // query texts by QueryDigest
	running sync.Mutex                // one round at a time
}

// New returns a refresher that runs the queries recorded in queries
// (their texts in content) against pdb, and has in recompile the nodes.
func New(pdb PuppetDB, queries Store, content Content, in Intake) *Refresher {
	return &Refresher{PuppetDB: pdb, Queries: queries, Content: content, Intake: in, trigger: make(chan struct{}, 1)}
}

func (r *Refresher) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

func (r *Refresher) log() *slog.Logger {
	if r.Log != nil {
		return r.Log
	}
	return slog.Default()
}

func orDefault(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// Trigger asks for a round soon (Debounce after the first of a burst of
// calls): the farm has sent PuppetDB commands that may change results.
// It never blocks.
func (r *Refresher) Trigger() {
	select {
	case r.trigger <- struct{}{}:
	default: // one is pending already
	}
}

// Run runs a round at once, then one every Interval and one Debounce after
// Trigger, until ctx ends.
func (r *Refresher) Run(ctx context.Context) {
	interval, debounce := orDefault(r.Interval, DefaultInterval), orDefault(r.Debounce, DefaultDebounce)
	r.periodic(ctx)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	var (
		soon      <-chan time.Time // the debounce timer, when a Trigger waits
		triggered time.Time        // the latest Trigger's time
	)
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			r.periodic(ctx)
		case <-r.trigger:
			triggered = r.now()
			if soon == nil {
				soon = time.After(debounce)
			}
		case <-soon:
			soon = nil
			if _, err := r.Round(ctx, triggered); err != nil && ctx.Err() == nil {
				r.log().Error("PuppetDB query refresh after commands", "err", err)
			}
		}
	}
}

// periodic runs the round of the interval.
func (r *Refresher) periodic(ctx context.Context) {
	interval := orDefault(r.Interval, DefaultInterval)
	if _, err := r.Round(ctx, r.now().Add(-interval+interval/10)); err != nil && ctx.Err() == nil {
		r.log().Error("PuppetDB query refresh", "err", err)
	}
}

// RoundResult counts what a round did.
type RoundResult struct {
	Queries int // queries recorded (per environment)
	Due     int // of them, those this round took up
	Runs    int // PuppetDB queries run: each distinct query of Due once
	Changed int // taken-up queries whose answer differed from the stored one
	Failed  int // taken-up queries that PuppetDB refused or failed, or whose text was missing
	Queued  int // nodes queued
}

// Round takes up every recorded query whose CheckedAt (the start of the
// round that last took it up) is before since, and each due a recheck, as
// the package doc says. It returns an error
// only when the queries cannot be listed; a query that fails is logged and
// counted.
func (r *Refresher) Round(ctx context.Context, since time.Time) (RoundResult, error) {
	r.running.Lock()
	defer r.running.Unlock()
	start := r.now()
	var res RoundResult
	answers := map[farm.Digest]answer{} // this round's, by QueryDigest
	l := farm.QueryList{Limit: farm.DefaultQueryPage}
	for {
		page, err := r.Queries.ListQueries(ctx, l)
		if err != nil {
			return res, fmt.Errorf("list PuppetDB queries: %w", err)
		}
		for _, st := range page.Queries {
			if ctx.Err() != nil {
				return res, ctx.Err()
			}
			res.Queries++
			r.refresh(ctx, st, start, since, answers, &res)
			if res.Queries%1000 == 0 {
				r.log().Info("PuppetDB query refresh in progress", "queries", res.Queries, "runs", res.Runs,
					"changed", res.Changed, "nodes_queued", res.Queued)
			}
		}
		if page.Next == "" {
			break
		}
		l.After = page.Next
	}
	took := r.now().Sub(start)
	r.Metrics.Round(res.Queries, res.Runs, took)
	r.log().Info("PuppetDB query refresh", "queries", res.Queries, "due", res.Due, "runs", res.Runs,
		"changed", res.Changed, "failed", res.Failed, "nodes_queued", res.Queued, "duration", took.Round(time.Millisecond))
	return res, nil
}

// answer is what PuppetDB answered a query in this round.
type answer struct {
	result farm.Digest
	err    error
}

// refresh takes st up in the round that started at start if it is due
// (see Round) and acts on its answer.
func (r *Refresher) refresh(ctx context.Context, st farm.QueryState, start, since time.Time, answers map[farm.Digest]answer, res *RoundResult) {
	now := r.now()
	recheck := st.Recheck && now.Sub(st.ChangedAt) >= orDefault(r.Settle, DefaultSettle)
	if !st.CheckedAt.Before(since) && !recheck {
		return
	}
	log := r.log().With("environment", st.Environment, "query_digest", st.Query)
	claim := st
	// The round's start, not now: the next round finds it due however
	// far into this round it was reached.
	claim.CheckedAt = start
	taken, err := r.Queries.SetQueryState(ctx, claim)
	if errors.Is(err, farm.ErrConflict) || errors.Is(err, farm.ErrNotFound) {
		return // another refresher took it up
	}
	if err != nil {
		log.Error("take up a PuppetDB query", "err", err)
		return
	}
	res.Due++
	text, err := r.text(ctx, st.Query)
	if err != nil {
		res.Failed++
		r.Metrics.Ran(metrics.QueryFailed)
		log.Error("read a PuppetDB query's text", "err", err)
		return
	}
	log = log.With("query", cut(text, maxLogQuery))
	a, ok := answers[st.Query]
	if !ok {
		a = r.run(ctx, text)
		answers[st.Query] = a
		res.Runs++
	}
	if a.err != nil {
		res.Failed++
		r.Metrics.Ran(metrics.QueryFailed)
		log.Warn("PuppetDB query failed; its last result stands and it is run again next round", "err", a.err)
		return
	}
	changed := a.result != st.Result
	if changed {
		res.Changed++
		r.Metrics.Ran(metrics.QueryChanged)
	} else {
		r.Metrics.Ran(metrics.QueryUnchanged)
		if !recheck {
			return
		}
	}
	c := intake.QueryChange{Environment: st.Environment, Query: st.Query, Text: text, Result: a.result, Since: st.ChangedAt}
	if changed {
		c.Since = now
	}
	qr, err := r.Intake.RecompileQueriers(ctx, c)
	res.Queued += qr.Queued
	r.Metrics.Queued(qr.Queued)
	if err != nil {
		log.Error("recompile the nodes of a changed PuppetDB query; tried again next round", "err", err, "nodes_queued", qr.Queued)
		return
	}
	next := taken
	next.Result = a.result
	if changed {
		next.ChangedAt, next.Recheck = now, true
	} else {
		next.Recheck = false
	}
	if _, err := r.Queries.SetQueryState(ctx, next); err != nil {
		log.Error("store a PuppetDB query's result; its nodes are checked again next round", "err", err)
		return
	}
	switch {
	case (changed && st.Result != "") || qr.Queued > 0:
		log.Info("PuppetDB query answers otherwise: the nodes that made it were checked", "recheck", !changed,
			"old", st.Result, "new", a.result, "nodes", qr.Nodes, "nodes_queued", qr.Queued)
	case changed:
		log.Debug("PuppetDB query's first result", "result", a.result, "nodes", qr.Nodes)
	}
}

// maxLogQuery bounds the query text in a log line.
const maxLogQuery = 300

// text returns the query of QueryDigest d as PuppetDB takes it
// (farm.QueryText of the text in the content store).
func (r *Refresher) text(ctx context.Context, d farm.Digest) (string, error) {
	if s, ok := r.texts.Load(d); ok {
		return s, nil
	}
	b, err := r.Content.Get(ctx, farm.SpaceCatalogs, d)
	if err != nil {
		return "", fmt.Errorf("read query %s: %w", d, err)
	}
	s := farm.QueryText(b)
	r.texts.Store(d, s)
	return s, nil
}

// run asks PuppetDB query (PQL or an AST's JSON).
func (r *Refresher) run(ctx context.Context, query string) answer {
	ctx, cancel := context.WithTimeout(ctx, orDefault(r.QueryTimeout, DefaultQueryTimeout))
	defer cancel()
	body, err := r.PuppetDB.Query(ctx, query)
	if err != nil {
		return answer{err: err}
	}
	return answer{result: farm.QueryResultDigest(body)}
}

// cut shortens s to at most max runes, marking the cut with "...".
func cut(s string, max int) string {
	r := []rune(s)
	if len(r) <= max {
		return s
	}
	return string(r[:max-3]) + "..."
}

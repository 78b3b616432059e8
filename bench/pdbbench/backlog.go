package main

import (
	"context"
	"fmt"
	"time"

	"github.com/compilefarm/compilefarm/bench/internal/latency"
)

// Backlog is the delivery of a backlog of commands into PuppetDB: built
// while the gate held the farm's traffic to PuppetDB, then released.
type Backlog struct {
	Runs        int64   `json:"runs"`         // agent runs while held
	HeldSeconds float64 `json:"held_seconds"` // how long the gate held
	Commands    float64 `json:"commands"`     // the outbox's backlog at the release
	// Delivered are the commands PuppetDB accepted from the release until
	// the backlog was 0, by command, and how long that took.
	Delivered      map[string]float64 `json:"delivered"`
	DeliverSeconds float64            `json:"deliver_seconds"`
	Retried        float64            `json:"retried"`
	Refused        float64            `json:"refused"`
	BrokerCPU      float64            `json:"broker_cpu_seconds"` // the broker's CPU over the delivery (compiles are in workers)
	RefreshRounds  float64            `json:"refresh_rounds"`     // rounds that finished meanwhile
	// Answers are PuppetDB's answer times to the farm's requests during
	// the delivery, at the gate: a request's first bytes to its answer's
	// (ms).
	Answers latency.Summary `json:"answer_ms"`
	// PuppetDBProcessed is the commands PuppetDB's queue processed from
	// the release until it held every report; PuppetDBProcessing* its own
	// time to process a command (its command-processing metrics, over
	// its recent commands; ms).
	PuppetDBProcessed      float64  `json:"puppetdb_processed"`
	PuppetDBProcessingP50  float64  `json:"puppetdb_processing_p50_ms"`
	PuppetDBProcessingMean float64  `json:"puppetdb_processing_mean_ms"`
	Reports                int      `json:"reports"`          // reports of the agents PuppetDB held at the end
	ReportsExpected        float64  `json:"reports_expected"` // every store report the farm queued for them
	StoredSeconds          float64  `json:"stored_seconds"`   // from the release until PuppetDB held them all
	Errors                 []string `json:"errors,omitempty"`
}

// PerSecond is the commands delivered per second.
func (b *Backlog) PerSecond() float64 {
	var n float64
	for _, v := range b.Delivered {
		n += v
	}
	if b.DeliverSeconds <= 0 {
		return 0
	}
	return n / b.DeliverSeconds
}

// backlog holds the farm's traffic to PuppetDB at the gate, runs
// o.backlogRounds herds (their commands wait in the outbox), releases it,
// and times the outbox to empty, then PuppetDB to hold every report.
func (r *runner) backlog(ctx context.Context) error {
	bl := &Backlog{}
	r.res.Backlog = bl
	// No refresh round may be due while held: its queries would stall.
	if err := r.waitQuiet(ctx); err != nil {
		return err
	}
	before, err := r.b.scrape(ctx)
	if err != nil {
		return err
	}
	r.gate.Hold()
	held := time.Now()
	released := false
	release := func() {
		if !released {
			r.gate.Release()
			released = true
		}
	}
	defer release()
	r.progress(fmt.Sprintf("backlog: PuppetDB held at the gate; %d herds of %d agents within %s each", r.o.backlogRounds, r.o.agents, r.o.backlogWindow))
	h, err := r.herd.run(ctx, r.b, "backlog", r.o.backlogRounds, r.o.backlogWindow, r.o.concurrency)
	bl.Runs, bl.Errors = h.Runs, h.Errors
	if err != nil {
		return err
	}
	atRelease, err := r.b.scrape(ctx)
	if err != nil {
		return err
	}
	bl.Commands = atRelease[mBacklog]
	processed, _ := r.pdb.processed(ctx)
	cpu := r.brokerCPU()
	r.gate.ResetAnswers()
	release()
	start := time.Now()
	bl.HeldSeconds = start.Sub(held).Seconds()
	r.progress(fmt.Sprintf("backlog: %.0f commands in the outbox after %d runs (held %.0fs); released", bl.Commands, bl.Runs, bl.HeldSeconds))
	err = r.waitFor(ctx, "the outbox to empty", r.o.phaseTimeout, 100*time.Millisecond, func() (bool, string, error) {
		s, err := r.b.scrape(ctx)
		if err != nil {
			return false, "", err
		}
		if s[mBacklog] > 0 {
			return false, fmt.Sprintf("%.0f commands left", s[mBacklog]), nil
		}
		bl.DeliverSeconds = time.Since(start).Seconds()
		bl.BrokerCPU = r.brokerCPU() - cpu
		// Since the hold: what was delivered, and the deliveries tried
		// again (while held, the drainer's first ones, had they timed
		// out; none should have).
		bl.Delivered = commandsBetween(before, s, "delivered")
		bl.Retried = allCommands(s, "retried") - allCommands(before, "retried")
		bl.Refused = allCommands(s, "refused") - allCommands(before, "refused")
		bl.RefreshRounds = s[mRoundsCount] - atRelease[mRoundsCount]
		bl.ReportsExpected = command(s, "store_report", "queued")
		return true, "", nil
	})
	if err != nil {
		return err
	}
	bl.Answers = latency.Summarize(r.gate.Answers())
	r.progress(fmt.Sprintf("backlog: delivered in %.1fs (%.0f commands/s); waiting for PuppetDB to store them", bl.DeliverSeconds, bl.PerSecond()))
	// Every store report the farm queued came from the agents; PuppetDB
	// stores a command some time after it accepts it.
	agents := fmt.Sprintf("reports[count()] { certname ~ '^%s-[0-9]' }", r.o.prefix)
	err = r.waitFor(ctx, "PuppetDB to store every report", r.o.phaseTimeout, 250*time.Millisecond, func() (bool, string, error) {
		n, err := r.pdb.count(ctx, agents)
		if err != nil {
			return false, "", err
		}
		bl.Reports = n
		bl.StoredSeconds = time.Since(start).Seconds()
		return float64(n) >= bl.ReportsExpected, fmt.Sprintf("%d of %.0f reports", n, bl.ReportsExpected), nil
	})
	if err != nil {
		return err
	}
	if after, err := r.pdb.processed(ctx); err == nil && processed.Count > 0 {
		bl.PuppetDBProcessed = after.Count - processed.Count
		bl.PuppetDBProcessingP50, bl.PuppetDBProcessingMean = after.P50, after.Mean
	}
	return nil
}

// Package scaling decides the MaximumConcurrency of a compile lane's SQS
// event source mapping from the age of the lane's oldest message
// (ApproximateAgeOfOldestMessage): up in steps while jobs wait too long,
// down one step after the age has stayed low for a while, never outside the
// lane's bounds and never twice within a cool-down. It is the pure decision
// (Decide) and a model of the farm that replays a code deploy against it
// (Simulate); functions/scaler reads the metric and the mapping and applies
// the decision.
//
// Why the age of the oldest message, not the queue's length: it is what an
// agent waiting for its catalog feels, it means the same for a lane of 100
// nodes and one of 100,000, and SQS publishes it per queue at no cost.
//
// What the age does not tell: while a flood drains in order, the age grows
// by one second per second whatever the concurrency (the oldest job waits
// until its turn), so a high age says "behind", not "how far behind". The
// decision therefore scales up by one step per High of age (the longer the
// lane has been behind, the bigger the step: in the simulated 100,000-job
// deploy the bulk lane goes from 2 to 200 in 12 minutes, where one step of
// 10 per cool-down would take 40), at most doubling the cap per change (a
// change shows in the metric only minutes later, so a doubling overshoots
// at most twofold), and not at all while the age is falling (the capacity
// already added is catching up). A poison message that SQS delivers again
// after each visibility timeout keeps the age high with nothing else to
// do; the lane's max bounds what that costs, and the dead-letter queue
// ends it.
//
// Scaling down frees concurrency for the other lane and the rest of the
// account, and protects the stores from a cap nobody needs; an idle cap
// costs nothing, so the decision is slow to lower it and never does so on
// missing data.
package scaling

import (
	"errors"
	"fmt"
	"slices"
	"time"
)

// AWS's bounds of an SQS event source mapping's
// ScalingConfig.MaximumConcurrency.
const (
	MinConcurrency = 2
	MaxConcurrency = 1000
)

// Sample is one datapoint of ApproximateAgeOfOldestMessage: the period's
// start (as CloudWatch stamps it) and the age (its Maximum statistic).
type Sample struct {
	Time time.Time
	Age  time.Duration
}

// Config is how one lane scales. Zero durations take the defaults of
// WithDefaults.
type Config struct {
	Min, Max int // bounds of MaximumConcurrency, within [MinConcurrency, MaxConcurrency]
	Step     int // concurrency added or removed by one step, ≥ 1

	// High: scale up when the newest age is at or above it and not
	// falling. Low: scale down when every age of the last LowFor is at or
	// below it. Low < High: the gap between them is the hysteresis that
	// keeps an age near one threshold from moving the cap up and down.
	High, Low time.Duration
	LowFor    time.Duration

	// Cooldown: no change within this long of the last one (the mapping's
	// LastModified), so a change shows in the metric before the next.
	Cooldown time.Duration

	// Period is the metric's period (1 minute); Stale is how old the newest
	// datapoint may be before the decision holds for lack of data.
	Period, Stale time.Duration
}

// Defaults of the thresholds, by lane. The urgent lane serves agents that
// wait for their catalog: 30 s is already long. The bulk lane serves a code
// deploy's recompiles: agents keep their last catalog meanwhile, so it
// scales when jobs have waited 2 minutes.
var (
	UrgentDefaults = Config{High: 30 * time.Second, Low: 5 * time.Second}
	BulkDefaults   = Config{High: 2 * time.Minute, Low: 20 * time.Second}
)

// Defaults for every lane.
const (
	DefaultLowFor   = 10 * time.Minute
	DefaultCooldown = 2 * time.Minute
	DefaultPeriod   = time.Minute
	DefaultStale    = 5 * time.Minute
)

// WithDefaults returns c with its zero fields set: thresholds from
// UrgentDefaults for lane "urgent", from BulkDefaults otherwise, and the
// Default* constants.
func (c Config) WithDefaults(lane string) Config {
	d := BulkDefaults
	if lane == "urgent" {
		d = UrgentDefaults
	}
	set := func(v *time.Duration, def time.Duration) {
		if *v == 0 {
			*v = def
		}
	}
	set(&c.High, d.High)
	set(&c.Low, d.Low)
	set(&c.LowFor, DefaultLowFor)
	set(&c.Cooldown, DefaultCooldown)
	set(&c.Period, DefaultPeriod)
	set(&c.Stale, DefaultStale)
	return c
}

// Validate says what is wrong with c, all of it, or returns nil.
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if c.Min < MinConcurrency || c.Min > MaxConcurrency {
		bad("min %d is not between %d and %d (AWS's bounds of MaximumConcurrency)", c.Min, MinConcurrency, MaxConcurrency)
	}
	if c.Max < MinConcurrency || c.Max > MaxConcurrency {
		bad("max %d is not between %d and %d (AWS's bounds of MaximumConcurrency)", c.Max, MinConcurrency, MaxConcurrency)
	}
	if c.Min > c.Max {
		bad("min %d is above max %d", c.Min, c.Max)
	}
	if c.Step < 1 {
		bad("step %d is not positive", c.Step)
	}
	if c.Low < 0 || c.High <= 0 {
		bad("thresholds low %v and high %v must be ≥ 0 and > 0", c.Low, c.High)
	}
	if c.Low >= c.High {
		bad("low threshold %v is not below high threshold %v: no hysteresis", c.Low, c.High)
	}
	if c.LowFor < 0 || c.Cooldown < 0 {
		bad("low-for %v and cool-down %v must not be negative", c.LowFor, c.Cooldown)
	}
	if c.Period <= 0 || c.Stale <= 0 {
		bad("period %v and staleness %v must be positive", c.Period, c.Stale)
	}
	return errors.Join(errs...)
}

// State is what the scaler knows of a lane when it decides.
type State struct {
	// Current is the mapping's MaximumConcurrency; 0 when it has none (no
	// cap: Lambda's own limits apply).
	Current int
	// LastChange is when the mapping last changed (its LastModified).
	LastChange time.Time
	// Samples are the recent datapoints, in any order, gaps allowed.
	Samples []Sample
}

// Decision is the new MaximumConcurrency and why.
type Decision struct {
	From, To int
	// Age is the newest sample's age, or -1 when there was none.
	Age    time.Duration
	Reason string
}

// Changed reports whether the decision moves the cap.
func (d Decision) Changed() bool { return d.From != d.To }

// Decide returns the lane's MaximumConcurrency at now. c must be valid
// (Validate) with its defaults set. In order:
//   - a cap outside [Min, Max], or none, is brought to the nearest bound at
//     once, whatever the cool-down;
//   - within Cooldown of LastChange: hold;
//   - no datapoint within Stale of now: hold (missing data is no evidence
//     that the age is low, and an idle cap costs nothing);
//   - newest age ≥ High and not below the one before it: up by
//     Step × ⌊age/High⌋, but by no more than the current cap (at most
//     double) unless that is less than one Step, and at most to Max;
//   - every age of the last LowFor ≤ Low, with at least half of that
//     window's periods reported: down by one Step, at least to Min;
//   - otherwise hold.
func Decide(now time.Time, c Config, s State) Decision {
	d := Decision{From: s.Current, To: s.Current, Age: -1}
	samples := recent(s.Samples, now)
	if n := len(samples); n > 0 {
		d.Age = samples[n-1].Age
	}
	switch {
	case s.Current == 0:
		d.To, d.Reason = c.Max, fmt.Sprintf("no maximum concurrency set: capped at max %d", c.Max)
		return d
	case s.Current < c.Min:
		d.To, d.Reason = c.Min, fmt.Sprintf("%d is below min %d", s.Current, c.Min)
		return d
	case s.Current > c.Max:
		d.To, d.Reason = c.Max, fmt.Sprintf("%d is above max %d", s.Current, c.Max)
		return d
	}
	if since := now.Sub(s.LastChange); since < c.Cooldown {
		d.Reason = fmt.Sprintf("cool-down: last change %v ago, within %v", since.Round(time.Second), c.Cooldown)
		return d
	}
	n := len(samples)
	if n == 0 || now.Sub(samples[n-1].Time) > c.Stale {
		d.Reason = fmt.Sprintf("no datapoint in the last %v: hold", c.Stale)
		return d
	}
	newest := samples[n-1]
	if newest.Age >= c.High {
		if n > 1 && newest.Age < samples[n-2].Age {
			d.Reason = fmt.Sprintf("age %v ≥ high %v but falling from %v: the capacity added is catching up", newest.Age, c.High, samples[n-2].Age)
			return d
		}
		if s.Current >= c.Max {
			d.Reason = fmt.Sprintf("age %v ≥ high %v, already at max %d", newest.Age, c.High, c.Max)
			return d
		}
		steps := int(newest.Age / c.High)
		by := min(steps*c.Step, max(c.Step, s.Current))
		d.To = min(c.Max, s.Current+by)
		d.Reason = fmt.Sprintf("age %v ≥ high %v: up %d (%d step(s) of %d, at most double)", newest.Age, c.High, d.To-s.Current, steps, c.Step)
		return d
	}
	low, why := lowFor(samples, now, c)
	if !low {
		d.Reason = why
		return d
	}
	if s.Current <= c.Min {
		d.Reason = fmt.Sprintf("age ≤ low %v for %v, already at min %d", c.Low, c.LowFor, c.Min)
		return d
	}
	d.To = max(c.Min, s.Current-c.Step)
	d.Reason = fmt.Sprintf("age ≤ low %v for %v: down one step of %d", c.Low, c.LowFor, c.Step)
	return d
}

// recent returns the samples not after now, oldest first.
func recent(in []Sample, now time.Time) []Sample {
	out := make([]Sample, 0, len(in))
	for _, s := range in {
		if !s.Time.After(now) {
			out = append(out, s)
		}
	}
	slices.SortFunc(out, func(a, b Sample) int { return a.Time.Compare(b.Time) })
	return out
}

// lowFor reports whether the age has been at or below c.Low for c.LowFor
// before now, and if not, why.
func lowFor(samples []Sample, now time.Time, c Config) (bool, string) {
	from := now.Add(-c.LowFor)
	var window []Sample
	for _, s := range samples {
		if !s.Time.Before(from) {
			window = append(window, s)
		}
	}
	for _, s := range window {
		if s.Age > c.Low {
			return false, fmt.Sprintf("age %v between low %v and high %v within the last %v: hold", s.Age, c.Low, c.High, c.LowFor)
		}
	}
	periods := int(c.LowFor / c.Period)
	if len(window) == 0 || 2*len(window) < periods {
		return false, fmt.Sprintf("age ≤ low %v, but %d datapoint(s) of the last %v are too few to scale down: hold", c.Low, len(window), c.LowFor)
	}
	return true, ""
}

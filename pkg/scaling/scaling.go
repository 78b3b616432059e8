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
//
// A low age does not tell a busy lane from an idle one either: a lane
// whose cap just keeps up shows the age of one compile, as an idle lane
// does (with BatchSize 1 a job waits for no other job), until its cap is
// below the load and a backlog builds. So the way down also reads the
// messages in flight (ApproximateNumberOfMessagesNotVisible: received by
// the mapping's pollers and not yet deleted, at most cap × BatchSize) and
// never lowers the cap below what the busiest of the last LowFor needed,
// plus a margin (Decide says which).
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

// InFlightSample is one datapoint of ApproximateNumberOfMessagesNotVisible:
// the period's start and the messages in flight, received and not yet
// deleted (its Maximum statistic).
type InFlightSample struct {
	Time     time.Time
	Messages int
}

// Config is how one lane scales. Zero durations take the defaults of
// WithDefaults; Urgent and Bulk hold each lane's defaults.
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

// Lane is a compile lane's default settings: how the scaler steers the
// MaximumConcurrency of the lane's SQS event source mapping (Config, with
// every field set), and how that mapping batches jobs into invocations.
// The CDK stack (infra/farmstack) deploys exactly these (its context
// overrides only Config.Min and Config.Max), and the simulation
// (TestDeployWaveSimulation) runs with them; docs/benchmarks.md shows what
// they do to a 100,000-node deploy.
type Lane struct {
	Name   string
	Config Config
	// BatchSize is the mapping's BatchSize: jobs per invocation, at most.
	// The compile function runs one Ruby worker, so a batch's jobs compile
	// one after the other and a job is done (deleted) only when its whole
	// batch is.
	BatchSize int
	// BatchingWindow is the mapping's MaximumBatchingWindow: how long a
	// poller may wait for a batch to fill (0: invoke with what is there).
	BatchingWindow time.Duration
}

// Urgent is the urgent lane's defaults. The lane serves agents that wait
// for their catalog (first-compile-wait, 60 s by default), so:
//   - BatchSize 1, no BatchingWindow: a job neither waits for a batch to
//     fill nor queues behind other compiles in the same invocation, and
//     MaximumConcurrency is then the number of urgent compiles in flight.
//   - Min = Max = 50: the lane sits at its maximum and nothing steers it
//     (Decide holds a lane whose range is one value; the stack sets the
//     mapping's MaximumConcurrency to Max and gives the scaler the bulk
//     lane only). MaximumConcurrency is a cap, not a reservation: an idle
//     lane at 50 runs nothing and holds none of the account's
//     concurrency, and Lambda's own SQS scaling adds invocations as the
//     queue fills (DefaultModel.RampPerMinute), so a surge compiles
//     within seconds. Steered up from 2 by its age, as the stack did
//     before, the same surge first waited longer than an agent does
//     (TestUrgentSurgeSimulation). 50 is about nine times what a surge of
//     10% of the check-ins of 100,000 agents every 30 minutes needs (5.6
//     compiles a second); with Bulk's Max it takes 250 of a default
//     account's 1,000 concurrent executions. (A deploy's flood, which is
//     what classifiers and Hiera backends need protecting from, is the
//     bulk lane's, and the scaler keeps that cap low between deploys.)
//   - Step 2, High 30 s, Low 5 s: what a scaler given the lane with a
//     range would use (functions/scaler accepts one; the stack gives it
//     none): half an agent's wait is already too long; a lane that keeps
//     up shows the age of one compile, a few seconds. (With BatchSize 1
//     the age stays low until the cap is below the load; what keeps a
//     step down from being the one too many is the messages in flight,
//     see Decide.)
var Urgent = Lane{
	Name: "urgent",
	Config: Config{Min: 50, Max: 50, Step: 2, High: 30 * time.Second, Low: 5 * time.Second,
		LowFor: DefaultLowFor, Cooldown: DefaultCooldown, Period: DefaultPeriod, Stale: DefaultStale},
	BatchSize: 1, BatchingWindow: 0,
}

// Steered reports whether the scaler moves the lane's cap: whether its
// Min is below its Max.
func (l Lane) Steered() bool { return l.Config.Min < l.Config.Max }

// Bulk is the bulk lane's defaults. The lane serves a code deploy's
// recompiles and fact-change recompiles: agents keep their last catalog
// meanwhile, so jobs may wait minutes, but a deploy should be done well
// within the hour.
//   - BatchSize 2, BatchingWindow 10 s: half the invocations (and the
//     worker handoffs) of a deploy's burst, while two compiles still fit
//     the function's timeout (infra's EngineTimeout); a trickle of
//     recompiles waits at most 10 s for a partner. A flood fills every
//     batch at once, so the window costs it nothing.
//   - High 2 min: nobody waits for these jobs, so the lane scales up only
//     for a real backlog, not for a few recompiles arriving together. Low
//     20 s: a lane that keeps up (a job's compile plus up to the 10 s
//     window) shows an age well under it.
//   - Min 2; Max 200: a 100,000-node deploy with 1 s compiles drains in
//     about 20 minutes (TestDeployWaveSimulation), where the ramp from Min
//     (the metric shows the flood only minutes late, and Decide at most
//     doubles the cap per cool-down) rather than Max bounds the drain: a Max
//     of 500 or 1000 drains hardly faster (under a minute), 100 takes
//     about 30 % longer, 20 (the stack's former default) about an hour
//     and a half. 200 plus Urgent's 50 leave 750 of a default
//     account's 1,000 concurrent executions to everything else (and AWS
//     keeps at least 100 unreserved). The max is what a deploy may run
//     at once against what compiles call (an ENC, Hiera backends).
//   - Step 10: Decide's steps grow with the age (one per High of it, at
//     most doubling the cap), so the step mostly sets the first increase
//     and the pace down (10 every cool-down once the age stayed low).
var Bulk = Lane{
	Name: "bulk",
	Config: Config{Min: 2, Max: 200, Step: 10, High: 2 * time.Minute, Low: 20 * time.Second,
		LowFor: DefaultLowFor, Cooldown: DefaultCooldown, Period: DefaultPeriod, Stale: DefaultStale},
	BatchSize: 2, BatchingWindow: 10 * time.Second,
}

// DefaultLane returns the defaults of lane name: Urgent for "urgent",
// Bulk otherwise.
func DefaultLane(name string) Lane {
	if name == "urgent" {
		return Urgent
	}
	return Bulk
}

// Defaults for every lane. DefaultCooldown (2 minutes, the scaler's
// COMPILEFARM_SCALER_COOLDOWN): a change shows in the one-minute metric a
// minute or two later, so a shorter cool-down would decide on datapoints
// from before the last change.
const (
	DefaultLowFor   = 10 * time.Minute
	DefaultCooldown = 2 * time.Minute
	DefaultPeriod   = time.Minute
	DefaultStale    = 5 * time.Minute
)

// WithDefaults returns c with its zero durations set from DefaultLane(lane)
// (its thresholds, LowFor, Cooldown, Period and Stale). Min, Max and Step
// stay as they are.
func (c Config) WithDefaults(lane string) Config {
	d := DefaultLane(lane).Config
	set := func(v *time.Duration, def time.Duration) {
		if *v == 0 {
			*v = def
		}
	}
	set(&c.High, d.High)
	set(&c.Low, d.Low)
	set(&c.LowFor, d.LowFor)
	set(&c.Cooldown, d.Cooldown)
	set(&c.Period, d.Period)
	set(&c.Stale, d.Stale)
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
	// BatchSize is the mapping's BatchSize, jobs per invocation; 0 is
	// taken as 1 (the least capacity per invocation: the most careful).
	BatchSize int
	// Samples are the recent datapoints of the age, InFlight those of the
	// messages in flight over the same time, each in any order, gaps
	// allowed.
	Samples  []Sample
	InFlight []InFlightSample
}

// Decision is the new MaximumConcurrency and why.
type Decision struct {
	From, To int
	// Age is the newest sample's age, or -1 when there was none.
	Age time.Duration
	// InFlight is the most messages in flight in the last LowFor, or -1
	// when there was no datapoint.
	InFlight int
	Reason   string
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
//     window's periods reported: down by one Step, at least to Min, but
//     never to a cap whose capacity (cap × BatchSize) is below the most
//     messages in flight in the last LowFor plus a quarter of them
//     (needed): down less than a step, or hold; with fewer in-flight
//     datapoints than half the window's periods, hold;
//   - otherwise hold.
func Decide(now time.Time, c Config, s State) Decision {
	d := Decision{From: s.Current, To: s.Current, Age: -1, InFlight: -1}
	samples := recent(s.Samples, now)
	if n := len(samples); n > 0 {
		d.Age = samples[n-1].Age
	}
	peak, inFlightN := inFlightPeak(s.InFlight, now, c)
	if inFlightN > 0 {
		d.InFlight = peak
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
	if periods := int(c.LowFor / c.Period); inFlightN == 0 || 2*inFlightN < periods {
		d.Reason = fmt.Sprintf("age ≤ low %v for %v, but %d datapoint(s) of messages in flight in that time are too few to tell a busy lane from an idle one: hold", c.Low, c.LowFor, inFlightN)
		return d
	}
	batch := max(1, s.BatchSize)
	need := needed(peak, batch)
	d.To = max(c.Min, s.Current-c.Step, need)
	switch {
	case d.To >= s.Current:
		d.To = s.Current
		d.Reason = fmt.Sprintf("age ≤ low %v for %v, but up to %d message(s) in flight: a cap below %d (× batch size %d) would not hold them plus a quarter, and the cap is %d: hold", c.Low, c.LowFor, peak, need, batch, s.Current)
	case d.To == need && s.Current-c.Step < need:
		d.Reason = fmt.Sprintf("age ≤ low %v for %v: down %d, less than a step of %d: up to %d message(s) in flight need a cap of %d (× batch size %d) to hold them plus a quarter", c.Low, c.LowFor, s.Current-d.To, c.Step, peak, need, batch)
	default:
		d.Reason = fmt.Sprintf("age ≤ low %v for %v and up to %d message(s) in flight: down one step of %d", c.Low, c.LowFor, peak, c.Step)
	}
	return d
}

// needed is the least cap that a lane whose busiest datapoint of the last
// LowFor had inFlight messages in flight may be scaled down to: its
// capacity (cap × batch, batch ≥ 1) holds inFlight plus a quarter, rounded
// up, so that busiest datapoint would fill at most 80 % of it. The margin:
//   - the metric is approximate, and SQS publishes it about once a minute,
//     so a minute's Maximum is a reading, not the minute's peak, and the
//     arrivals between two readings bunch (agents check in at random);
//   - a lane near 100 % of its cap queues at every bunch, and with
//     BatchSize 1 its age shows that only once a backlog has built, when
//     the agents already wait (TestUrgentSurgeSimulation);
//   - a quarter rather than a fixed number of jobs: it grows with the
//     lane, and is 0 for an idle lane, which then steps down to its min.
func needed(inFlight, batch int) int {
	if inFlight <= 0 {
		return 0
	}
	capacity := inFlight + (inFlight+3)/4
	return (capacity + batch - 1) / batch
}

// inFlightPeak returns the most messages in flight in the datapoints of
// the last c.LowFor before now, and how many datapoints there were.
func inFlightPeak(in []InFlightSample, now time.Time, c Config) (peak, n int) {
	from := now.Add(-c.LowFor)
	for _, s := range in {
		if s.Time.Before(from) || s.Time.After(now) {
			continue
		}
		peak, n = max(peak, s.Messages), n+1
	}
	return peak, n
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

package scaling

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"time"
)

// Model is how Simulate stands in for SQS, Lambda and CloudWatch. Every
// lane has its own event source mapping: its own cap, its own pollers and
// its own batching (SimLane's BatchSize and BatchingWindow).
type Model struct {
	Compile   time.Duration // one job's compile, in a warm execution environment
	ColdStart time.Duration // a new execution environment's init (the Ruby worker's start)
	// RampPerMinute is how many more concurrent invocations Lambda's SQS
	// pollers add per minute, at most, while a queue has work.
	RampPerMinute int
	// MetricLag: the datapoints of the minute [m, m+1) can be read from
	// m+1+MetricLag on.
	MetricLag time.Duration
	Every     time.Duration // the scaler's schedule
	LookBack  time.Duration // how much of the metrics it reads
	// AgeOnly: the scaler reads every minute's messages in flight as 0,
	// so only the age tells it a lane is busy (as the scaler did before it
	// read them): for comparison.
	AgeOnly bool
}

// DefaultModel is the model of the deploy-wave simulation: 1 s per compile,
// a 5 s cold start (Ruby and Puppet loading), Lambda's documented scale-up
// of SQS pollers by up to 300 concurrent invocations a minute, datapoints
// readable a minute after their period ends, the scaler every minute
// reading 15 minutes.
var DefaultModel = Model{
	Compile: time.Second, ColdStart: 5 * time.Second, RampPerMinute: 300,
	MetricLag: time.Minute, Every: time.Minute, LookBack: 15 * time.Minute,
}

// SimLane is one lane of a simulation: its settings (Lane: the scaler's
// Config, valid with its defaults set, and the mapping's batching, e.g.
// Urgent or Bulk), its cap at t=0 and its load.
type SimLane struct {
	Lane
	Start  int     // MaximumConcurrency at t=0
	Burst  int     // jobs enqueued at t=0
	PerSec float64 // then jobs per second, Poisson
	// Until, when set, ends PerSec: from then on jobs arrive at Then a
	// second (the end of a surge).
	Until   time.Duration
	Then    float64
	Seed    uint64 // of the arrivals
	arrived int
}

// Minute is what one minute of a simulation showed for one lane.
type Minute struct {
	Backlog int           // jobs not yet done (queued or in flight) at the minute's end
	Age     time.Duration // ApproximateAgeOfOldestMessage's Maximum over the minute
	Cap     int           // MaximumConcurrency at the minute's end
	Running int           // most concurrent invocations in the minute
	// InFlight is ApproximateNumberOfMessagesNotVisible's Maximum over the
	// minute, which the scaler reads as late as the age: the most jobs
	// received by an invocation and not yet deleted, at any second. (SQS
	// publishes a reading about once a minute, which may miss the
	// minute's peak; the model has the peak. Jobs a poller holds while
	// its batching window fills are in flight in SQS, queued here.)
	InFlight int
	Done     int    // jobs finished in the minute
	Change   string // the scaler's change at the minute's start, if any
}

// LaneResult is one lane's simulation.
type LaneResult struct {
	Name    string
	Minutes []Minute
	// Drained is when the last job enqueued at t=0 finished (0 if none
	// was, or not within the run).
	Drained time.Duration
	MaxAge  time.Duration
	MaxCap  int
	Changes int
	Jobs    int // jobs finished
}

// slot is one execution environment.
type slot struct {
	warm     bool
	busyTill int   // second at which its batch is done
	batch    []int // enqueue seconds of its jobs
}

type simLane struct {
	SimLane
	rng     *rand.Rand
	queue   []int // enqueue seconds, oldest first
	slots   []*slot
	running int
	allowed int // concurrency Lambda's pollers have ramped up to
	cap     int
	last    time.Time
	burstOK int // burst jobs done
	res     LaneResult
	cur     Minute
}

// Simulate runs the lanes for d, second by second, against the model and
// Decide, and returns each lane's minutes.
func Simulate(m Model, d time.Duration, lanes ...SimLane) []LaneResult {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ls := make([]*simLane, len(lanes))
	for i, l := range lanes {
		s := &simLane{SimLane: l, rng: rand.New(rand.NewPCG(l.Seed, 1)), cap: l.Start, last: t0.Add(-time.Hour)}
		s.res.Name = l.Name
		for range l.Burst {
			s.queue = append(s.queue, 0)
		}
		ls[i] = s
	}
	secs := int(d / time.Second)
	every := int(m.Every / time.Second)
	for sec := 0; sec < secs; sec++ {
		now := t0.Add(time.Duration(sec) * time.Second)
		for _, l := range ls {
			if sec%60 == 0 && sec > 0 {
				l.endMinute()
			}
			if sec%every == 0 && sec > 0 {
				l.scale(m, now, t0)
			}
			l.step(m, sec)
		}
	}
	out := make([]LaneResult, len(ls))
	for i, l := range ls {
		l.endMinute()
		out[i] = l.res
	}
	return out
}

// scale runs the scaler for the lane at now.
func (l *simLane) scale(m Model, now, t0 time.Time) {
	var samples []Sample
	var inFlight []InFlightSample
	for i, mm := range l.res.Minutes {
		start := t0.Add(time.Duration(i) * time.Minute)
		if start.Add(time.Minute+m.MetricLag).After(now) || now.Sub(start) > m.LookBack {
			continue
		}
		samples = append(samples, Sample{Time: start, Age: mm.Age})
		n := mm.InFlight
		if m.AgeOnly {
			n = 0
		}
		inFlight = append(inFlight, InFlightSample{Time: start, Messages: n})
	}
	dec := Decide(now, l.Config, State{Current: l.cap, LastChange: l.last, BatchSize: l.BatchSize, Samples: samples, InFlight: inFlight})
	if dec.Changed() {
		l.cur.Change = fmt.Sprintf("%d→%d", dec.From, dec.To)
		l.cap, l.last = dec.To, now
		l.res.Changes++
	}
}

// step advances the lane by one second.
func (l *simLane) step(m Model, sec int) {
	// Arrivals, from the second second on: a job enqueued at 0 is the burst's.
	rate := l.PerSec
	if l.Until > 0 && time.Duration(sec)*time.Second >= l.Until {
		rate = l.Then
	}
	if rate > 0 && sec > 0 {
		for range poisson(l.rng, rate) {
			l.queue = append(l.queue, sec)
			l.arrived++
		}
	}
	// Batches done this second: their jobs are deleted.
	for _, s := range l.slots {
		if s.batch != nil && s.busyTill <= sec {
			done := len(s.batch)
			l.cur.Done += done
			l.res.Jobs += done
			for _, e := range s.batch {
				if e == 0 {
					l.burstOK++
				}
			}
			if l.Burst > 0 && l.burstOK >= l.Burst && l.res.Drained == 0 {
				l.res.Drained = time.Duration(sec) * time.Second
			}
			s.batch = nil
			l.running--
		}
	}
	// Lambda's pollers ramp up towards the cap while there is work, and
	// never run more than the cap. A poller invokes the function with a
	// full batch at once; with fewer jobs than BatchSize waiting, it waits
	// for more until the oldest of them has waited BatchingWindow (a
	// poller receives a job as soon as it is sent, so the window starts
	// then), and then invokes with what it has.
	perSec := max(1, m.RampPerMinute/60)
	if len(l.queue) > 0 {
		l.allowed = min(l.cap, l.allowed+perSec)
	}
	l.allowed = min(l.allowed, l.cap)
	size := max(1, l.BatchSize)
	for l.running < l.allowed && len(l.queue) > 0 {
		n := min(size, len(l.queue))
		if n < size && time.Duration(sec-l.queue[0])*time.Second < l.BatchingWindow {
			break
		}
		s := l.idleSlot()
		s.batch = append([]int(nil), l.queue[:n]...)
		l.queue = l.queue[n:]
		cost := time.Duration(n) * m.Compile
		if !s.warm {
			cost += m.ColdStart
			s.warm = true
		}
		s.busyTill = sec + max(1, int(math.Ceil(cost.Seconds())))
		l.running++
	}
	l.cur.Running = max(l.cur.Running, l.running)
	// The age of the oldest job not yet deleted, and the jobs in flight.
	oldest := -1
	if len(l.queue) > 0 {
		oldest = l.queue[0]
	}
	inFlight := 0
	for _, s := range l.slots {
		inFlight += len(s.batch)
		for _, e := range s.batch {
			if oldest < 0 || e < oldest {
				oldest = e
			}
		}
	}
	if oldest >= 0 {
		l.cur.Age = max(l.cur.Age, time.Duration(sec-oldest)*time.Second)
	}
	l.cur.InFlight = max(l.cur.InFlight, inFlight)
}

// idleSlot returns a warm idle execution environment, or a new one.
func (l *simLane) idleSlot() *slot {
	var cold *slot
	for _, s := range l.slots {
		if s.batch == nil {
			if s.warm {
				return s
			}
			cold = s
		}
	}
	if cold != nil {
		return cold
	}
	s := &slot{}
	l.slots = append(l.slots, s)
	return s
}

func (l *simLane) endMinute() {
	l.cur.Cap = l.cap
	l.cur.Backlog = len(l.queue)
	for _, s := range l.slots {
		l.cur.Backlog += len(s.batch)
	}
	l.res.MaxAge = max(l.res.MaxAge, l.cur.Age)
	l.res.MaxCap = max(l.res.MaxCap, l.cap)
	l.res.Minutes = append(l.res.Minutes, l.cur)
	l.cur = Minute{}
}

// poisson draws from a Poisson distribution of mean lambda (Knuth's
// method; lambda is small here).
func poisson(r *rand.Rand, lambda float64) int {
	limit, k, p := math.Exp(-lambda), 0, 1.0
	for {
		p *= r.Float64()
		if p <= limit {
			return k
		}
		k++
	}
}

// Markdown writes the simulation's minutes as a table, one row a minute
// while anything changes and then one row every 5 minutes.
func Markdown(res []LaneResult) string {
	var b strings.Builder
	b.WriteString("| min |")
	for _, r := range res {
		fmt.Fprintf(&b, " %s backlog | %s age (s) | %s in flight | %s cap | %s running | %s change |", r.Name, r.Name, r.Name, r.Name, r.Name, r.Name)
	}
	b.WriteString("\n|--:|")
	for range res {
		b.WriteString("--:|--:|--:|--:|--:|:--|")
	}
	b.WriteString("\n")
	n := len(res[0].Minutes)
	for i := range n {
		quiet := i > 0
		for _, r := range res {
			m, p := r.Minutes[i], r.Minutes[i-min(i, 1)]
			if m.Change != "" || m.Backlog != p.Backlog && (m.Backlog > 20 || p.Backlog > 20) {
				quiet = false
			}
		}
		if quiet && i%5 != 0 && i != n-1 {
			continue
		}
		fmt.Fprintf(&b, "| %d |", i)
		for _, r := range res {
			m := r.Minutes[i]
			fmt.Fprintf(&b, " %d | %.0f | %d | %d | %d | %s |", m.Backlog, m.Age.Seconds(), m.InFlight, m.Cap, m.Running, m.Change)
		}
		b.WriteString("\n")
	}
	return b.String()
}

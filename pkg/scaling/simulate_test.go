package scaling

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"
)

// The lanes of the deploy-wave simulation, with the lanes' defaults (Bulk
// and Urgent, what the stack deploys) but for the bulk lane's max: a code
// deploy of 100,000 nodes enqueues every recompile on the bulk lane at
// t=0, while 100,000 agents check in every 30 minutes (55.6 a second), 1%
// of them needing a compile on the urgent lane.
func deployWave(bulkMax int) []SimLane {
	bulk := Bulk
	bulk.Config.Max = bulkMax
	return []SimLane{
		{Lane: bulk, Start: bulk.Config.Min, Burst: 100_000, Seed: 1},
		{Lane: Urgent, Start: Urgent.Config.Min, PerSec: 100_000.0 / 1800 * 0.01, Seed: 2},
	}
}

// short writes d as the docs do: 2m, 30s, 1m30s, 0s.
func short(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// settings describes a lane's settings in a line of docs/benchmarks.md.
func settings(l Lane) string {
	c := l.Config
	window := "no batching window"
	if l.BatchingWindow > 0 {
		window = "batching window " + short(l.BatchingWindow)
	}
	if !l.Steered() {
		return fmt.Sprintf("cap fixed at %d (min = max: the scaler does not move it, Lambda's pollers fill it as the queue needs); batch size %d, %s",
			c.Max, l.BatchSize, window)
	}
	return fmt.Sprintf("min %d, max %d, step %d, high %s, low %s, low-for %s; batch size %d, %s",
		c.Min, c.Max, c.Step, short(c.High), short(c.Low), short(c.LowFor), l.BatchSize, window)
}

// go test -count=1 -run 'TestDeployWaveSimulation|TestUrgentSurgeSimulation' -v ./pkg/scaling
// prints, in Markdown, what docs/benchmarks.md's section "Queue-age
// scaling" shows after its introduction (bench/run.sh writes that
// section from this output).
func TestDeployWaveSimulation(t *testing.T) {
	const run = 80 * time.Minute
	lanes := deployWave(Bulk.Config.Max)
	res := Simulate(DefaultModel, run, lanes...)
	bulk, urgent := res[0], res[1]
	m := DefaultModel
	if testing.Verbose() {
		fmt.Printf("\n**Settings** (`scaling.Bulk`, `scaling.Urgent`, `scaling.DefaultCooldown`):\n\n")
		fmt.Printf("- bulk: %s, cool-down %s;\n- urgent: %s.\n\n", settings(Bulk), short(Bulk.Config.Cooldown), settings(Urgent))
		fmt.Printf("**The model's numbers**: compile %s, cold start %s, pollers add at most %d concurrent\n"+
			"invocations a minute, a minute's datapoint readable %s after the minute ends, the scaler every %s\n"+
			"reading the last %s. The bulk cap starts at its min.\n\n", short(m.Compile), short(m.ColdStart), m.RampPerMinute,
			short(m.MetricLag), short(m.Every), short(m.LookBack))
		fmt.Printf("**Every minute of the deploy** (rows where nothing moves are shown every 5 minutes;\n" +
			"*backlog* the jobs not yet done, queued or in flight, at the minute's end; *age* and\n" +
			"*in flight* (jobs received by an invocation, not yet deleted) the minute's Maximum;\n" +
			"*running* the most concurrent invocations in the minute; *change* the scaler's change at\n" +
			"the minute's start):\n\n")
		fmt.Print(Markdown(res))
		fmt.Print("\n", deploySummary(lanes, res), "\n")
	}
	if bulk.Drained == 0 {
		t.Fatalf("the bulk lane did not drain 100,000 jobs in %v", run)
	}
	if bulk.Jobs < 100_000 {
		t.Fatalf("bulk lane finished %d jobs, want 100,000", bulk.Jobs)
	}
	// The defaults drain a 100,000-node deploy well within the hour.
	if bulk.Drained > 30*time.Minute {
		t.Errorf("the bulk lane drained after %v with its defaults, want within 30m", bulk.Drained)
	}
	// The urgent lane has its own mapping: the flood on the bulk lane
	// does not make its agents wait.
	if urgent.MaxAge > 30*time.Second {
		t.Errorf("urgent lane's age reached %v during the deploy", urgent.MaxAge)
	}
	for i, r := range res {
		c := lanes[i].Config
		for j, m := range r.Minutes {
			if m.Cap < c.Min || m.Cap > c.Max || m.Running > m.Cap {
				t.Errorf("%s minute %d: cap %d, running %d, outside [%d, %d]", r.Name, j, m.Cap, m.Running, c.Min, c.Max)
			}
		}
	}
	// After the deploy the bulk lane comes back down to its min.
	if last := bulk.Minutes[len(bulk.Minutes)-1]; last.Cap != Bulk.Config.Min {
		t.Errorf("bulk lane's cap %d at the end, want its min %d", last.Cap, Bulk.Config.Min)
	}

	// How the bulk lane's max bounds the deploy's duration, and what
	// scaling from the min costs against a cap set at the max beforehand.
	if testing.Verbose() {
		fmt.Printf("\n**The bulk lane's max** bounds the deploy's duration; the last column is the same deploy\n" +
			"with the bulk cap already at its max at t=0 (no scaling):\n\n")
		fmt.Printf("| bulk max | drained after | bulk age at most | cap changes | urgent age at most | drained with the cap at max from t=0 |\n|--:|--:|--:|--:|--:|--:|\n")
	}
	var prev time.Duration
	drained := map[int][2]time.Duration{}
	maxes := []int{20, 50, 100, 200, 500, 1000}
	for _, max := range maxes {
		r := Simulate(DefaultModel, 8*time.Hour, deployWave(max)...)
		fixed := deployWave(max)
		fixed[0].Start = max
		f := Simulate(DefaultModel, 8*time.Hour, fixed...)
		drained[max] = [2]time.Duration{r[0].Drained, f[0].Drained}
		if testing.Verbose() {
			def := ""
			if max == Bulk.Config.Max {
				def = " (default)"
			}
			fmt.Printf("| %d%s | %v | %v | %d | %v | %v |\n", max, def, r[0].Drained, r[0].MaxAge, r[0].Changes, r[1].MaxAge, f[0].Drained)
		}
		if r[0].Drained == 0 || prev != 0 && r[0].Drained > prev {
			t.Errorf("bulk max %d: drained after %v, the smaller max after %v", max, r[0].Drained, prev)
		}
		if f[0].Drained > r[0].Drained {
			t.Errorf("bulk max %d: drained after %v from the max, after %v scaling from the min", max, f[0].Drained, r[0].Drained)
		}
		prev = r[0].Drained
	}
	if testing.Verbose() {
		def, top := drained[Bulk.Config.Max], drained[maxes[len(maxes)-1]]
		fmt.Printf("\nWith the default max of %d, scaling from the min rather than the max bounds the deploy:\n"+
			"the metric shows the flood only minutes in, and Decide at most doubles the cap per\n"+
			"cool-down, so a max of %d drains after %v against %v. With the cap at the max\n"+
			"from the start the same deploy takes %v (max %d) or %v (max %d): a deploy that knows\n"+
			"it is about to enqueue 100,000 jobs could raise the bulk lane's cap itself, and the scaler\n"+
			"would bring it back down. A max of %d, the stack's former default, takes %v.\n",
			Bulk.Config.Max, maxes[len(maxes)-1], top[0], def[0], def[1], Bulk.Config.Max, top[1], maxes[len(maxes)-1],
			maxes[0], drained[maxes[0]][0])
	}
}

// deploySummary says in words what the deploy's table shows.
func deploySummary(lanes []SimLane, res []LaneResult) string {
	bulk, urgent, c := res[0], res[1], lanes[0].Config
	var path []string
	firstUp, atMax, downFrom, atMin := -1, -1, -1, -1
	prev := lanes[0].Start
	for i, m := range bulk.Minutes {
		switch {
		case m.Cap > prev:
			if firstUp < 0 {
				firstUp = i
				path = append(path, fmt.Sprint(prev))
			}
			path = append(path, fmt.Sprint(m.Cap))
			if m.Cap == c.Max && atMax < 0 {
				atMax = i
			}
		case m.Cap < prev:
			if downFrom < 0 {
				downFrom = i
			}
			if m.Cap == c.Min && atMin < 0 {
				atMin = i
			}
		}
		prev = m.Cap
	}
	var b strings.Builder
	fmt.Fprintf(&b, "- The bulk lane's first datapoint at or above %s is readable at minute %d: the scaler\n"+
		"  raises the cap then, and after that by one step per %s of age but at most double, every\n"+
		"  cool-down (%s),\n  reaching its max at minute %d. The 100,000 jobs are done after **%v**;\n"+
		"  the oldest waited %v (the age of a flood drained in order grows by 1 s per second until\n"+
		"  the end, whatever the concurrency).\n",
		short(c.High), firstUp, short(c.High), strings.Join(path, "→"), atMax, bulk.Drained, bulk.MaxAge)
	fmt.Fprintf(&b, "- The cap comes down one step of %d per cool-down once the age has stayed at or below\n"+
		"  %s for %s (with no job in flight, nothing holds it up): from minute %d, back to the min\n"+
		"  at minute %d.\n", c.Step, short(c.Low), short(c.LowFor), downFrom, atMin)
	fmt.Fprintf(&b, "- The **urgent lane's age stays at or below %v** throughout, at its fixed cap of %d: the\n"+
		"  flood on the bulk lane never touches it, as the lanes have separate mappings. (They\n"+
		"  share the account's concurrency: bulk max + urgent max, %d + %d, must stay within the\n"+
		"  account's unreserved concurrency, 1,000 by default.)\n",
		urgent.MaxAge, urgent.MaxCap, c.Max, lanes[1].Config.Max)
	return b.String()
}

// A busier urgent lane: 10% of check-ins need a compile (5.6 a second),
// e.g. while agents report changed facts after an OS update, for 30
// minutes; then the ordinary 1% again.
//
// At its fixed cap (Urgent, what the stack deploys) Lambda's pollers meet
// the surge within seconds: no job waits longer than a cold start and a
// compile, far under the agents' first-compile-wait (60 s).
//
// The same lane steered up from a cap of 2 (as the stack steered it
// before) first makes agents wait minutes, then keeps up, holding its cap
// at what the surge needs though its age (batch size 1) is as low as an
// idle lane's: the messages in flight keep the scaler from stepping it
// down. After the surge the cap comes down. That run keeps testing Decide
// on a lane of batch size 1 (a scaler can still be given one).
func TestUrgentSurgeSimulation(t *testing.T) {
	const surgeFor, run = 30 * time.Minute, 60 * time.Minute
	surgeOf := func(l Lane) []SimLane {
		lanes := deployWave(Bulk.Config.Max)[1:]
		ordinary := lanes[0].PerSec
		lanes[0].Lane, lanes[0].Start = l, l.Config.Min
		lanes[0].PerSec, lanes[0].Until, lanes[0].Then = ordinary*10, surgeFor, ordinary
		return lanes
	}
	fixed := Simulate(DefaultModel, run, surgeOf(Urgent)...)[0]
	steeredLane := Urgent
	steeredLane.Config.Min = 2
	lanes := surgeOf(steeredLane)
	surge := Simulate(DefaultModel, run, lanes...)[0]
	l, c := lanes[0], lanes[0].Config
	end := int(surgeFor / time.Minute) // the first minute after the surge
	// What the surge needs: its mean jobs in flight (arrivals × compile
	// time, Little's law), a cap below which cannot keep up at all, plus
	// the decision's own margin.
	mean := int(math.Ceil(l.PerSec * DefaultModel.Compile.Seconds()))
	need := needed(mean, max(1, l.BatchSize))
	// The first peak of the age, the first minute after it with the age
	// below High (caught up), and the most age and the least cap after
	// that during the surge.
	peak, caught, afterAt, downs, reups, least, mostInFlight := -1, -1, -1, 0, 0, c.Max, 0
	var after time.Duration
	var path, down []string
	prev := l.Start
	for i, m := range surge.Minutes {
		if m.Cap != prev {
			p := &path
			if i >= end {
				p = &down
			}
			if len(*p) == 0 {
				*p = append(*p, fmt.Sprint(prev))
			}
			*p = append(*p, fmt.Sprint(m.Cap))
			if m.Cap < prev {
				downs++
			} else if downs > 0 {
				reups++
			}
			prev = m.Cap
		}
		if peak < 0 && i > 0 && m.Age < surge.Minutes[i-1].Age {
			peak = i - 1
		}
		if peak >= 0 && caught < 0 && m.Age < c.High {
			caught = i
		}
		if caught >= 0 && i > caught && i < end {
			if m.Age > after {
				after, afterAt = m.Age, i
			}
			least, mostInFlight = min(least, m.Cap), max(mostInFlight, m.InFlight)
		}
	}
	atEnd, last := surge.Minutes[end-1].Cap, surge.Minutes[len(surge.Minutes)-1].Cap
	// The same run with a scaler that reads only the age (the messages
	// in flight as 0): after catching up, its least cap in the surge, when
	// it first went below what the surge needs, and the most age after.
	blind := DefaultModel
	blind.AgeOnly = true
	ageOnly := Simulate(blind, run, lanes...)[0]
	blindLeast, blindBelow, blindAge, blindAgeAt := c.Max, -1, time.Duration(0), -1
	for i := caught + 1; i < end; i++ {
		m := ageOnly.Minutes[i]
		blindLeast = min(blindLeast, m.Cap)
		if blindBelow < 0 && m.Cap < need {
			blindBelow = i
		}
		if blindBelow >= 0 && m.Age > blindAge {
			blindAge, blindAgeAt = m.Age, i
		}
	}
	fixedRunning := 0
	for _, m := range fixed.Minutes {
		fixedRunning = max(fixedRunning, m.Running)
	}
	if testing.Verbose() {
		fmt.Printf("\n**An urgent-lane surge** (`TestUrgentSurgeSimulation`): 10%% of check-ins need a compile\n"+
			"(%.1f a second) for %s, then the ordinary 1%% (%.2f a second) again; the urgent lane alone\n"+
			"for %s, at its fixed cap of %d:\n\n%s\n",
			l.PerSec, short(surgeFor), l.Then, short(run), Urgent.Config.Max, Markdown([]LaneResult{fixed}))
		fmt.Printf("No job waits longer than %v (a cold start and a compile): Lambda's pollers add\n"+
			"invocations as the queue fills, up to %d at once here, and the cap never moves.\n\n",
			fixed.MaxAge, fixedRunning)
		fmt.Printf("**The same surge steered from a cap of %d** (as the stack steered the urgent lane before:\n"+
			"min %d, max %d, step %d, high %s, low %s):\n\n%s\n",
			c.Min, c.Min, c.Max, c.Step, short(c.High), short(c.Low), Markdown([]LaneResult{surge}))
		stays := fmt.Sprintf("at or below %v", after)
		if after == 0 {
			stays = "0s (every job starts\nwithin the second it arrives)"
		}
		fmt.Printf("The age peaks at %v (minute %d), longer than an agent waits for a first compile,\n"+
			"before the cap catches up (minute %d); the cap goes\n"+
			"%s. After catching up the age stays %s for the rest of the surge.\n\n",
			surge.Minutes[peak].Age, peak, caught, strings.Join(path, "→"), stays)
		holds := fmt.Sprintf("holds at %d to the surge's end", atEnd)
		if least != atEnd {
			holds = fmt.Sprintf("stays at %d or more to the surge's end", least)
		}
		fmt.Printf("With a batch size of %d, a lane that keeps up shows an age as low as an idle one's (a\n"+
			"job waits for no other compile in its invocation): from minute %d on the age has stayed\n"+
			"at or below %s for %s. What tells the scaler the lane is busy is the messages in flight\n"+
			"(`ApproximateNumberOfMessagesNotVisible`, up to %d): it lowers a cap only to one that holds\n"+
			"the most of the last %s plus a quarter (%d need a cap of %d). So the cap\n"+
			"%s, above the %d that the surge's %.1f jobs in flight on average need\n"+
			"with that quarter. The same run with a scaler that reads only the age (`Model.AgeOnly`)\n"+
			"steps the cap down below that from minute %d, to %d, and the age climbs back to %v\n"+
			"(minute %d).\n\n",
			l.BatchSize, caught+int(c.LowFor/time.Minute), short(c.Low), short(c.LowFor), mostInFlight, short(c.LowFor),
			mostInFlight, needed(mostInFlight, max(1, l.BatchSize)), holds, need, l.PerSec*DefaultModel.Compile.Seconds(),
			blindBelow, blindLeast, blindAge, blindAgeAt)
		fmt.Printf("Once the surge ends (minute %d) the messages in flight fall, and %s later the cap\n"+
			"comes down a step per cool-down, less where the messages in flight need more:\n"+
			"%s, at %d by minute %d.\n",
			end, short(c.LowFor), strings.Join(down, "→"), last, len(surge.Minutes)-1)
	}
	if surge.MaxAge > 10*time.Minute || peak < 0 || caught < 0 || caught >= end || after >= c.High {
		t.Errorf("urgent surge: age at most %v, after catching up at minute %d at most %v (minute %d), want below %v",
			surge.MaxAge, caught, after, afterAt, c.High)
	}
	// Once caught up, the cap holds what the surge needs, and never goes
	// down and up again.
	if least < need || reups > 0 {
		t.Errorf("urgent surge: after catching up the cap went down to %d (the surge needs %d), and %d time(s) up again: %s",
			least, need, reups, strings.Join(path, "→"))
	}
	// After the surge the lane is light again and its cap comes down.
	if last >= atEnd {
		t.Errorf("urgent surge: cap %d at the surge's end, %d %v later: not scaled down", atEnd, last, run-surgeFor)
	}
	// At its fixed cap the lane never makes an agent wait for a scaler:
	// its oldest job is a cold start and a compile old at most, far
	// below the steered lane's first peak, and the cap never moves.
	if limit := DefaultModel.ColdStart + 2*DefaultModel.Compile; fixed.MaxAge > limit || fixed.MaxAge >= surge.Minutes[peak].Age {
		t.Errorf("urgent surge at the fixed cap: oldest job %v, want at most %v (steered from 2: %v)", fixed.MaxAge, limit, surge.Minutes[peak].Age)
	}
	if fixed.Changes != 0 || fixedRunning > Urgent.Config.Max {
		t.Errorf("urgent surge at the fixed cap: %d cap changes, %d running at most (cap %d)", fixed.Changes, fixedRunning, Urgent.Config.Max)
	}
}

// TestBatchingWindow: a poller with fewer jobs than BatchSize waits until
// the oldest has waited BatchingWindow; a full batch goes at once.
func TestBatchingWindow(t *testing.T) {
	m := DefaultModel
	first := m.ColdStart + m.Compile // one job in a new execution environment
	for _, c := range []struct {
		name   string
		size   int
		window time.Duration
		burst  int
		want   time.Duration
	}{
		{"one job waits the window", 2, 10 * time.Second, 1, 10*time.Second + first},
		{"a full batch goes at once", 2, 10 * time.Second, 2, first + m.Compile},
		{"no window", 2, 0, 1, first},
		{"batch size 1", 1, 10 * time.Second, 1, first},
	} {
		l := Bulk
		l.BatchSize, l.BatchingWindow = c.size, c.window
		r := Simulate(m, time.Minute, SimLane{Lane: l, Start: l.Config.Min, Burst: c.burst})[0]
		if r.Drained != c.want {
			t.Errorf("%s: drained after %v, want %v", c.name, r.Drained, c.want)
		}
	}
}

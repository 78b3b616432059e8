package scaling

import (
	"strings"
	"testing"
	"time"
)

var now = time.Date(2026, 11, 26, 3, 0, 0, 0, time.UTC)

// series returns one datapoint a minute, in seconds, the last stamped 2
// minutes before now (CloudWatch's usual lag); -1 is a missing datapoint.
func series(ages ...int) []Sample {
	var out []Sample
	for i, a := range ages {
		if a < 0 {
			continue
		}
		at := now.Add(-2*time.Minute - time.Duration(len(ages)-1-i)*time.Minute)
		out = append(out, Sample{Time: at, Age: time.Duration(a) * time.Second})
	}
	return out
}

func bulk() Config {
	return Config{Min: 2, Max: 100, Step: 10}.WithDefaults("bulk") // high 2m, low 20s
}

func urgent() Config {
	return Config{Min: 2, Max: 20, Step: 2}.WithDefaults("urgent") // high 30s, low 5s
}

// flight returns one datapoint of messages in flight a minute, stamped as
// series stamps the ages; -1 is a missing datapoint.
func flight(counts ...int) []InFlightSample {
	var out []InFlightSample
	for _, s := range series(counts...) {
		out = append(out, InFlightSample{Time: s.Time, Messages: int(s.Age / time.Second)})
	}
	return out
}

// steady returns n datapoints of messages in flight, each v.
func steady(v, n int) []InFlightSample {
	counts := make([]int, n)
	for i := range counts {
		counts[i] = v
	}
	return flight(counts...)
}

func TestDecide(t *testing.T) {
	long := now.Add(-time.Hour)
	type lane struct {
		c     Config
		batch int
	}
	b, u := lane{bulk(), 2}, lane{urgent(), 1}
	tests := []struct {
		name       string
		lane       lane
		cur        int
		lastChange time.Time
		samples    []Sample
		inFlight   []InFlightSample
		want       int
		reason     string // a part of the reason
	}{
		// A deploy: every job enqueued at once, drained in order, so the
		// age climbs by 60 s a minute, and every invocation the cap allows
		// runs a full batch.
		{"flood just past high: one step, at least", b, 2, long, series(0, 0, 60, 120), steady(4, 4), 12, "1 step"},
		{"flood far past high: more steps", b, 32, long, series(240, 300, 360, 420), steady(64, 4), 62, "3 step"},
		{"flood very far: at most double", b, 12, long, series(1500, 1560, 1620), steady(24, 3), 24, "13 step"},
		{"flood, near max: clamped to max", b, 92, long, series(1560, 1620), steady(184, 2), 100, "up 8"},
		{"flood, at max", b, 100, long, series(1560, 1620), steady(200, 2), 100, "already at max"},
		// The capacity added catches up: the age falls, still above high.
		{"slow drain above high: hold", b, 42, long, series(900, 960, 700, 400), steady(84, 4), 42, "falling"},
		{"drained, age low for 10m: down one step", b, 42, long, series(400, 10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), flight(84, 6, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), 32, "down one step"},
		{"drained, low only 5m: hold", b, 42, long, series(900, 400, 60, 30, 0, 0, 0, 0, 0), flight(84, 84, 40, 2, 0, 0, 0, 0, 0), 42, "between low"},
		{"drained, at min", b, 2, long, series(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), steady(0, 12), 2, "already at min"},
		{"down never below min", lane{Config{Min: 5, Max: 100, Step: 10}.WithDefaults("bulk"), 2}, 12, long, series(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), steady(0, 12), 5, "down one step"},
		// Sawtooth: the urgent lane's age rises and falls with bursts of
		// check-ins, peaks above high.
		{"sawtooth, rising peak: up", u, 4, long, series(5, 20, 40, 5, 20, 45), steady(4, 6), 6, "1 step"},
		{"sawtooth, falling after a peak: hold", u, 4, long, series(5, 20, 45, 31), steady(4, 4), 4, "falling"},
		{"sawtooth between thresholds: hold", u, 6, long, series(3, 10, 20, 3, 10, 20, 3, 10, 20, 3, 10, 20), flight(2, 5, 6, 2, 5, 6, 2, 5, 6, 2, 5, 6), 6, "between low"},
		// A single spike: one minute with an old message, then nothing.
		{"spike now: up", u, 4, long, series(0, 0, 0, 0, 90), flight(0, 0, 0, 0, 4), 8, "3 step"},
		{"spike gone: hold, not yet low for 10m", u, 10, long, series(0, 0, 90, 0, 0, 0), flight(0, 0, 4, 1, 0, 0), 10, "between low"},
		// Flapping: the age alternates across both thresholds. Up when
		// high and rising; never down, as it is never low for 10 minutes.
		{"flapping, high: up", u, 4, long, series(0, 40, 0, 40, 0, 40), flight(0, 4, 0, 4, 0, 4), 6, "1 step"},
		{"flapping, low: hold", u, 6, long, series(40, 0, 40, 0, 40, 0, 40, 0, 40, 0, 40, 0), flight(6, 0, 6, 0, 6, 0, 6, 0, 6, 0, 6, 0), 6, "between low"},
		// Busy or idle: with batch size 1 a lane whose cap just keeps up
		// shows an age as low as an idle lane's; the messages in flight
		// tell them apart.
		{"busy lane, low age: hold", u, 14, long, series(1, 1, 2, 1, 1, 1, 2, 1, 1, 1, 1, 1), flight(10, 11, 12, 11, 10, 12, 11, 11, 10, 12, 11, 11), 14, "would not hold them"},
		{"busy lane, its busiest minute 8m ago: hold", u, 14, long, series(1, 1, 2, 1, 1, 1, 2, 1, 1, 1, 1, 1), flight(0, 0, 0, 0, 12, 0, 0, 0, 0, 0, 0, 0), 14, "up to 12 message(s)"},
		{"busy lane, its busiest minute before LowFor: down", u, 14, long, series(1, 1, 2, 1, 1, 1, 2, 1, 1, 1, 1, 1), flight(12, 12, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0), 12, "down one step"},
		{"lightly used lane: down one step", u, 14, long, series(1, 0, 1, 1, 0, 1, 1, 0, 1, 1, 0, 1), flight(5, 8, 6, 7, 8, 5, 6, 7, 8, 6, 5, 7), 12, "down one step"},
		{"idle lane: down one step", u, 14, long, series(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), steady(0, 12), 12, "down one step"},
		{"half-used lane: down less than a step", b, 42, long, series(5, 3, 8, 4, 6, 2, 9, 5, 3, 7, 4, 6), flight(50, 60, 55, 52, 58, 60, 49, 51, 57, 60, 53, 55), 38, "less than a step"},
		{"batch size 0 is taken as 1", lane{urgent(), 0}, 14, long, series(1, 1, 2, 1, 1, 1, 2, 1, 1, 1, 1, 1), steady(11, 12), 14, "× batch size 1"},
		{"no in-flight data: hold", u, 14, long, series(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), nil, 14, "0 datapoint(s) of messages in flight"},
		{"too few in-flight datapoints: hold", u, 14, long, series(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), flight(0, -1, -1, -1, -1, -1, -1, -1, 0, -1, 0, -1), 14, "too few to tell"},
		{"in-flight datapoints only before LowFor: hold", u, 14, long, series(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), flight(0, 0, 0, -1, -1, -1, -1, -1, -1, -1, -1, -1), 14, "too few to tell"},
		// Missing data.
		{"no datapoints: hold", b, 42, long, nil, nil, 42, "no datapoint"},
		{"stale datapoints: hold", b, 42, long, []Sample{{now.Add(-20 * time.Minute), 2000 * time.Second}}, []InFlightSample{{now.Add(-20 * time.Minute), 84}}, 42, "no datapoint"},
		{"gaps, high: up", b, 2, long, series(-1, 60, -1, -1, 180), flight(-1, 4, -1, -1, 4), 12, "1 step"},
		{"gaps in a low window, half reported: down", b, 42, long, series(-1, 0, -1, 0, -1, 0, -1, 0, -1, 0, -1, 0), flight(-1, 0, -1, 0, -1, 0, -1, 0, -1, 0, -1, 0), 32, "down one step"},
		{"too few low datapoints: hold", b, 42, long, series(0, -1, -1, -1, -1, -1, -1, -1, 0, -1, 0), flight(0, -1, -1, -1, -1, -1, -1, -1, 0, -1, 0), 42, "too few"},
		{"low datapoints only recent: hold", b, 42, long, series(0, 0, 0, 0), steady(0, 4), 42, "too few"},
		// Bounds, applied at once whatever the cool-down or the messages
		// in flight.
		{"no cap set: max", b, 0, now, series(0), steady(0, 1), 100, "no maximum concurrency"},
		{"below min", b, 1, now, series(0), steady(0, 1), 2, "below min"},
		{"above max", b, 500, now, series(5000), steady(1000, 1), 100, "above max"},
		// Cool-down.
		{"cool-down: hold though high", b, 12, now.Add(-90 * time.Second), series(300, 360), steady(24, 2), 12, "cool-down"},
		{"cool-down over: up", b, 32, now.Add(-2 * time.Minute), series(300, 360), steady(64, 2), 62, "3 step"},
		{"cool-down: hold though low", b, 42, now.Add(-time.Minute), series(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), steady(0, 12), 42, "cool-down"},
		// Datapoints after now (clock skew) are ignored.
		{"future datapoint ignored", b, 2, long, append(series(0, 0), Sample{now.Add(time.Minute), time.Hour}), steady(0, 2), 2, "too few"},
		{"future in-flight datapoint ignored", u, 14, long, series(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), append(steady(0, 12), InFlightSample{now.Add(time.Minute), 100}), 12, "down one step"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := tt.lane.c
			if err := c.Validate(); err != nil {
				t.Fatal(err)
			}
			d := Decide(now, c, State{Current: tt.cur, LastChange: tt.lastChange, BatchSize: tt.lane.batch, Samples: tt.samples, InFlight: tt.inFlight})
			if d.To != tt.want || !strings.Contains(d.Reason, tt.reason) {
				t.Errorf("Decide = %d (%s), want %d (…%s…)", d.To, d.Reason, tt.want, tt.reason)
			}
			if d.From != tt.cur || d.Changed() != (tt.cur != tt.want) {
				t.Errorf("From %d, Changed %v: want %d, %v", d.From, d.Changed(), tt.cur, tt.cur != tt.want)
			}
			if d.To < c.Min || d.To > c.Max {
				t.Errorf("Decide = %d, outside [%d, %d]", d.To, c.Min, c.Max)
			}
			// The rule: never down (within the bounds) to a cap below
			// what the busiest datapoint of the last LowFor needs.
			if d.To < d.From && d.From <= c.Max && d.InFlight >= 0 && d.To < needed(d.InFlight, max(1, tt.lane.batch)) && d.To > c.Min {
				t.Errorf("Decide = %d, below the %d that %d message(s) in flight need", d.To, needed(d.InFlight, tt.lane.batch), d.InFlight)
			}
		})
	}
}

// needed's margin: the busiest datapoint fills at most 80 % of the
// capacity it leaves (cap × batch size).
func TestNeeded(t *testing.T) {
	for _, tt := range []struct{ inFlight, batch, want int }{
		{0, 1, 0}, {0, 2, 0}, {1, 1, 2}, {4, 1, 5}, {5, 1, 7}, {12, 1, 15}, {60, 2, 38}, {12, 10, 2}, {400, 2, 250},
	} {
		got := needed(tt.inFlight, tt.batch)
		if got != tt.want {
			t.Errorf("needed(%d, %d) = %d, want %d", tt.inFlight, tt.batch, got, tt.want)
		}
		if tt.inFlight > 0 && 5*tt.inFlight > 4*got*tt.batch {
			t.Errorf("needed(%d, %d) = %d: %d in flight fill more than 80 %% of %d", tt.inFlight, tt.batch, got, tt.inFlight, got*tt.batch)
		}
	}
}

// Replaying a recorded series minute by minute with the decision applied
// never changes the cap twice within the cool-down nor moves it down and up
// again within LowFor: no flapping.
func TestDecideReplayDoesNotFlap(t *testing.T) {
	c := urgent()
	// ages at each minute: bursts, a spike, flapping, quiet.
	ages := []int{0, 10, 35, 50, 20, 4, 0, 40, 0, 40, 0, 40, 0, 3, 2, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
		0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 90, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
	start := now
	cur, last := 4, start.Add(-time.Hour)
	var changes []time.Time
	var ups, downs []time.Time
	for m := 2; m < len(ages); m++ {
		at := start.Add(time.Duration(m) * time.Minute)
		var samples []Sample
		var inFlight []InFlightSample
		for i := max(0, m-15); i <= m-2; i++ { // 15 minutes, lag 2
			samples = append(samples, Sample{start.Add(time.Duration(i) * time.Minute), time.Duration(ages[i]) * time.Second})
			inFlight = append(inFlight, InFlightSample{start.Add(time.Duration(i) * time.Minute), 1}) // a light load
		}
		d := Decide(at, c, State{Current: cur, LastChange: last, BatchSize: 1, Samples: samples, InFlight: inFlight})
		if d.Changed() {
			if n := len(changes); n > 0 && at.Sub(changes[n-1]) < c.Cooldown {
				t.Fatalf("minute %d: changed %v after the last change", m, at.Sub(changes[n-1]))
			}
			if d.To > cur {
				if n := len(downs); n > 0 && at.Sub(downs[n-1]) < c.LowFor {
					t.Errorf("minute %d: up %v after a down", m, at.Sub(downs[n-1]))
				}
				ups = append(ups, at)
			} else {
				downs = append(downs, at)
			}
			changes = append(changes, at)
			t.Logf("minute %d: %d → %d: %s", m, d.From, d.To, d.Reason)
			cur, last = d.To, at
		}
	}
	if len(ups) == 0 || len(downs) == 0 {
		t.Fatalf("ups %d, downs %d: the series should scale both ways", len(ups), len(downs))
	}
}

func TestConfigValidate(t *testing.T) {
	good := bulk()
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"min below AWS's 2", func(c *Config) { c.Min = 1 }, "min 1 is not between 2 and 1000"},
		{"max above AWS's 1000", func(c *Config) { c.Max = 1001 }, "max 1001"},
		{"min above max", func(c *Config) { c.Min, c.Max = 50, 10 }, "min 50 is above max 10"},
		{"no step", func(c *Config) { c.Step = 0 }, "step 0"},
		{"no hysteresis", func(c *Config) { c.Low = c.High }, "no hysteresis"},
		{"negative cool-down", func(c *Config) { c.Cooldown = -time.Second }, "cool-down"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := good
			tt.edit(&c)
			err := c.Validate()
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Validate = %v, want …%s…", err, tt.want)
			}
		})
	}
}

func TestWithDefaults(t *testing.T) {
	u := Config{}.WithDefaults("urgent")
	b := Config{}.WithDefaults("bulk")
	if u.High != Urgent.Config.High || b.High != Bulk.Config.High || u.Cooldown != DefaultCooldown || b.LowFor != DefaultLowFor {
		t.Fatalf("defaults: urgent %+v, bulk %+v", u, b)
	}
	c := Config{High: time.Hour, Cooldown: time.Second}.WithDefaults("urgent")
	if c.High != time.Hour || c.Cooldown != time.Second || c.Low != Urgent.Config.Low {
		t.Fatalf("set fields must stay: %+v", c)
	}
}

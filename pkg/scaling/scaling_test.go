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

func TestDecide(t *testing.T) {
	long := now.Add(-time.Hour)
	tests := []struct {
		name       string
		c          Config
		cur        int
		lastChange time.Time
		samples    []Sample
		want       int
		reason     string // a part of the reason
	}{
		// A deploy: every job enqueued at once, drained in order, so the
		// age climbs by 60 s a minute.
		{"flood just past high: one step, at least", bulk(), 2, long, series(0, 0, 60, 120), 12, "1 step"},
		{"flood far past high: more steps", bulk(), 32, long, series(240, 300, 360, 420), 62, "3 step"},
		{"flood very far: at most double", bulk(), 12, long, series(1500, 1560, 1620), 24, "13 step"},
		{"flood, near max: clamped to max", bulk(), 92, long, series(1560, 1620), 100, "up 8"},
		{"flood, at max", bulk(), 100, long, series(1560, 1620), 100, "already at max"},
		// The capacity added catches up: the age falls, still above high.
		{"slow drain above high: hold", bulk(), 42, long, series(900, 960, 700, 400), 42, "falling"},
		{"drained, age low for 10m: down one step", bulk(), 42, long, series(400, 10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), 32, "down one step"},
		{"drained, low only 5m: hold", bulk(), 42, long, series(900, 400, 60, 30, 0, 0, 0, 0, 0), 42, "between low"},
		{"drained, at min", bulk(), 2, long, series(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), 2, "already at min"},
		{"down never below min", Config{Min: 5, Max: 100, Step: 10}.WithDefaults("bulk"), 12, long, series(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), 5, "down one step"},
		// Sawtooth: the urgent lane's age rises and falls with bursts of
		// check-ins, peaks above high.
		{"sawtooth, rising peak: up", urgent(), 4, long, series(5, 20, 40, 5, 20, 45), 6, "1 step"},
		{"sawtooth, falling after a peak: hold", urgent(), 4, long, series(5, 20, 45, 31), 4, "falling"},
		{"sawtooth between thresholds: hold", urgent(), 6, long, series(3, 10, 20, 3, 10, 20, 3, 10, 20, 3, 10, 20), 6, "between low"},
		// A single spike: one minute with an old message, then nothing.
		{"spike now: up", urgent(), 4, long, series(0, 0, 0, 0, 90), 8, "3 step"},
		{"spike gone: hold, not yet low for 10m", urgent(), 10, long, series(0, 0, 90, 0, 0, 0), 10, "between low"},
		// Flapping: the age alternates across both thresholds. Up when
		// high and rising; never down, as it is never low for 10 minutes.
		{"flapping, high: up", urgent(), 4, long, series(0, 40, 0, 40, 0, 40), 6, "1 step"},
		{"flapping, low: hold", urgent(), 6, long, series(40, 0, 40, 0, 40, 0, 40, 0, 40, 0, 40, 0), 6, "between low"},
		// Missing data.
		{"no datapoints: hold", bulk(), 42, long, nil, 42, "no datapoint"},
		{"stale datapoints: hold", bulk(), 42, long, []Sample{{now.Add(-20 * time.Minute), 2000 * time.Second}}, 42, "no datapoint"},
		{"gaps, high: up", bulk(), 2, long, series(-1, 60, -1, -1, 180), 12, "1 step"},
		{"gaps in a low window, half reported: down", bulk(), 42, long, series(-1, 0, -1, 0, -1, 0, -1, 0, -1, 0, -1, 0), 32, "down one step"},
		{"too few low datapoints: hold", bulk(), 42, long, series(0, -1, -1, -1, -1, -1, -1, -1, 0, -1, 0), 42, "too few"},
		{"low datapoints only recent: hold", bulk(), 42, long, series(0, 0, 0, 0), 42, "too few"},
		// Bounds, applied at once whatever the cool-down.
		{"no cap set: max", bulk(), 0, now, series(0), 100, "no maximum concurrency"},
		{"below min", bulk(), 1, now, series(0), 2, "below min"},
		{"above max", bulk(), 500, now, series(5000), 100, "above max"},
		// Cool-down.
		{"cool-down: hold though high", bulk(), 12, now.Add(-90 * time.Second), series(300, 360), 12, "cool-down"},
		{"cool-down over: up", bulk(), 32, now.Add(-2 * time.Minute), series(300, 360), 62, "3 step"},
		{"cool-down: hold though low", bulk(), 42, now.Add(-time.Minute), series(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), 42, "cool-down"},
		// Datapoints after now (clock skew) are ignored.
		{"future datapoint ignored", bulk(), 2, long, append(series(0, 0), Sample{now.Add(time.Minute), time.Hour}), 2, "too few"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.c.Validate(); err != nil {
				t.Fatal(err)
			}
			d := Decide(now, tt.c, State{Current: tt.cur, LastChange: tt.lastChange, Samples: tt.samples})
			if d.To != tt.want || !strings.Contains(d.Reason, tt.reason) {
				t.Errorf("Decide = %d (%s), want %d (…%s…)", d.To, d.Reason, tt.want, tt.reason)
			}
			if d.From != tt.cur || d.Changed() != (tt.cur != tt.want) {
				t.Errorf("From %d, Changed %v: want %d, %v", d.From, d.Changed(), tt.cur, tt.cur != tt.want)
			}
			if d.To < tt.c.Min || d.To > tt.c.Max {
				t.Errorf("Decide = %d, outside [%d, %d]", d.To, tt.c.Min, tt.c.Max)
			}
		})
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
		for i := max(0, m-15); i <= m-2; i++ { // 15 minutes, lag 2
			samples = append(samples, Sample{start.Add(time.Duration(i) * time.Minute), time.Duration(ages[i]) * time.Second})
		}
		d := Decide(at, c, State{Current: cur, LastChange: last, Samples: samples})
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

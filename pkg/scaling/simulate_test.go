package scaling

import (
	"fmt"
	"testing"
	"time"
)

// The lanes of the deploy-wave simulation: a code deploy of 100,000 nodes
// enqueues every recompile on the bulk lane at t=0, while 100,000 agents
// check in every 30 minutes (55.6 a second), 1% of them needing a compile
// on the urgent lane.
func deployWave(bulkMax int) []SimLane {
	return []SimLane{
		{Name: "bulk", Config: Config{Min: 2, Max: bulkMax, Step: 10}.WithDefaults("bulk"), Start: 2, Burst: 100_000, Seed: 1},
		{Name: "urgent", Config: Config{Min: 2, Max: 50, Step: 2}.WithDefaults("urgent"), Start: 2, PerSec: 100_000.0 / 1800 * 0.01, Seed: 2},
	}
}

// go test -run TestDeployWaveSimulation -v ./pkg/scaling prints the tables
// of docs/benchmarks.md's section "Queue-age scaling".
func TestDeployWaveSimulation(t *testing.T) {
	const run = 80 * time.Minute
	res := Simulate(DefaultModel, run, deployWave(200)...)
	bulk, urgent := res[0], res[1]
	if testing.Verbose() {
		fmt.Printf("\nbulk max 200, step 10; urgent max 50, step 2; model %+v\n\n%s\n", DefaultModel, Markdown(res))
	}
	if bulk.Drained == 0 {
		t.Fatalf("the bulk lane did not drain 100,000 jobs in %v", run)
	}
	if bulk.Jobs < 100_000 {
		t.Fatalf("bulk lane finished %d jobs, want 100,000", bulk.Jobs)
	}
	// The urgent lane has its own mapping: the flood on the bulk lane
	// does not make its agents wait.
	if urgent.MaxAge > 30*time.Second {
		t.Errorf("urgent lane's age reached %v during the deploy", urgent.MaxAge)
	}
	for _, r := range res {
		c := deployWave(200)[0].Config
		if r.Name == "urgent" {
			c = deployWave(200)[1].Config
		}
		for i, m := range r.Minutes {
			if m.Cap < c.Min || m.Cap > c.Max || m.Running > m.Cap {
				t.Errorf("%s minute %d: cap %d, running %d, outside [%d, %d]", r.Name, i, m.Cap, m.Running, c.Min, c.Max)
			}
		}
	}
	// After the deploy the bulk lane comes back down to its min.
	if last := bulk.Minutes[len(bulk.Minutes)-1]; last.Cap != 2 {
		t.Errorf("bulk lane's cap %d at the end, want its min 2", last.Cap)
	}

	// How the bulk lane's max bounds the deploy's duration, and what
	// scaling from the min costs against a cap set at the max beforehand.
	if testing.Verbose() {
		fmt.Printf("| bulk max | drained after | bulk age at most | cap changes | urgent age at most | drained with the cap at max from t=0 |\n|--:|--:|--:|--:|--:|--:|\n")
	}
	var prev time.Duration
	for _, max := range []int{50, 100, 200, 500, 1000} {
		r := Simulate(DefaultModel, 8*time.Hour, deployWave(max)...)
		fixed := deployWave(max)
		fixed[0].Start = max
		f := Simulate(DefaultModel, 8*time.Hour, fixed...)
		if testing.Verbose() {
			fmt.Printf("| %d | %v | %v | %d | %v | %v |\n", max, r[0].Drained, r[0].MaxAge, r[0].Changes, r[1].MaxAge, f[0].Drained)
		}
		if r[0].Drained == 0 || prev != 0 && r[0].Drained > prev {
			t.Errorf("bulk max %d: drained after %v, the smaller max after %v", max, r[0].Drained, prev)
		}
		if f[0].Drained > r[0].Drained {
			t.Errorf("bulk max %d: drained after %v from the max, after %v scaling from the min", max, f[0].Drained, r[0].Drained)
		}
		prev = r[0].Drained
	}
}

// A busier urgent lane: 10% of check-ins need a compile (5.6 a second,
// more than the min's 2 concurrent compiles serve), e.g. while agents
// report changed facts after an OS update. The urgent lane scales up,
// keeps its age bounded, and comes back down when the rate falls back.
func TestUrgentSurgeSimulation(t *testing.T) {
	lanes := deployWave(200)[1:]
	lanes[0].PerSec = 100_000.0 / 1800 * 0.10
	surge := Simulate(DefaultModel, 30*time.Minute, lanes...)[0]
	if testing.Verbose() {
		fmt.Printf("\nurgent lane at 10%% compiles (%.1f/s), max 50, step 2\n\n%s\n", lanes[0].PerSec, Markdown([]LaneResult{surge}))
	}
	last := surge.Minutes[len(surge.Minutes)-1]
	if surge.MaxAge > 10*time.Minute || last.Age > lanes[0].Config.High || last.Backlog > 100 {
		t.Errorf("urgent surge: age at most %v, at the end %v with %d jobs waiting", surge.MaxAge, last.Age, last.Backlog)
	}
}

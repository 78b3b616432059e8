// Package latency summarises a sample of durations as the measuring tools
// (bench/loadgen, bench/agentsim) report them: nearest-rank
// percentiles, maximum and mean, in milliseconds.
package latency

import (
	"math"
	"slices"
	"time"
)

// Summary of a latency sample, in milliseconds (to the microsecond).
type Summary struct {
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
	Max  float64 `json:"max"`
	Mean float64 `json:"mean"`
}

// Summarize sorts d in place and summarises it: each percentile is the
// nearest-rank one (the smallest value with at least q of the sample at or
// below it). An empty sample gives zeros.
func Summarize(d []time.Duration) Summary {
	if len(d) == 0 {
		return Summary{}
	}
	slices.Sort(d)
	at := func(q float64) float64 {
		i := int(math.Ceil(q*float64(len(d)))) - 1
		return ms(d[min(max(i, 0), len(d)-1)])
	}
	var sum time.Duration
	for _, x := range d {
		sum += x
	}
	return Summary{P50: at(.50), P90: at(.90), P99: at(.99), Max: ms(d[len(d)-1]), Mean: ms(sum / time.Duration(len(d)))}
}

func ms(d time.Duration) float64 { return math.Round(float64(d)/1e3) / 1e3 }

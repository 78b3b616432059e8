package latency

import (
	"testing"
	"time"
)

func TestSummarize(t *testing.T) {
	msd := func(v ...int) []time.Duration {
		var d []time.Duration
		for _, x := range v {
			d = append(d, time.Duration(x)*time.Millisecond)
		}
		return d
	}
	var hundred []time.Duration
	for i := 100; i >= 1; i-- {
		hundred = append(hundred, time.Duration(i)*time.Millisecond)
	}
	for _, tc := range []struct {
		what string
		in   []time.Duration
		want Summary
	}{
		{"empty", nil, Summary{}},
		{"one", msd(7), Summary{P50: 7, P90: 7, P99: 7, Max: 7, Mean: 7}},
		{"two: p50 is the lower", msd(10, 20), Summary{P50: 10, P90: 20, P99: 20, Max: 20, Mean: 15}},
		{"1..100 reversed", hundred, Summary{P50: 50, P90: 90, P99: 99, Max: 100, Mean: 50.5}},
		{"an outlier shows in p99 of 100 only as the max", append(msd(make([]int, 99)...), 5*time.Second),
			Summary{P50: 0, P90: 0, P99: 0, Max: 5000, Mean: 50}},
		{"microseconds kept", []time.Duration{1500 * time.Microsecond}, Summary{P50: 1.5, P90: 1.5, P99: 1.5, Max: 1.5, Mean: 1.5}},
	} {
		if got := Summarize(tc.in); got != tc.want {
			t.Errorf("%s: Summarize = %+v, want %+v", tc.what, got, tc.want)
		}
	}
}

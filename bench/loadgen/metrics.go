package main

import (
	"context"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/compilefarm/compilefarm/bench/internal/brokermetrics"
)

// cpuSeconds is this process's user+system CPU time so far.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	tv := func(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
	return tv(ru.Utime) + tv(ru.Stime)
}

// measureAround records loadgen and broker CPU and the broker's counters
// across fn.
func measureAround(ctx context.Context, metricsURL string, res *Result, fn func()) {
	before, _ := brokermetrics.Scrape(ctx, metricsURL)
	c0 := cpuSeconds()
	m0, _, mok := machineCPU()
	fn()
	res.LoadgenCPU = round(cpuSeconds()-c0, 2)
	m1, _, mok2 := machineCPU()
	if mok && mok2 && res.Seconds > 0 {
		res.MachineCores = round((m1-m0)/res.Seconds, 2)
	}
	after, err := brokermetrics.Scrape(ctx, metricsURL)
	if err != nil || before == nil {
		return
	}
	res.Outcomes = brokermetrics.CounterDeltas(before, after)
	if cpu := after["process_cpu_seconds_total"] - before["process_cpu_seconds_total"]; cpu > 0 {
		res.BrokerCPU = round(cpu, 2)
		if res.MachineCores > 0 {
			res.OtherCores = round(max(res.MachineCores-(cpu+res.LoadgenCPU)/res.Seconds, 0), 2)
		}
		if res.Requests > 0 {
			res.BrokerCPUUsec = round(cpu/float64(res.Requests)*1e6, 0)
		}
	}
}

func round(x float64, digits int) float64 {
	p := 1.0
	for range digits {
		p *= 10
	}
	return float64(int64(x*p+0.5)) / p
}

// compileDurations reads, from the broker's operator API (at adminURL; only
// when the broker's /metrics are given), how long each of these nodes' last
// compile took.
func compileDurations(ctx context.Context, metricsURL, adminURL string, names []string) ([]time.Duration, error) {
	if metricsURL == "" {
		return nil, nil
	}
	nodes, err := adminNodes(ctx, adminURL)
	if err != nil {
		return nil, err
	}
	var out []time.Duration
	for _, name := range names {
		if c := nodes[name].Compile; c != nil && c.Result == "ok" && c.Duration > 0 {
			out = append(out, c.Duration)
		}
	}
	return out, nil
}

// machineCPU returns the machine's busy and total CPU time in seconds
// since boot (Linux /proc/stat; ok is false elsewhere).
func machineCPU() (busy, total float64, ok bool) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, false
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 5 || f[0] != "cpu" {
		return 0, 0, false
	}
	var idle float64
	for i, s := range f[1:] {
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return 0, 0, false
		}
		if i >= 8 { // guest and guest_nice are already in user and nice
			break
		}
		total += v
		if i == 3 || i == 4 { // idle, iowait
			idle += v
		}
	}
	const hz = 100 // USER_HZ, 100 on every Linux architecture Go supports
	return (total - idle) / hz, total / hz, true
}

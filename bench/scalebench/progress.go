package main

import (
	"fmt"
	"io"
	"runtime"
	"sync"
	"time"

	"github.com/compilefarm/compilefarm/bench/internal/numfmt"
	"github.com/compilefarm/compilefarm/bench/internal/procstat"
)

// progress writes what the benchmark is doing to stderr, each line with
// the part it is in and the time since the start.
type progress struct {
	w     io.Writer
	part  string
	start time.Time
	mu    *sync.Mutex
}

func newProgress(w io.Writer) *progress {
	return &progress{w: w, start: time.Now(), mu: &sync.Mutex{}}
}

// in returns a progress for a part of the benchmark.
func (p *progress) in(part string) *progress {
	q := *p
	q.part = part
	return &q
}

func (p *progress) printf(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	el := time.Since(p.start).Round(time.Second)
	if p.part != "" {
		fmt.Fprintf(p.w, "scalebench %8s %s: %s\n", el, p.part, fmt.Sprintf(format, args...))
		return
	}
	fmt.Fprintf(p.w, "scalebench %8s %s\n", el, fmt.Sprintf(format, args...))
}

// every calls fn with the time since every was called, each period, until
// the returned stop is called.
func (p *progress) every(period time.Duration, fn func(elapsed time.Duration)) (stop func()) {
	start := time.Now()
	return tick(period, func() { fn(time.Since(start)) })
}

// tick calls fn each period, in a goroutine, until the returned stop is
// called; stop returns once fn no longer runs.
func tick(period time.Duration, fn func()) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(period)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				fn()
			}
		}
	})
	return func() { close(done); wg.Wait() }
}

// watch reports what an operation over many nodes has done so far, from
// the counter of the component doing it, every 5 seconds until stop: a
// deploy or a status over 100,000 nodes takes long enough to need it.
func (p *progress) watch(what string, c *counter) (stop func()) {
	before := c.Snapshot()
	return p.every(5*time.Second, func(el time.Duration) {
		d := c.Snapshot().Sub(before)
		p.printf("%s: %s so far: %s node records read (%s index pages), %s updated, %s jobs queued", what, el.Round(time.Second),
			numfmt.Int(d.QueryNodes), numfmt.Int(d.QueryPages), numfmt.Int(d.UpdateNode), numfmt.Int(d.Enqueued))
	})
}

// memPeak samples the Go heap and the process's resident set while it
// runs: the peaks of an operation.
type memPeak struct {
	HeapBeforeMB float64 `json:"heap_before_mb"`
	PeakHeapMB   float64 `json:"peak_heap_mb"` // runtime.MemStats.HeapAlloc
	RSSBeforeMB  float64 `json:"rss_before_mb"`
	PeakRSSMB    float64 `json:"peak_rss_mb"` // VmRSS
}

// sampleMemory starts sampling every period (after a GC, so the "before"
// values are what is live); stop returns the peaks.
func sampleMemory(period time.Duration) (stop func() memPeak) {
	runtime.GC()
	var m memPeak
	m.HeapBeforeMB, m.RSSBeforeMB = heapMB(), rssMB()
	m.PeakHeapMB, m.PeakRSSMB = m.HeapBeforeMB, m.RSSBeforeMB
	var mu sync.Mutex
	sample := func() {
		h, r := heapMB(), rssMB()
		mu.Lock()
		m.PeakHeapMB, m.PeakRSSMB = max(m.PeakHeapMB, h), max(m.PeakRSSMB, r)
		mu.Unlock()
	}
	stopSampling := tick(period, sample)
	return func() memPeak {
		stopSampling()
		sample()
		return m
	}
}

func heapMB() float64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return float64(ms.HeapAlloc) / (1 << 20)
}

// rssMB is the process's resident set in MiB; 0 where there is no /proc.
func rssMB() float64 {
	b, _ := procstat.ResidentBytes(0)
	return float64(b) / (1 << 20)
}

package main

import (
	"context"
	"fmt"
	"time"

	"github.com/compilefarm/compilefarm/bench/internal/latency"
)

// route is the routing phase: the controllers connect, then each keeps
// o.inflight echo requests in flight to random agents for o.duration.
func (bn *bench) route(ctx context.Context) error {
	o, res, b, progress := bn.o, bn.res, bn.b, bn.progress
	agents := bn.ids[:o.conns]
	targets := make([]string, len(agents))
	for i, a := range agents {
		targets[i] = a.uri
	}
	var cs []*controller
	for _, id := range bn.ids[o.conns:] {
		c, err := dialController(ctx, bn.d, id, o.inflight)
		if err != nil {
			for _, c := range cs {
				c.ws.Close()
			}
			return err
		}
		cs = append(cs, c)
	}
	st0, err := b.stats(ctx, false)
	if err != nil {
		return err
	}
	progress(fmt.Sprintf("routing: %d controllers × %d requests in flight, for %s", len(cs), o.inflight, o.duration))
	bn.cpuProfile(ctx, "broker-cpu-routing.pprof")
	m0 := mark(b.pid)
	end := time.Now().Add(o.duration)
	done := make(chan struct{})
	for _, c := range cs {
		go func() { c.run(ctx, targets, end); done <- struct{}{} }()
	}
	tick := time.NewTicker(o.progressEvery)
	defer tick.Stop()
	endTimer := time.NewTimer(time.Until(end))
	defer endTimer.Stop()
	endC := endTimer.C
	var m1 cpuMark
	var st1 brokerStats
	for waiting := len(cs); waiting > 0; {
		select {
		case <-done:
			waiting--
		case <-tick.C:
			var n int64
			for _, c := range cs {
				n += c.answered.Load()
			}
			progress(fmt.Sprintf("routing: %d round trips", n))
		case <-endC:
			endC = nil
			m1 = mark(b.pid)
			st1, _ = b.stats(ctx, false)
			bn.cpuProfile(ctx, "")
		}
	}
	if m1.at.IsZero() {
		m1 = mark(b.pid)
	}
	res.Routing = m0.to(m1)
	var rtts []time.Duration
	res.RouteErrors = map[string]int64{}
	for _, c := range cs {
		res.RoundTrips += c.inWindow.Load()
		res.RouteSent += c.sent.Load()
		res.RouteLost += c.lost.Load()
		rtts = append(rtts, c.rtts...)
		for k, v := range c.errTypes {
			res.RouteErrors[k] += v
		}
	}
	res.RTT = latency.Summarize(rtts)
	// Stats' messages_routed: deliveries to clients held by the broker.
	if a, ok := st0.Broker["messages_routed"].(float64); ok {
		if z, ok := st1.Broker["messages_routed"].(float64); ok {
			res.BrokerRouted = z - a
		}
	}
	progress(fmt.Sprintf("routing: %d round trips in %s (%.0f/s), p50 %.2f ms, p99 %.2f ms, %d lost",
		res.RoundTrips, round(res.Routing.Wall), float64(res.RoundTrips)/res.Routing.Wall.Seconds(), res.RTT.P50, res.RTT.P99, res.RouteLost))
	return nil
}

package main

import (
	"fmt"
	"io"
	"runtime"
	"sort"
	"strings"

	"github.com/compilefarm/compilefarm/bench/internal/numfmt"
	"github.com/compilefarm/compilefarm/bench/internal/textwrap"
)

// writeMarkdown writes the run as docs/benchmarks.md's section "PCP
// broker: N connections".
func (r *result) writeMarkdown(w io.Writer) {
	p := func(format string, a ...any) { fmt.Fprintf(w, format+"\n", a...) }
	p("## PCP broker: %s connections", numfmt.Int(int64(r.Conns)))
	p("")
	tlsv := r.TLSVersion
	if tlsv == "" || strings.HasPrefix(tlsv, "0x") {
		tlsv = "TLS"
	}
	restart := "SIGTERM (it stops listening and closes every connection, 1001) and, once it has exited,"
	if r.RestartSignal == "SIGKILL" {
		restart = "SIGKILL (a crash) and, once it is gone,"
	}
	para := func(format string, a ...any) { p("%s", textwrap.Wrap(fmt.Sprintf(format, a...), 100)); p("") }
	para("One broker process (`pcpbench serve`: `pkg/pcp/broker` alone in its process, TLS 1.2 or later, "+
		"client certificates required and verified) holds %s PCP v1 connections that the driver "+
		"(`pcpbench run`, bench/pcpbench) opens on loopback as pxp-agent does: `wss://…/pcp/`, a full "+
		"%s handshake with a client certificate of its own (ECDSA P-256, CN `agent-NNNNN.pcpbench.test`, "+
		"from a CA made for the run), then an `associate_request` with an envelope only, %d dials at a time. "+
		"Then %d controllers (client type `controller`) each keep %d PXP echo requests (`rpc_blocking_request`) "+
		"in flight to random agents for %s; an agent answers with an `rpc_blocking_response` to the sender, "+
		"so a round trip is two messages the broker routes. Then the broker gets %s a new one starts on the "+
		"same address; the agents reconnect with pxp-agent's backoff (200 ms after the close, then 2 s, 4 s, "+
		"… 32 s between tries, ±0.5 s; each try bounded by pxp-agent's 5 s connection and 15 s association "+
		"timeouts).", numfmt.Int(int64(r.Conns)), tlsv, r.DialAtOnce, r.Controllers, r.Inflight, r.Duration, restart)
	para("Memory is the broker's VmRSS, its Go heap in use after a collection and its goroutine stacks; " +
		"CPU is user + system time from /proc. The driver's agents share the machine's CPUs with the broker, " +
		"and their side of each TLS handshake costs about as much as the broker's: real agents bring their " +
		"own CPUs. The broker's TLS is `broker serve`'s (pkg/ca's server configuration).")
	if r.Failed != "" {
		p("**The run stopped early: %s.** The rows below without a value were not measured.", r.Failed)
		p("")
	}
	n := float64(r.Conns)
	p("| | |")
	p("|:--|--:|")
	p("| connections, each with its own certificate | %s |", numfmt.Int(int64(r.Conns)))
	if r.Associated >= r.Conns {
		p("| time to associate all | %s (%s tries, %s failed) |", secs(r.Associate.Wall.Seconds()),
			numfmt.Int(r.AssocAttempts), numfmt.Int(r.AssocFailures))
	} else {
		p("| time to associate all | not reached: %s of %s |", numfmt.Int(int64(r.Associated)), numfmt.Int(int64(r.Conns)))
	}
	if r.After.RSS > 0 {
		p("| broker RSS, before → with all connections | %s → %s |", mib(r.Before.RSS), mib(r.After.RSS))
		p("| memory per connection: RSS / Go heap after a GC / goroutine stacks | %s / %s / %s |",
			kib(float64(r.After.RSS-r.Before.RSS)/n), kib((float64(r.After.Heap)-float64(r.Before.Heap))/n),
			kib((float64(r.After.Stacks)-float64(r.Before.Stacks))/n))
		p("| broker goroutines, before → with all connections (per connection) | %s → %s (%.2f) |",
			numfmt.Int(int64(r.Before.Goroutines)), numfmt.Int(int64(r.After.Goroutines)), float64(r.After.Goroutines-r.Before.Goroutines)/n)
		p("| broker open descriptors with all connections | %s |", numfmt.Int(int64(r.After.FDs)))
	}
	if r.Routing.Wall > 0 {
		routed := 2 * float64(r.RoundTrips) / r.Routing.Wall.Seconds()
		cell := fmt.Sprintf("%s", numfmt.Int(int64(routed+0.5)))
		if r.BrokerRouted >= 0 {
			cell += fmt.Sprintf(" (the broker's count: %s)", numfmt.Int(int64(r.BrokerRouted/r.Routing.Wall.Seconds()+0.5)))
		}
		p("| messages routed per second (2 per echo round trip) | %s |", cell)
		p("| echo round trips per second | %s |", numfmt.Int(int64(float64(r.RoundTrips)/r.Routing.Wall.Seconds()+0.5)))
		p("| round trip p50 / p99 / max | %.2f / %.2f / %.1f ms |", r.RTT.P50, r.RTT.P99, r.RTT.Max)
		p("| requests sent / unanswered after %s / broker error replies | %s / %s / %s |", requestTTL,
			numfmt.Int(r.RouteSent), numfmt.Int(r.RouteLost), errorTypes(r.RouteErrors))
	}
	if r.Shutdown > 0 {
		sig := r.RestartSignal
		stop := "exited"
		if !r.RestartGraceful {
			stop = "did not exit within 10 s: SIGKILL"
		}
		if r.Reassociated >= r.Conns {
			p("| re-association after a restart: all associated again | %s after %s |", secs(r.Restart.Wall.Seconds()), sig)
		} else {
			p("| re-association after a restart | not reached: %s of %s after %s |", numfmt.Int(int64(r.Reassociated)),
				numfmt.Int(int64(r.Conns)), secs(r.Restart.Wall.Seconds()))
		}
		var curve []string
		for _, d := range r.ReassocCurve {
			if d == 0 {
				curve = append(curve, "–")
			} else {
				curve = append(curve, secs(d.Seconds()))
			}
		}
		p("| 50%% / 90%% / 99%% / all associated again, after %s | %s |", sig, strings.Join(curve, " / "))
		p("| the old broker %s / the new one listening, after %s | %s / %s |", stop, sig, secs(r.Shutdown.Seconds()), secs(r.Listening.Seconds()))
		p("| re-association tries / failed | %s / %s |", numfmt.Int(r.ReassocAttempts), numfmt.Int(r.ReassocFailures))
	}
	if r.AfterRestart.RSS > 0 {
		p("| new broker RSS with all connections again | %s |", mib(r.AfterRestart.RSS))
	}
	p("")
	p("| phase | wall | broker CPU | driver CPU | other processes' CPU |")
	p("|:--|--:|--:|--:|--:|")
	row := func(name string, c phaseCPU) {
		if c.Wall > 0 {
			p("| %s | %s | %s | %s | %s |", name, secs(c.Wall.Seconds()), secs(c.Broker), secs(c.Driver), secs(c.Others))
		}
	}
	row(fmt.Sprintf("associate %s", numfmt.Int(int64(r.Conns))), r.Associate)
	row("routing", r.Routing)
	row("restart and re-associate (old broker's shutdown + new broker)", r.Restart)
	if r.Associate.Wall > 0 && r.Associated > 0 {
		p("")
		text := fmt.Sprintf("Broker CPU per association: %.2f ms (first connections), %s (after the restart: "+
			"the old broker's shutdown and the new one's start included).",
			1000*r.Associate.Broker/float64(r.Associated), perConn(r.Restart.Broker, r.Reassociated))
		if r.RoundTrips > 0 {
			text += fmt.Sprintf(" Broker CPU per message routed: %.0f µs (its CPU time over the routing phase, "+
				"divided by two messages per round trip).", 1e6*r.Routing.Broker/(2*float64(r.RoundTrips)))
		}
		p("%s", textwrap.Wrap(text, 100))
	}
	// block is a paragraph after a blank line.
	block := func(format string, a ...any) { p(""); p("%s", textwrap.Wrap(fmt.Sprintf(format, a...), 100)) }
	if len(r.Errors) > 0 {
		block("Failed tries while associating the first time, by error: %s.", strings.Join(r.Errors, "; "))
	}
	if len(r.Closes) > 0 {
		block("How the agents' connections ended at the restart: %s.", strings.Join(r.Closes, "; "))
	}
	if len(r.ReassocErrors) > 0 {
		block("Failed tries while associating again, by error: %s.", strings.Join(r.ReassocErrors, "; "))
	}
	if c := brokerCounters(r.BrokerStatsAfter); c != "" {
		block("The new broker's counters at the end (those not zero): %s.", c)
	}
	others, wall := r.Associate.Others+r.Routing.Others+r.Restart.Others, r.Associate.Wall+r.Routing.Wall+r.Restart.Wall
	text := fmt.Sprintf("Machine: %s; %s; load average %s before the run, %s after.", r.Machine, runtime.Version(),
		r.LoadBefore, r.LoadAfter)
	if wall > 0 && others/wall.Seconds() > 0.25 {
		text += fmt.Sprintf(" Other processes kept %.2f CPUs busy on average during the measured phases (last column "+
			"of the phase table): the broker and the driver shared the machine with them, so these numbers are "+
			"lower than a quiet machine gives.", others/wall.Seconds())
	}
	block("%s", text)
	p("")
	p("```")
	p("go build -o pcpbench ./bench/pcpbench   # make bench: bench/run.sh, PCPBENCH_CONNS")
	p("%s", r.Command)
	p("```")
}

// writeText is the summary run prints on stderr at the end.
func (r *result) writeText(w io.Writer) {
	fmt.Fprintf(w, "pcpbench: %s connections associated in %s; RSS %s → %s (%s per connection); %d round trips in %s, p50 %.2f ms p99 %.2f ms; re-associated in %s after %s\n",
		numfmt.Int(int64(r.Associated)), secs(r.Associate.Wall.Seconds()), mib(r.Before.RSS), mib(r.After.RSS),
		kib(float64(r.After.RSS-r.Before.RSS)/float64(max(1, r.Conns))), r.RoundTrips, secs(r.Routing.Wall.Seconds()),
		r.RTT.P50, r.RTT.P99, secs(r.Restart.Wall.Seconds()), r.RestartSignal)
}

// brokerCounters lists the broker's statistics that say something went
// wrong (or was refused), when not zero.
func brokerCounters(st map[string]any) string {
	var parts []string
	for _, k := range []string{"undeliverable", "expired", "unauthorized", "rejected", "errors", "idle_closed", "revoked_closed"} {
		if v, ok := st[k].(float64); ok && v != 0 {
			parts = append(parts, fmt.Sprintf("%s %s", k, numfmt.Int(int64(v))))
		}
	}
	return strings.Join(parts, ", ")
}

func perConn(cpu float64, n int) string {
	if n <= 0 {
		return "not measured"
	}
	return fmt.Sprintf("%.2f ms", 1000*cpu/float64(n))
}

func errorTypes(m map[string]int64) string {
	if len(m) == 0 {
		return "0"
	}
	var parts []string
	for k, v := range m {
		parts = append(parts, fmt.Sprintf("%s %s", numfmt.Int(v), strings.TrimPrefix(k, "http://puppetlabs.com/")))
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}

func secs(s float64) string {
	switch {
	case s >= 10:
		return fmt.Sprintf("%.1f s", s)
	default:
		return fmt.Sprintf("%.2f s", s)
	}
}

func kib(b float64) string { return fmt.Sprintf("%.1f KiB", b/1024) }

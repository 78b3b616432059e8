package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/compilefarm/compilefarm/bench/internal/numfmt"
	"github.com/compilefarm/compilefarm/pkg/facts"
	"github.com/compilefarm/compilefarm/pkg/intake"
)

// fleet makes the facts documents of synthetic nodes from one recorded
// agent's upload: node i has its own certname, host name, FQDN and IP
// address, every other fact as the agent sent it (~17 KB, ~120 facts).
type fleet struct {
	// parts is the template cut at each value that identifies the agent:
	// literal bytes, then the value to put in their place.
	parts  []part
	size   int
	prefix string // certnames are PREFIX-NNNNNN.DOMAIN
	domain string
}

// part is a stretch of the template and what follows it.
type part struct {
	text []byte
	hole hole
}

// hole is a per-node value in the template.
type hole int

const (
	holeNone hole = iota
	holeCertname
	holeFQDN
	holeHostname
	holeIP
	holeVardir
)

// The recorded agent's values that identify it, and what each becomes.
var templateHoles = []struct {
	text string
	hole hole
}{
	{`"agent1.example.test"`, holeCertname},
	{`"fqdn": "vm"`, holeFQDN},
	{`"hostname": "vm"`, holeHostname},
	{`"192.0.2.2"`, holeIP},
	{`/agent1/`, holeVardir},
}

// loadFleet reads the template facts document and cuts it at the values
// fleet rewrites, all of which but the var directory it must have.
func loadFleet(path, prefix, domain string) (*fleet, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read the template facts: %w", err)
	}
	f := &fleet{prefix: prefix, domain: domain, size: len(b)}
	for len(b) > 0 {
		at, which := len(b), -1
		for i, h := range templateHoles {
			if j := bytes.Index(b, []byte(h.text)); j >= 0 && j < at {
				at, which = j, i
			}
		}
		if which < 0 {
			f.parts = append(f.parts, part{text: b})
			break
		}
		f.parts = append(f.parts, part{text: b[:at], hole: templateHoles[which].hole})
		b = b[at+len(templateHoles[which].text):]
	}
	for _, h := range templateHoles[:4] {
		if !slices.ContainsFunc(f.parts, func(p part) bool { return p.hole == h.hole }) {
			return nil, fmt.Errorf("template facts %s have no %s to rewrite per node", path, h.text)
		}
	}
	return f, nil
}

func (f *fleet) hostname(i int) string { return fmt.Sprintf("%s-%06d", f.prefix, i) }

// certname is node i's certname; certnames sort in node order.
func (f *fleet) certname(i int) string { return f.hostname(i) + "." + f.domain }

// ip is node i's address: 10.0.0.0/8, then 172.16.0.0/12 for variant 1
// (a changed address). Both end in the same two octets, so node i's /28
// holds the same 16 nodes (the exports environment's "rack").
func ip(i, variant int) string {
	if variant == 0 {
		return fmt.Sprintf("10.%d.%d.%d", (i>>16)&255, (i>>8)&255, i&255)
	}
	return fmt.Sprintf("172.%d.%d.%d", 16+(i>>16)&15, (i>>8)&255, i&255)
}

// doc is node i's facts document; variant 1 has another IP address.
func (f *fleet) doc(i, variant int) []byte {
	certname, host := f.certname(i), f.hostname(i)
	b := make([]byte, 0, f.size+64)
	for _, p := range f.parts {
		b = append(b, p.text...)
		switch p.hole {
		case holeCertname:
			b = append(append(append(b, '"'), certname...), '"')
		case holeFQDN:
			b = append(append(append(b, `"fqdn": "`...), certname...), '"')
		case holeHostname:
			b = append(append(append(b, `"hostname": "`...), host...), '"')
		case holeIP:
			b = append(append(append(b, '"'), ip(i, variant)...), '"')
		case holeVardir:
			b = append(append(append(b, '/'), host...), '/')
		}
	}
	return b
}

// submit uploads node i's facts through the intake, as the front door
// does for an agent's PUT /puppet/v3/facts.
func (f *fleet) submit(ctx context.Context, in *intake.Intake, environment string, i, variant int) (intake.Outcome, error) {
	doc := f.doc(i, variant)
	out, err := in.Submit(ctx, intake.Upload{
		Certname: f.certname(i), Environment: environment,
		Facts: facts.JSONDocument(doc),
	})
	if err != nil {
		return out, fmt.Errorf("submit facts of %s: %w", f.certname(i), err)
	}
	return out, nil
}

// createResult is what creating a range of nodes did.
type createResult struct {
	Nodes   int           `json:"nodes"`
	Queued  int           `json:"queued"` // uploads that queued a compile
	Elapsed time.Duration `json:"elapsed_ns"`
}

// create submits the facts of nodes [from, to) with concurrency
// goroutines, reporting progress every few seconds. It stops at the first
// error.
func (f *fleet) create(ctx context.Context, in *intake.Intake, environment string, from, to, concurrency int, p *progress) (createResult, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		next, done, queued atomic.Int64
		errOnce            sync.Once
		firstErr           error
		wg                 sync.WaitGroup
	)
	next.Store(int64(from))
	start := time.Now()
	for range max(concurrency, 1) {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= to {
					return
				}
				out, err := f.submit(ctx, in, environment, i, 0)
				if err != nil {
					errOnce.Do(func() { firstErr = err; cancel() })
					return
				}
				if out.Queued {
					queued.Add(1)
				}
				done.Add(1)
			}
		})
	}
	stop := p.every(5*time.Second, func(elapsed time.Duration) {
		n := done.Load()
		p.printf("created %s of %s nodes (%s/s)", numfmt.Int(int64(from)+n), numfmt.Int(int64(to)), fmtRate(float64(n), elapsed))
	})
	wg.Wait()
	stop()
	res := createResult{Nodes: int(done.Load()), Queued: int(queued.Load()), Elapsed: time.Since(start)}
	if firstErr != nil {
		return res, firstErr
	}
	if err := ctx.Err(); err != nil {
		return res, fmt.Errorf("create nodes: %w", err)
	}
	return res, nil
}

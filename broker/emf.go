package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/compilefarm/compilefarm/pkg/metrics"
	"github.com/compilefarm/compilefarm/pkg/metrics/emf"
)

// emfFlags are --emf-interval and --emf-stage: the front door's metrics
// written to the log as CloudWatch embedded-metric-format lines.
type emfFlags struct {
	interval time.Duration
	stage    string
}

func (f *emfFlags) register(fs *flag.FlagSet) {
	fs.DurationVar(&f.interval, "emf-interval", 0,
		"every this often, write one CloudWatch embedded-metric-format line (JSON) to stderr with the interval's front door requests, "+
			"4xx, 5xx, refusals, catalog outcomes and latency, for CloudWatch Logs to turn into metrics (namespace "+emf.Namespace+"); 0: off")
	fs.StringVar(&f.stage, "emf-stage", "", "the Stage dimension of the EMF metrics (the stack's stage); required with --emf-interval")
}

func (f *emfFlags) validate() error {
	switch {
	case f.interval < 0:
		return fmt.Errorf("--emf-interval %s is negative (0 turns EMF lines off)", f.interval)
	case f.interval > 0 && f.interval < time.Second:
		return fmt.Errorf("--emf-interval %s is below a second (CloudWatch stores at most one data point a second)", f.interval)
	case f.interval > 0 && f.stage == "":
		return fmt.Errorf("--emf-interval needs --emf-stage NAME: the Stage dimension of the metrics")
	}
	return nil
}

// start runs the EMF writer on m until ctx ends (nothing when off) and
// returns a function that stops it after its last line.
func (f *emfFlags) start(ctx context.Context, m *metrics.Farm, out io.Writer, log *slog.Logger) (stop func()) {
	if f.interval <= 0 {
		return func() {}
	}
	w := &emf.Writer{Out: out, Namespace: emf.Namespace, Dimensions: map[string]string{"Stage": f.stage}, Metrics: emf.FrontDoor(m)}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := w.Run(ctx, f.interval); err != nil {
			log.Error("EMF metric lines stopped; CloudWatch gets no front door metrics from this process", "err", err)
		}
	}()
	return func() { cancel(); <-done }
}

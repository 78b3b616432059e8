package main

import (
	"fmt"

	"github.com/compilefarm/compilefarm/bench/internal/procstat"
)

// brokerSample is one look at the broker process.
type brokerSample struct {
	cpu        float64 // the broker process (Go: front door, intake, queue)
	workersCPU float64 // its descendants (Ruby compile workers), living and exited
	rss        int64
	fds        int
}

// sampleBroker looks at the broker process pid: its CPU and, with
// workers, its descendants' (a scan of /proc: for the start and end of a
// round, not every second).
func sampleBroker(pid int, workers bool) (brokerSample, error) {
	st, err := procstat.ReadStat(pid)
	if err != nil {
		return brokerSample{}, fmt.Errorf("broker process %d: %w", pid, err)
	}
	rss, err := procstat.ResidentBytes(pid)
	if err != nil {
		return brokerSample{}, fmt.Errorf("broker process %d: %w", pid, err)
	}
	fds, err := procstat.OpenFDs(pid)
	if err != nil {
		return brokerSample{}, fmt.Errorf("broker process %d: %w", pid, err)
	}
	s := brokerSample{cpu: st.CPU, rss: rss, fds: fds}
	if workers {
		s.workersCPU = st.ChildrenCPU + procstat.DescendantsCPU(pid)
	}
	return s, nil
}

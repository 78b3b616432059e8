package main

import (
	"fmt"
	"runtime"

	"github.com/compilefarm/compilefarm/bench/internal/procstat"
)

// machine describes this machine in one line: CPU model, CPUs, memory.
func machine() string {
	model, err := procstat.CPUModel()
	if err != nil {
		model = "unknown CPU"
	}
	mem := ""
	if b, err := procstat.MemTotal(); err == nil {
		mem = fmt.Sprintf(", %.1f GiB", float64(b)/(1<<30))
	}
	return fmt.Sprintf("%s, %d CPUs%s", model, runtime.NumCPU(), mem)
}

// loadAverage is the machine's load average over 1, 5 and 15 minutes, or
// "unknown".
func loadAverage() string {
	load, err := procstat.LoadAverage()
	if err != nil {
		return "unknown"
	}
	return load
}

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// clockTicks is USER_HZ, the unit of /proc's CPU times: 100 on every Linux
// architecture Go supports.
const clockTicks = 100

// procStat is what /proc/PID/stat says of one process.
type procStat struct {
	ppid        int
	cpu         float64 // user + system seconds
	childrenCPU float64 // of its children that exited and were waited for
}

// readStat reads /proc/PID/stat.
func readStat(pid int) (procStat, error) {
	var st procStat
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return st, err
	}
	// The command name, in parentheses, may hold spaces: fields start
	// after its last ')'.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return st, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 15 {
		return st, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	// f[0] is field 3 (state): ppid is field 4, utime..cstime 14..17.
	num := func(j int) float64 { v, _ := strconv.ParseFloat(f[j], 64); return v }
	st.ppid = int(num(1))
	st.cpu = (num(11) + num(12)) / clockTicks
	st.childrenCPU = (num(13) + num(14)) / clockTicks
	return st, nil
}

// residentBytes is pid's VmRSS (from /proc/PID/status).
func residentBytes(pid int) (int64, error) {
	s, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(s), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("/proc/%d/status: VmRSS %q", pid, v)
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("/proc/%d/status has no VmRSS", pid)
}

// openFDs counts pid's open file descriptors.
func openFDs(pid int) (int, error) {
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return 0, err
	}
	return len(ents), nil
}

// descendantsCPU is the CPU seconds of pid's living descendants (the
// broker's Ruby compile workers) plus those of its children that exited
// (childrenCPU of pid's own stat, which the caller adds).
func descendantsCPU(pid int) float64 {
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	parent := map[int]int{}
	cpu := map[int]float64{}
	for _, d := range dirs {
		p, err := strconv.Atoi(filepath.Base(d))
		if err != nil {
			continue
		}
		st, err := readStat(p)
		if err != nil {
			continue // exited meanwhile
		}
		parent[p], cpu[p] = st.ppid, st.cpu
	}
	var sum float64
	for p, c := range cpu {
		for q, n := parent[p], 0; q > 1 && n < 64; q, n = parent[q], n+1 {
			if q == pid {
				sum += c
				break
			}
		}
	}
	return sum
}

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
	st, err := readStat(pid)
	if err != nil {
		return brokerSample{}, fmt.Errorf("broker process %d: %w", pid, err)
	}
	rss, err := residentBytes(pid)
	if err != nil {
		return brokerSample{}, fmt.Errorf("broker process %d: %w", pid, err)
	}
	fds, err := openFDs(pid)
	if err != nil {
		return brokerSample{}, fmt.Errorf("broker process %d: %w", pid, err)
	}
	s := brokerSample{cpu: st.cpu, rss: rss, fds: fds}
	if workers {
		s.workersCPU = st.childrenCPU + descendantsCPU(pid)
	}
	return s, nil
}

package main

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
)

// clockTicks is USER_HZ, the unit of /proc's CPU times: 100 on every Linux
// architecture Go supports.
const clockTicks = 100

// cpuSeconds is a process's user + system CPU time (/proc/PID/stat fields
// 14 and 15); pid 0 means this process.
func cpuSeconds(pid int) (float64, error) {
	path := "/proc/self/stat"
	if pid != 0 {
		path = fmt.Sprintf("/proc/%d/stat", pid)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	// The command name, in parentheses, may hold spaces: fields start
	// after its last ')'.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, fmt.Errorf("%s: no command name", path)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("%s: %d fields", path, len(f))
	}
	// f[0] is field 3 (state): utime and stime are fields 14 and 15.
	u, err1 := strconv.ParseFloat(f[11], 64)
	s, err2 := strconv.ParseFloat(f[12], 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("%s: utime %q stime %q", path, f[11], f[12])
	}
	return (u + s) / clockTicks, nil
}

// residentBytes is pid's VmRSS (/proc/PID/status).
func residentBytes(pid int) (int64, error) {
	path := fmt.Sprintf("/proc/%d/status", pid)
	s, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(s), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("%s: VmRSS %q", path, v)
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("%s has no VmRSS", path)
}

// openFDs counts pid's open file descriptors.
func openFDs(pid int) (int, error) {
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return 0, err
	}
	return len(ents), nil
}

// machineBusy is the machine's busy CPU seconds so far (every CPU's
// user, nice, system, irq and softirq time in /proc/stat; idle and iowait
// left out).
func machineBusy() float64 {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	var busy float64
	for k := 1; k < len(f) && k <= 8; k++ {
		if k == 4 || k == 5 { // idle, iowait
			continue
		}
		v, _ := strconv.ParseFloat(f[k], 64)
		busy += v
	}
	return busy / clockTicks
}

// machine describes this machine in one line: CPU model, CPUs, memory.
func machine() string {
	model := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				model = strings.TrimSpace(v)
				break
			}
		}
	}
	mem := ""
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "MemTotal:"); ok {
				kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
				mem = fmt.Sprintf(", %.1f GiB", kb/(1<<20))
			}
		}
	}
	return fmt.Sprintf("%s, %d CPUs%s", model, runtime.NumCPU(), mem)
}

// loadAverage is /proc/loadavg's first three fields.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

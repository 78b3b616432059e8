// Package procstat reads what a process and this machine use from /proc:
// a process's CPU time, resident memory and open descriptors, and the
// machine's CPU model, memory, busy time and load. It works on Linux only;
// elsewhere every read fails.
//
// A pid of 0 is the calling process (/proc/self). CPU times are in
// seconds. Errors name the /proc path they came from: a failed read is the
// *fs.PathError of the read itself, a file that does not parse is an error
// that starts with its path.
package procstat

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

// procPath is the path of file under pid's /proc directory.
func procPath(pid int, file string) string {
	if pid == 0 {
		return "/proc/self/" + file
	}
	return fmt.Sprintf("/proc/%d/%s", pid, file)
}

// Stat is what /proc/PID/stat says of one process.
type Stat struct {
	PPID        int     // its parent
	CPU         float64 // its user + system seconds
	ChildrenCPU float64 // user + system seconds of its children that exited and were waited for
}

// ReadStat reads pid's /proc/PID/stat.
func ReadStat(pid int) (Stat, error) {
	path := procPath(pid, "stat")
	b, err := os.ReadFile(path)
	if err != nil {
		return Stat{}, err
	}
	return parseStat(path, string(b))
}

// parseStat parses the text of a /proc/PID/stat file read from path.
func parseStat(path, s string) (Stat, error) {
	// The command name, in parentheses, may hold spaces and parentheses:
	// the fields start after its last ')'.
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return Stat{}, fmt.Errorf("%s: no command name", path)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 15 {
		return Stat{}, fmt.Errorf("%s: %d fields", path, len(f))
	}
	// f[0] is field 3 (state): ppid is field 4, utime, stime, cutime and
	// cstime are fields 14 to 17.
	ppid, err := strconv.Atoi(f[1])
	if err != nil {
		return Stat{}, fmt.Errorf("%s: ppid %q", path, f[1])
	}
	var t [4]float64
	for k := range t {
		if t[k], err = strconv.ParseFloat(f[11+k], 64); err != nil {
			return Stat{}, fmt.Errorf("%s: field %d %q", path, 14+k, f[11+k])
		}
	}
	return Stat{PPID: ppid, CPU: (t[0] + t[1]) / clockTicks, ChildrenCPU: (t[2] + t[3]) / clockTicks}, nil
}

// ResidentBytes is pid's resident set (VmRSS of /proc/PID/status) in
// bytes.
func ResidentBytes(pid int) (int64, error) {
	return kBField(procPath(pid, "status"), "VmRSS")
}

// OpenFDs counts pid's open file descriptors (the entries of
// /proc/PID/fd).
func OpenFDs(pid int) (int, error) {
	ents, err := os.ReadDir(procPath(pid, "fd"))
	if err != nil {
		return 0, err
	}
	return len(ents), nil
}

// DescendantsCPU is the user + system seconds of pid's living descendants
// (children, their children, …), from a scan of every process's
// /proc/PID/stat: for the start and end of a measurement, not every
// second. Processes that exit during the scan are left out, and so are
// descendants that already exited: those of pid's children that pid waited
// for are its Stat's ChildrenCPU.
func DescendantsCPU(pid int) float64 {
	if pid == 0 {
		pid = os.Getpid()
	}
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	parent := map[int]int{}
	cpu := map[int]float64{}
	for _, d := range dirs {
		p, err := strconv.Atoi(filepath.Base(d))
		if err != nil {
			continue
		}
		st, err := ReadStat(p)
		if err != nil {
			continue // exited meanwhile
		}
		parent[p], cpu[p] = st.PPID, st.CPU
	}
	var sum float64
	for p, c := range cpu {
		// Up the parent chain, at most 64 generations (a guard against a
		// cycle from pids reused during the scan).
		for q, n := parent[p], 0; q > 1 && n < 64; q, n = parent[q], n+1 {
			if q == pid {
				sum += c
				break
			}
		}
	}
	return sum
}

// MachineBusy is the machine's busy CPU seconds since boot: every CPU's
// user, nice, system, irq, softirq and steal time in the first line of
// /proc/stat (idle and iowait left out).
func MachineBusy() (float64, error) {
	const path = "/proc/stat"
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 5 || f[0] != "cpu" {
		return 0, fmt.Errorf("%s: first line %q is not the cpu total", path, line)
	}
	var busy float64
	for k := 1; k < len(f) && k <= 8; k++ {
		if k == 4 || k == 5 { // idle, iowait
			continue
		}
		v, err := strconv.ParseFloat(f[k], 64)
		if err != nil {
			return 0, fmt.Errorf("%s: cpu field %d %q", path, k, f[k])
		}
		busy += v
	}
	return busy / clockTicks, nil
}

// CPUModel is the machine's CPU model: the first "model name" of
// /proc/cpuinfo.
func CPUModel() (string, error) {
	return field("/proc/cpuinfo", "model name")
}

// MemTotal is the machine's memory in bytes (MemTotal of /proc/meminfo).
func MemTotal() (int64, error) {
	return kBField("/proc/meminfo", "MemTotal")
}

// LoadAverage is the machine's load average over 1, 5 and 15 minutes: the
// first three fields of /proc/loadavg, as they stand ("0.52 0.58 0.59").
func LoadAverage() (string, error) {
	const path = "/proc/loadavg"
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "", fmt.Errorf("%s: %d fields", path, len(f))
	}
	return strings.Join(f[:3], " "), nil
}

// KernelRelease is the running kernel's release
// (/proc/sys/kernel/osrelease), such as "6.8.0-45-generic".
func KernelRelease() (string, error) {
	b, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}

// field is the value of the first "key: value" line of the /proc file at
// path whose key is key, spaces around either trimmed.
func field(path, key string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	return lookup(path, string(b), key)
}

// lookup is the value of the first "key: value" line of text (read from
// path) whose key is key, spaces around either trimmed.
func lookup(path, text, key string) (string, error) {
	for _, line := range strings.Split(text, "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == key {
			return strings.TrimSpace(v), nil
		}
	}
	return "", fmt.Errorf("%s has no %s", path, key)
}

// kBField is the "key: N kB" line of the /proc file at path, in bytes.
func kBField(path, key string) (int64, error) {
	v, err := field(path, key)
	if err != nil {
		return 0, err
	}
	return parseKB(path, key, v)
}

// parseKB parses the value "N kB" of key in the file at path into bytes.
func parseKB(path, key, v string) (int64, error) {
	kb, err := strconv.ParseInt(strings.TrimSuffix(v, " kB"), 10, 64)
	if err != nil || kb < 0 {
		return 0, fmt.Errorf("%s: %s %q", path, key, v)
	}
	return kb << 10, nil
}

package procstat

import (
	"errors"
	"io/fs"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

// noPid is above the largest pid Linux hands out (4,194,304).
const noPid = 1 << 30

// needProc fails a test off Linux: the farm and its benchmarks run on
// Linux only, and these readers have nothing to read elsewhere.
func needProc(t *testing.T) {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Fatalf("procstat reads /proc, which %s does not have: run the tests on Linux", runtime.GOOS)
	}
}

// TestProcess reads the test process itself, as pid 0 and by its pid, and
// a process that does not exist.
func TestProcess(t *testing.T) {
	needProc(t)
	for _, tc := range []struct {
		name string
		pid  int
		ok   bool
	}{
		{"self", 0, true},
		{"own pid", os.Getpid(), true},
		{"no such process", noPid, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, err := ReadStat(tc.pid)
			rss, rssErr := ResidentBytes(tc.pid)
			fds, fdsErr := OpenFDs(tc.pid)
			if !tc.ok {
				for what, err := range map[string]error{"ReadStat": err, "ResidentBytes": rssErr, "OpenFDs": fdsErr} {
					var pe *fs.PathError
					if !errors.As(err, &pe) || !strings.HasPrefix(pe.Path, "/proc/1073741824/") {
						t.Errorf("%s: error %v, want one naming /proc/1073741824/…", what, err)
					}
				}
				return
			}
			if err != nil || rssErr != nil || fdsErr != nil {
				t.Fatalf("ReadStat: %v; ResidentBytes: %v; OpenFDs: %v", err, rssErr, fdsErr)
			}
			if st.PPID != os.Getppid() {
				t.Errorf("PPID %d, want %d", st.PPID, os.Getppid())
			}
			if st.CPU < 0 || st.ChildrenCPU < 0 {
				t.Errorf("CPU %v, ChildrenCPU %v", st.CPU, st.ChildrenCPU)
			}
			if rss < 1<<20 || rss > 1<<40 {
				t.Errorf("ResidentBytes %d, want a Go test binary's (1 MiB to 1 TiB)", rss)
			}
			if fds < 3 { // stdin, stdout, stderr at least
				t.Errorf("OpenFDs %d, want at least 3", fds)
			}
		})
	}
}

// TestCPUGrows checks CPU counts this process's work.
func TestCPUGrows(t *testing.T) {
	needProc(t)
	before, err := ReadStat(0)
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		after, err := ReadStat(0)
		if err != nil {
			t.Fatal(err)
		}
		if after.CPU > before.CPU {
			return
		}
	}
	t.Fatalf("CPU stayed at %v for 10 s of reading /proc", before.CPU)
}

// TestMachine reads this machine's numbers.
func TestMachine(t *testing.T) {
	needProc(t)
	if busy, err := MachineBusy(); err != nil || busy <= 0 {
		t.Errorf("MachineBusy: %v, %v", busy, err)
	}
	if mem, err := MemTotal(); err != nil || mem < 1<<20 {
		t.Errorf("MemTotal: %v, %v", mem, err)
	}
	if load, err := LoadAverage(); err != nil || len(strings.Fields(load)) != 3 {
		t.Errorf("LoadAverage: %q, %v", load, err)
	}
	if rel, err := KernelRelease(); err != nil || rel == "" || strings.ContainsAny(rel, " \n") {
		t.Errorf("KernelRelease: %q, %v", rel, err)
	}
	// Not every architecture's /proc/cpuinfo has a "model name".
	if model, err := CPUModel(); err == nil && model == "" {
		t.Error("CPUModel is empty")
	}
	if d := DescendantsCPU(0); d < 0 {
		t.Errorf("DescendantsCPU %v", d)
	}
}

func TestParseStat(t *testing.T) {
	const tail = " S 7 8 8 0 -1 4194560 100 0 0 0 250 50 30 20 20 0 1 0 99 1000 10"
	for _, tc := range []struct {
		name, text string
		want       Stat
		err        string
	}{
		{"plain", "42 (broker)" + tail, Stat{PPID: 7, CPU: 3, ChildrenCPU: 0.5}, ""},
		{"name with spaces and parens", "42 (a) b (c))" + tail, Stat{PPID: 7, CPU: 3, ChildrenCPU: 0.5}, ""},
		{"no name", "42 broker" + tail, Stat{}, "no command name"},
		{"short", "42 (broker) S 7 8", Stat{}, "3 fields"},
		{"bad utime", "42 (broker) S 7 8 8 0 -1 4194560 100 0 0 0 x 50 30 20", Stat{}, `field 14 "x"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseStat("/proc/42/stat", tc.text)
			if tc.err != "" {
				if err == nil || !strings.HasPrefix(err.Error(), "/proc/42/stat: ") || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want /proc/42/stat: …%s", err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %+v, %v, want %+v", got, err, tc.want)
			}
		})
	}
}

func TestLookupKB(t *testing.T) {
	const status = "Name:\tbroker\nVmPeak:\t  200 kB\nVmRSS:\t  1536 kB\nThreads:\t9\n"
	for _, tc := range []struct {
		key  string
		want int64
		err  string
	}{
		{"VmRSS", 1536 << 10, ""},
		{"VmPeak", 200 << 10, ""},
		{"VmSwap", 0, "/proc/42/status has no VmSwap"},
		{"Name", 0, `/proc/42/status: Name "broker"`},
	} {
		t.Run(tc.key, func(t *testing.T) {
			v, err := lookup("/proc/42/status", status, tc.key)
			var got int64
			if err == nil {
				got, err = parseKB("/proc/42/status", tc.key, v)
			}
			if tc.err != "" {
				if err == nil || err.Error() != tc.err {
					t.Fatalf("error %v, want %s", err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %d, %v, want %d", got, err, tc.want)
			}
		})
	}
}

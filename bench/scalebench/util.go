package main

import (
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/compilefarm/compilefarm/bench/internal/procstat"
)

// fmtInt writes n with thousands separators: 100,000.
func fmtInt(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// fmtFloat writes v with prec decimals, the integer part with thousands
// separators; "–" for NaN.
func fmtFloat(v float64, prec int) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "–"
	}
	s := strconv.FormatFloat(math.Abs(v), 'f', prec, 64)
	whole, frac, _ := strings.Cut(s, ".")
	n, _ := strconv.ParseInt(whole, 10, 64)
	out := fmtInt(n)
	if frac != "" {
		out += "." + frac
	}
	if v < 0 && strings.Trim(s, "0.") != "" {
		out = "-" + out
	}
	return out
}

// fmtRate is n per second over d, rounded.
func fmtRate(n float64, d time.Duration) string {
	if d <= 0 {
		return "–"
	}
	return fmtInt(int64(math.Round(n / d.Seconds())))
}

// parseSizes parses a comma-separated list of node counts ("1000,10k,100k"),
// each at least 1 and the list increasing; "" and "0" are no list.
func parseSizes(s string) ([]int, error) {
	if s = strings.TrimSpace(s); s == "" || s == "0" {
		return nil, nil
	}
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.ToLower(strings.TrimSpace(strings.ReplaceAll(f, "_", "")))
		mult := 1
		if rest, ok := strings.CutSuffix(f, "k"); ok {
			f, mult = rest, 1000
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 || n > 10_000_000/mult {
			return nil, fmt.Errorf("%q is not a node count between 1 and 10,000,000", f)
		}
		n *= mult
		if len(out) > 0 && n <= out[len(out)-1] {
			return nil, fmt.Errorf("node counts must increase: %d after %d", n, out[len(out)-1])
		}
		out = append(out, n)
	}
	return out, nil
}

// repoRoot finds the module root (the directory of this module's go.mod)
// from the working directory up.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("working directory: %w", err)
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && strings.Contains(string(b), "module github.com/compilefarm/compilefarm\n") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("run scalebench inside the compilefarm checkout (no go.mod of github.com/compilefarm/compilefarm above the working directory)")
		}
		dir = parent
	}
}

// copyTree copies the directories and regular files under src to dst.
func copyTree(src, dst string) error {
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		to := filepath.Join(dst, rel)
		switch {
		case d.IsDir():
			return os.MkdirAll(to, 0o750)
		case d.Type().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			return os.WriteFile(to, b, 0o640)
		}
		return fmt.Errorf("%s is neither a directory nor a regular file", p)
	})
	if err != nil {
		return fmt.Errorf("copy %s to %s: %w", src, dst, err)
	}
	return nil
}

// machine describes where the benchmark ran.
type machine struct {
	CPU      string  `json:"cpu"`
	Cores    int     `json:"cores"`
	MemoryGB float64 `json:"memory_gib"`
	OS       string  `json:"os"`
	Go       string  `json:"go"`
	Puppet   string  `json:"puppet"`
	LoadAvg  string  `json:"load_average_before"`
	Storage  storage `json:"storage"`
}

// cpuModel is the machine's CPU model, or "unknown".
func cpuModel() string {
	model, err := procstat.CPUModel()
	if err != nil {
		return "unknown"
	}
	return model
}

// memGiB is the machine's memory in GiB, to a tenth; 0 when unknown.
func memGiB() float64 {
	b, _ := procstat.MemTotal()
	return math.Round(float64(b)/(1<<30)*10) / 10
}

// loadAvg is the machine's load average over 1, 5 and 15 minutes, or
// "unknown".
func loadAvg() string {
	load, err := procstat.LoadAverage()
	if err != nil {
		return "unknown"
	}
	return load
}

// kernel names the operating system: "Linux" and the kernel's release, or
// "unknown".
func kernel() string {
	rel, err := procstat.KernelRelease()
	if err != nil {
		return "unknown"
	}
	return "Linux " + rel
}

// storage describes where the stores wrote: the work directory's file
// system and what a synced write costs there, and the same for /var/tmp
// (on disk on most machines) when the work directory is on another file
// system.
type storage struct {
	WorkFS     string  `json:"work_fs"`
	WorkSyncMS float64 `json:"work_sync_ms"` // median synced 4 KB write
	DiskDir    string  `json:"disk_dir,omitempty"`
	DiskFS     string  `json:"disk_fs,omitempty"`
	DiskSyncMS float64 `json:"disk_sync_ms,omitempty"`
}

func storageOf(work string) storage {
	s := storage{WorkFS: fsType(work), WorkSyncMS: syncMS(work)}
	if disk := "/var/tmp"; fsType(disk) != s.WorkFS {
		s.DiskDir, s.DiskFS, s.DiskSyncMS = disk, fsType(disk), syncMS(disk)
	}
	return s
}

// fsType names the file system dir is on.
func fsType(dir string) string {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return "unknown"
	}
	switch uint64(st.Type) {
	case 0x01021994:
		return "tmpfs"
	case 0xEF53:
		return "ext4"
	case 0x58465342:
		return "xfs"
	case 0x9123683E:
		return "btrfs"
	case 0x794C7630:
		return "overlayfs"
	case 0x6A656A63:
		return "fakeowner"
	}
	return fmt.Sprintf("0x%X", uint64(st.Type))
}

// syncMS is the median time of 51 synced 4 KB writes to a file in dir, in
// milliseconds (-1 when dir cannot be written): what each of the embedded
// store's durable writes waits for at least. It varies with what else
// writes to the disk.
func syncMS(dir string) float64 {
	f, err := os.CreateTemp(dir, ".scalebench-sync-")
	if err != nil {
		return -1
	}
	defer os.Remove(f.Name())
	defer f.Close()
	buf := make([]byte, 4096)
	var times []time.Duration
	for i := 0; i < 51; i++ {
		start := time.Now()
		if _, err := f.WriteAt(buf, int64(i)*4096); err != nil {
			return -1
		}
		if err := f.Sync(); err != nil {
			return -1
		}
		times = append(times, time.Since(start))
	}
	slices.Sort(times)
	return float64(times[len(times)/2].Microseconds()) / 1000
}

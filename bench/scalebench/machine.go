package main

import (
	"fmt"
	"math"
	"os"
	"slices"
	"syscall"
	"time"

	"github.com/compilefarm/compilefarm/bench/internal/procstat"
)

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

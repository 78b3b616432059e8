package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	httppprof "net/http/pprof"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strings"
	"sync"

	"github.com/compilefarm/compilefarm/pkg/pcp/broker"
)

// serveStats is what GET /stats answers: the broker's own statistics and
// the Go runtime's view of the process.
type serveStats struct {
	Goroutines int `json:"goroutines"`
	// HeapInuse, StackInuse and Sys are runtime.MemStats's, in bytes;
	// after a collection when the request asked for one (?gc=1).
	HeapInuse  uint64 `json:"heap_inuse"`
	StackInuse uint64 `json:"stack_inuse"`
	Sys        uint64 `json:"sys"`
	Broker     any    `json:"broker"`
}

// statusHandler serves GET /stats; ?gc=1 collects garbage and returns
// freed memory to the OS first, so that the heap figures are live data.
// It also serves the Go profiles under /debug/pprof/ (heap, goroutine, ...)
// and starts and stops CPU profiles that cover a phase exactly (POST
// /cpuprofile/start?name=NAME, /cpuprofile/stop). Loopback only, as the
// whole status endpoint.
func statusHandler(b *broker.Broker, cpu *cpuProfiler) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /debug/pprof/", httppprof.Index)
	mux.HandleFunc("POST /cpuprofile/start", func(w http.ResponseWriter, r *http.Request) {
		if err := cpu.start(r.URL.Query().Get("name")); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
		}
	})
	mux.HandleFunc("POST /cpuprofile/stop", func(w http.ResponseWriter, r *http.Request) {
		if err := cpu.stop(); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
		}
	})
	mux.HandleFunc("GET /stats", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("gc") == "1" {
			runtime.GC()
			debug.FreeOSMemory()
		}
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		st := serveStats{
			Goroutines: runtime.NumGoroutine(),
			HeapInuse:  ms.HeapInuse,
			StackInuse: ms.StackInuse,
			Sys:        ms.Sys,
			Broker:     b.Stats(),
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(st)
	})
	return mux
}

// cpuProfiler writes one CPU profile at a time into dir.
type cpuProfiler struct {
	dir string
	mu  sync.Mutex
	f   *os.File
}

// start starts a CPU profile into dir/name (a file name ending .pprof).
func (c *cpuProfiler) start(name string) error {
	if c.dir == "" {
		return errors.New("serve has no --profile-dir")
	}
	if name != filepath.Base(name) || !strings.HasSuffix(name, ".pprof") || strings.HasPrefix(name, ".") {
		return fmt.Errorf("profile name %q: want a file name ending .pprof", name)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.f != nil {
		return fmt.Errorf("a CPU profile (%s) is running", c.f.Name())
	}
	f, err := os.Create(filepath.Join(c.dir, name))
	if err != nil {
		return err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return err
	}
	c.f = f
	return nil
}

// stop ends the running CPU profile, if any, and closes its file.
func (c *cpuProfiler) stop() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.f == nil {
		return nil
	}
	pprof.StopCPUProfile()
	err := c.f.Close()
	c.f = nil
	return err
}

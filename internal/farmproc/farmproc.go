// Package farmproc runs the broker as a child process for the end-to-end
// tests (test/) and the measurement commands' tests (bench/): it builds
// the broker once per test process (into a temporary directory), starts `broker dev` or `broker serve`
// on free loopback ports, waits for its "is up" line, keeps its log, and
// stops its whole process group (the Ruby workers too) when the test ends.
// It is for tests only.
package farmproc

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/compilefarm/compilefarm/internal/procgroup"
)

// ModuleRoot is the checkout's root directory (where go.mod is), found
// from this file's path so that tests in any package can name the
// checkout's files (examples/, testdata/, broker/).
func ModuleRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

var built struct {
	once sync.Once
	dir  string
	bins map[string]string
	mu   sync.Mutex
	err  error
}

// Binary builds the main package at pkg (a path relative to the module
// root, e.g. "broker" or "functions/compile") once per test process and
// returns the executable's path. CleanupBinaries removes what it built.
func Binary(tb testing.TB, pkg string) string {
	tb.Helper()
	bin, err := buildBinary(pkg)
	if err != nil {
		tb.Fatal(err)
	}
	return bin
}

func buildBinary(pkg string) (string, error) {
	built.once.Do(func() {
		built.dir, built.err = os.MkdirTemp("", "compilefarm-bin-")
		built.bins = map[string]string{}
	})
	if built.err != nil {
		return "", fmt.Errorf("directory for test binaries: %w", built.err)
	}
	built.mu.Lock()
	defer built.mu.Unlock()
	if bin, ok := built.bins[pkg]; ok {
		return bin, nil
	}
	bin := filepath.Join(built.dir, strings.ReplaceAll(pkg, "/", "-"))
	cmd := exec.Command("go", "build", "-o", bin, "./"+pkg)
	cmd.Dir = ModuleRoot()
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build %s: %v\n%s", pkg, err, out)
	}
	built.bins[pkg] = bin
	return bin, nil
}

// BuildBroker builds the broker (for a TestMain, before any test runs) and
// returns its path.
func BuildBroker() (string, error) { return buildBinary("broker") }

// CleanupBinaries removes the binaries Binary built; call it at the end of
// TestMain.
func CleanupBinaries() {
	if built.dir != "" {
		os.RemoveAll(built.dir)
	}
}

// Proc is one running broker.
type Proc struct {
	tb      testing.TB
	group   *procgroup.Group
	pid     int
	Addr    string // host:port of the front door
	Metrics string // http://host:port of the metrics server (without /metrics)
	Admin   string // http://host:port of the operator API ("" when it has none)
	PCP     string // wss://host:port/pcp/ of the PCP broker, when it runs
	LogPath string
}

// upLine is what dev and serve log once they listen.
var upLine = regexp.MustCompile(`front_door=https://(\S+) metrics=(http://\S+)/metrics(?: admin=(http://\S+))?(?: pcp=(wss://\S+))?`)

// DevArgs are the flags of a `broker dev` on free loopback ports (front
// door, metrics, operator API, PCP) with envs and data; extra go last.
func DevArgs(envs, data string, extra ...string) []string {
	return append([]string{"dev", "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0",
		"--pcp-listen", "127.0.0.1:0", "--environments", envs, "--data", data}, extra...)
}

// Start runs bin with args (and env added to this process's environment),
// waits up to 3 minutes for its "is up" line, and stops it when the test
// ends, printing the end of its log if the test failed.
func Start(tb testing.TB, bin string, env []string, args ...string) *Proc {
	tb.Helper()
	logf, err := os.CreateTemp(tb.TempDir(), "broker-*.log")
	if err != nil {
		tb.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	up := make(chan []string, 1)
	// The broker logs to stderr: into the log file through upWatcher,
	// which exec copies to until the broker exits, so the whole log is on
	// disk by the time Done is closed (or WaitDelay after the broker
	// exits, should a Ruby worker it started still hold stderr open).
	cmd.Stdout, cmd.Stderr = logf, &upWatcher{log: logf, up: up}
	cmd.WaitDelay = 5 * time.Second
	group, err := procgroup.Start(cmd, 0) // output goes to the log file
	if err != nil {
		tb.Fatalf("start broker: %v", err)
	}
	p := &Proc{tb: tb, group: group, pid: cmd.Process.Pid, LogPath: logf.Name()}
	tb.Cleanup(func() {
		p.Stop()
		logf.Close()
		if tb.Failed() {
			tb.Logf("broker log (%s):\n%s", p.LogPath, p.LogTail(60))
		}
	})
	select {
	case a := <-up:
		p.Addr, p.Metrics, p.Admin, p.PCP = a[0], a[1], a[2], a[3]
	case <-group.Done():
		tb.Fatalf("broker %s exited before it was up:\n%s", args[0], p.LogTail(40))
	case <-time.After(3 * time.Minute):
		tb.Fatalf("broker %s did not come up in 3 minutes:\n%s", args[0], p.LogTail(40))
	}
	return p
}

// upWatcher writes the broker's stderr to its log and sends the addresses
// of its "is up" line to up, once. exec calls Write from one goroutine.
type upWatcher struct {
	log     io.Writer
	up      chan<- []string
	partial []byte // the start of a line not ended yet
	sent    bool
}

func (w *upWatcher) Write(b []byte) (int, error) {
	w.log.Write(b)
	if w.sent {
		return len(b), nil
	}
	w.partial = append(w.partial, b...)
	for {
		i := bytes.IndexByte(w.partial, '\n')
		if i < 0 {
			break
		}
		line := w.partial[:i]
		w.partial = w.partial[i+1:]
		if m := upLine.FindSubmatch(line); m != nil {
			a := make([]string, len(m)-1)
			for j, v := range m[1:] {
				a[j] = string(v)
			}
			w.up <- a // buffered, and sent once
			w.sent, w.partial = true, nil
			break
		}
	}
	return len(b), nil
}

// Pid is the broker's process id.
func (p *Proc) Pid() int { return p.pid }

// Done is closed once the broker has exited.
func (p *Proc) Done() <-chan struct{} { return p.group.Done() }

// Stop ends the broker with SIGTERM (SIGKILL after 20 s) and waits for it.
func (p *Proc) Stop() { p.group.Stop(20 * time.Second) }

// Kill kills the broker and its Ruby workers at once, as a crash would.
func (p *Proc) Kill() { p.group.Kill() }

// Port is the front door's port.
func (p *Proc) Port() string {
	_, port, _ := strings.Cut(p.Addr, ":")
	return port
}

// LogTail returns the last n lines of the broker's log.
func (p *Proc) LogTail(n int) string {
	b, _ := os.ReadFile(p.LogPath)
	return procgroup.Tail(string(b), n)
}

// Metric returns the value of one Prometheus sample, e.g.
// compilefarm_compiles_total{result="ok"}; 0 when absent.
func (p *Proc) Metric(sample string) float64 {
	p.tb.Helper()
	resp, err := http.Get(p.Metrics + "/metrics")
	if err != nil {
		p.tb.Fatalf("scrape metrics: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if name, val, ok := strings.Cut(line, " "); ok && name == sample {
			v, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
			if err != nil {
				p.tb.Fatalf("metric %s: %v", line, err)
			}
			return v
		}
	}
	return 0
}

// CLI runs an operator verb of bin against this broker's operator API,
// for at most 5 minutes (a deploy that never finishes must not hang the
// suite).
func (p *Proc) CLI(bin string, args ...string) (string, error) {
	const limit = 5 * time.Minute
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, append(args, "--admin", p.Admin)...).CombinedOutput()
	if ctx.Err() != nil {
		return string(out), fmt.Errorf("broker %s did not finish within %s: %w", strings.Join(args, " "), limit, ctx.Err())
	}
	return string(out), err
}

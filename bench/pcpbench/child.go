package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// childEnv marks the environment of the broker process `run` starts, so
// that a binary whose main is not pcpbench's (the package's test binary)
// knows to serve.
const childEnv = "PCPBENCH_CHILD"

// brokerProc is a `pcpbench serve` child process.
type brokerProc struct {
	cmd       *exec.Cmd
	pid       int
	pcpAddr   string
	statusURL string
	done      chan struct{}
	// cpuAtExit is its user + system time once it exited.
	cpuAtExit float64
}

// startBroker starts `EXE serve ARGS...` with its stderr appended to
// logPath, and waits (up to 30 s) for its line saying where it listens.
func startBroker(ctx context.Context, exe string, args []string, logPath string) (*brokerProc, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd := exec.Command(exe, append([]string{"serve"}, args...)...)
	cmd.Env = append(os.Environ(), childEnv+"=serve")
	cmd.Stderr = logf
	// The broker dies with the driver, however the driver ends.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	p := &brokerProc{cmd: cmd, done: make(chan struct{})}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting the broker (%s serve): %w", exe, err)
	}
	p.pid = cmd.Process.Pid
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			default:
			}
		}
	}()
	go func() {
		cmd.Wait()
		if st := cmd.ProcessState; st != nil {
			p.cpuAtExit = (st.UserTime() + st.SystemTime()).Seconds()
		}
		close(p.done)
	}()
	timeout := time.NewTimer(30 * time.Second)
	defer timeout.Stop()
	for {
		select {
		case line := <-lines:
			for _, f := range strings.Fields(line) {
				if v, ok := strings.CutPrefix(f, "pcp="); ok {
					p.pcpAddr = v
				} else if v, ok := strings.CutPrefix(f, "status="); ok {
					p.statusURL = "http://" + v + "/stats"
				}
			}
			if p.pcpAddr != "" && p.statusURL != "" {
				return p, nil
			}
		case <-p.done:
			return nil, fmt.Errorf("the broker exited before it listened (%s); its log: %s", p.cmd.ProcessState, logPath)
		case <-timeout.C:
			p.kill()
			return nil, fmt.Errorf("the broker did not listen within 30s; its log: %s", logPath)
		case <-ctx.Done():
			p.kill()
			return nil, ctx.Err()
		}
	}
}

// stop sends SIGTERM and waits up to grace for the exit, then SIGKILL.
// It reports whether the broker stopped by itself.
func (p *brokerProc) stop(grace time.Duration) bool {
	select {
	case <-p.done:
		return true
	default:
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.done:
		return true
	case <-t.C:
		p.kill()
		return false
	}
}

// kill sends SIGKILL and waits for the exit.
func (p *brokerProc) kill() {
	select {
	case <-p.done:
		return
	default:
	}
	p.cmd.Process.Kill()
	<-p.done
}

// brokerStats is what `serve`'s GET /stats answers (serveStats), with the
// broker's own statistics left as decoded JSON.
type brokerStats struct {
	Goroutines int            `json:"goroutines"`
	HeapInuse  uint64         `json:"heap_inuse"`
	StackInuse uint64         `json:"stack_inuse"`
	Sys        uint64         `json:"sys"`
	Broker     map[string]any `json:"broker"`
}

// stats asks the broker process for its statistics; gc asks it to collect
// garbage first.
func (p *brokerProc) stats(ctx context.Context, gc bool) (brokerStats, error) {
	var st brokerStats
	u := p.statusURL
	if gc {
		u += "?gc=1"
	}
	err := statusRequest(ctx, http.MethodGet, u, func(body io.Reader) error {
		if err := json.NewDecoder(body).Decode(&st); err != nil {
			return fmt.Errorf("%s: %w", u, err)
		}
		return nil
	})
	return st, err
}

// profile saves the broker's profile NAME (heap, goroutine, ...) to path.
func (p *brokerProc) profile(ctx context.Context, name, path string) error {
	u := strings.TrimSuffix(p.statusURL, "/stats") + "/debug/pprof/" + name
	return statusRequest(ctx, http.MethodGet, u, func(body io.Reader) error {
		f, err := os.Create(path)
		if err != nil {
			return err
		}
		if _, err := io.Copy(f, body); err != nil {
			f.Close()
			return err
		}
		return f.Close()
	})
}

// cpuProfile starts (a CPU profile into the broker's --profile-dir, named
// name) or stops the broker's CPU profile.
func (p *brokerProc) cpuProfile(ctx context.Context, start bool, name string) error {
	u := strings.TrimSuffix(p.statusURL, "/stats") + "/cpuprofile/stop"
	if start {
		u = strings.TrimSuffix(p.statusURL, "/stats") + "/cpuprofile/start?name=" + url.QueryEscape(name)
	}
	return statusRequest(ctx, http.MethodPost, u, nil)
}

// statusRequest makes a method request to the broker's status server at u
// and hands the body of its 200 answer to read (nil: not read), all within
// 30 seconds. Another answer is an error with its status and the start of
// its body.
func statusRequest(ctx context.Context, method, u string, read func(body io.Reader) error) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, u, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		if msg := strings.TrimSpace(string(body)); msg != "" {
			return fmt.Errorf("%s: %s: %s", u, resp.Status, msg)
		}
		return fmt.Errorf("%s: %s", u, resp.Status)
	}
	if read == nil {
		return nil
	}
	return read(resp.Body)
}

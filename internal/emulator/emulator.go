// Package emulator runs local emulators of AWS APIs (installed by
// scripts/emulators/) for the AWS drivers' tests: each in its own process
// group on a free loopback port, stopped with the whole group.
package emulator

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// Process is one running emulator.
type Process struct {
	Name string
	Addr string // 127.0.0.1:port
	URL  string // http://127.0.0.1:port

	cmd  *exec.Cmd
	out  *lockedBuffer
	done chan struct{}
}

// ToolsDir is where scripts/emulators/ install emulators: .tools in the
// module root.
func ToolsDir() (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", fmt.Errorf("find the module root")
	}
	return filepath.Join(filepath.Dir(file), "..", "..", ".tools"), nil
}

// FreePort returns a loopback port that was free a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free loopback port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// start runs argv (with port substituted by the caller, whose Start
// function checked that the emulator is installed) in its own process group
// and waits until 127.0.0.1:port accepts connections.
func start(ctx context.Context, name string, port int, env []string, argv ...string) (*Process, error) {
	p := &Process{Name: name, Addr: "127.0.0.1:" + strconv.Itoa(port), out: &lockedBuffer{}, done: make(chan struct{})}
	p.URL = "http://" + p.Addr
	p.cmd = exec.Command(argv[0], argv[1:]...)
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s emulator: %w", name, err)
	}
	go func() { p.cmd.Wait(); close(p.done) }()
	deadline := time.Now().Add(60 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", p.Addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
			return p, nil
		}
		select {
		case <-p.done:
			return nil, fmt.Errorf("%s emulator exited before listening on %s:\n%s", name, p.Addr, p.out.String())
		case <-ctx.Done():
			p.Stop()
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			p.Stop()
			return nil, fmt.Errorf("%s emulator did not listen on %s within 60s:\n%s", name, p.Addr, p.out.String())
		}
	}
}

// Output returns what the emulator printed so far.
func (p *Process) Output() string { return p.out.String() }

// Stop ends the emulator's process group (SIGTERM, then SIGKILL) and waits.
func (p *Process) Stop() {
	select {
	case <-p.done:
		return
	default:
	}
	syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.b.Len() > 1<<20 {
		l.b.Reset()
	}
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

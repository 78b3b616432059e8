// Package emulator runs local emulators of AWS APIs (installed by
// scripts/emulators/) for the AWS drivers' tests: each in its own process
// group on a free loopback port, stopped with the whole group.
package emulator

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"time"

	"github.com/compilefarm/compilefarm/internal/procgroup"
)

// Process is one running emulator.
type Process struct {
	Name string
	Addr string // 127.0.0.1:port
	URL  string // http://127.0.0.1:port
	// Dir is the directory the emulator keeps its data in, when Main made
	// one for it (S3: one directory per bucket).
	Dir string

	proc *procgroup.Group
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
	p := &Process{Name: name, Addr: "127.0.0.1:" + strconv.Itoa(port)}
	p.URL = "http://" + p.Addr
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	proc, err := procgroup.Start(cmd, 1<<20)
	if err != nil {
		return nil, fmt.Errorf("start %s emulator: %w", name, err)
	}
	p.proc = proc
	deadline := time.Now().Add(60 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", p.Addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
			return p, nil
		}
		select {
		case <-p.proc.Done():
			return nil, fmt.Errorf("%s emulator exited before listening on %s:\n%s", name, p.Addr, p.proc.Output())
		case <-ctx.Done():
			p.Stop()
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			p.Stop()
			return nil, fmt.Errorf("%s emulator did not listen on %s within 60s:\n%s", name, p.Addr, p.proc.Output())
		}
	}
}

// Output returns what the emulator printed so far.
func (p *Process) Output() string { return p.proc.Output() }

// Stop ends the emulator's process group (SIGTERM, then SIGKILL) and waits.
func (p *Process) Stop() { p.proc.Stop(10 * time.Second) }

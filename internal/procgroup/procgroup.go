// Package procgroup runs a child process in a process group of its own,
// so that stopping it also stops what it started (Ruby workers, an
// emulator behind a wrapper shell), and keeps the tail of its output. The
// test harnesses (emulators, the local Lambda runtime, broker processes)
// start their children through it.
package procgroup

import (
	"bytes"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Group is one started child and its process group.
type Group struct {
	cmd  *exec.Cmd
	out  *tailBuffer // nil when the caller routes the output itself
	done chan struct{}
}

// Start starts cmd as the leader of a new process group. With keep > 0 its
// stdout and stderr go to a buffer that Output reads, emptied whenever it
// would grow past keep bytes; with keep 0 the caller's Stdout and Stderr
// stay as they are.
func Start(cmd *exec.Cmd, keep int) (*Group, error) {
	g := &Group{cmd: cmd, done: make(chan struct{})}
	if keep > 0 {
		g.out = &tailBuffer{keep: keep}
		cmd.Stdout, cmd.Stderr = g.out, g.out
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", cmd.Path, err)
	}
	go func() { cmd.Wait(); close(g.done) }()
	return g, nil
}

// Done is closed once the child has exited.
func (g *Group) Done() <-chan struct{} { return g.done }

// Output returns the kept output ("" when the caller routed it).
func (g *Group) Output() string {
	if g.out == nil {
		return ""
	}
	return g.out.String()
}

// Stop sends SIGTERM to the group, SIGKILL after grace, and waits for the
// child. Stopping an exited child does nothing.
func (g *Group) Stop(grace time.Duration) {
	select {
	case <-g.done:
		return
	default:
	}
	syscall.Kill(-g.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-g.done:
	case <-time.After(grace):
		g.Kill()
	}
}

// Kill sends SIGKILL to the whole group at once, as a crash would, and
// waits for the child.
func (g *Group) Kill() {
	syscall.Kill(-g.cmd.Process.Pid, syscall.SIGKILL)
	<-g.done
}

// tailBuffer is a bytes.Buffer safe for concurrent writers that starts
// over when it would pass keep bytes.
type tailBuffer struct {
	mu   sync.Mutex
	b    bytes.Buffer
	keep int
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.b.Len() > t.keep {
		t.b.Reset()
	}
	return t.b.Write(p)
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.b.String()
}

// Tail returns the last n lines of a child's output s (without its final
// newline): what a failing test shows of a log.
func Tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

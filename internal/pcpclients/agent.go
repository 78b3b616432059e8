package pcpclients

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/compilefarm/compilefarm/internal/procgroup"
)

// AgentOptions configure one pxp-agent.
type AgentOptions struct {
	// Broker is the websocket URL, such as wss://127.0.0.1:8142/pcp/ (v1)
	// or wss://127.0.0.1:8142/pcp2/ (v2: the agent appends its type).
	Broker string
	// PCPVersion is 1 (default) or 2.
	PCPVersion int
	// Identity is the agent's certificate; its common name makes the
	// agent's URI pcp://<certname>/agent.
	Identity Identity
	// Dir holds the agent's spool, task cache, pid file and logs
	// (t.TempDir() is a good choice).
	Dir string
	// ModulesConfigDir holds the modules' configuration files, such as
	// pxp-module-puppet.conf with the puppet_bin to run; default the
	// build's (puppet_bin /usr/bin/puppet).
	ModulesConfigDir string
	// Args are more pxp-agent flags.
	Args []string
	// Config, when set, is written as a JSON config file (--config-file):
	// the way to set pxp-agent's hidden options, such as "ping-interval"
	// (seconds between websocket pings, 120 by default; it must exceed the
	// 5 s pong timeout), which its command line refuses.
	Config map[string]any
}

// Agent is a running pxp-agent.
type Agent struct {
	cmd *exec.Cmd
	// LogFile is the agent's log (--loglevel debug); AccessLog is its
	// PCP access log.
	LogFile, AccessLog string
	// OutFile holds what it wrote to stdout and stderr (option errors).
	OutFile string
	exited  chan struct{}
	err     error
}

// Lines of pxp-agent's log that tests wait for or count.
const (
	// Ready: the first connection (v2) or association (v1) is done and the
	// agent takes requests. It is logged once, not on reconnections.
	Ready = "Starting the monitor task"
	// Connected: a websocket connection was established (each time).
	Connected = "Successfully established a WebSocket connection"
	// Superseded: the broker closed the connection with 4000, because
	// another connection associated with the same URI.
	Superseded = "(code: 4000)"
)

// StartAgent starts pxp-agent in the foreground with its own state
// directories under o.Dir. Stop it with Stop.
func (t *Tools) StartAgent(o AgentOptions) (*Agent, error) {
	if o.PCPVersion == 0 {
		o.PCPVersion = 1
	}
	if o.ModulesConfigDir == "" {
		o.ModulesConfigDir = filepath.Join(t.Dir, "pxp", "modules-config")
	}
	for _, d := range []string{"spool", "tasks-cache"} {
		if err := os.MkdirAll(filepath.Join(o.Dir, d), 0o700); err != nil {
			return nil, err
		}
	}
	a := &Agent{
		LogFile:   filepath.Join(o.Dir, "pxp-agent.log"),
		AccessLog: filepath.Join(o.Dir, "pcp-access.log"),
		OutFile:   filepath.Join(o.Dir, "pxp-agent.out"),
		exited:    make(chan struct{}),
	}
	args := []string{"--foreground",
		"--broker-ws-uri", o.Broker, "--pcp-version", strconv.Itoa(o.PCPVersion),
		"--ssl-ca-cert", o.Identity.CA, "--ssl-cert", o.Identity.Cert, "--ssl-key", o.Identity.Key,
		"--modules-dir", filepath.Join(t.Dir, "pxp", "modules"),
		"--modules-config-dir", o.ModulesConfigDir,
		"--spool-dir", filepath.Join(o.Dir, "spool"), "--task-cache-dir", filepath.Join(o.Dir, "tasks-cache"),
		"--pidfile", filepath.Join(o.Dir, "pxp-agent.pid"),
		"--logfile", a.LogFile, "--loglevel", "debug",
		"--log-pcp-access", "--pcp-access-logfile", a.AccessLog,
	}
	if o.Config != nil {
		cfg, err := json.Marshal(o.Config)
		if err != nil {
			return nil, err
		}
		path := filepath.Join(o.Dir, "pxp-agent.conf")
		if err := os.WriteFile(path, cfg, 0o600); err != nil {
			return nil, err
		}
		args = append(args, "--config-file", path)
	}
	a.cmd = exec.Command(t.bin("pxp-agent"), append(args, o.Args...)...)
	out, err := os.Create(a.OutFile)
	if err != nil {
		return nil, err
	}
	a.cmd.Stdout, a.cmd.Stderr = out, out
	if err := a.cmd.Start(); err != nil {
		out.Close()
		return nil, fmt.Errorf("pcpclients: starting pxp-agent: %w", err)
	}
	go func() {
		a.err = a.cmd.Wait()
		out.Close()
		close(a.exited)
	}()
	return a, nil
}

// PID is the agent's process id.
func (a *Agent) PID() int { return a.cmd.Process.Pid }

// Log returns the agent's log so far.
func (a *Agent) Log() string {
	b, _ := os.ReadFile(a.LogFile)
	return string(b)
}

// Count returns how many lines of the log contain s.
func (a *Agent) Count(s string) int { return strings.Count(a.Log(), s) }

// WaitLog waits until the log contains s at least n times, the agent
// exits, or ctx ends.
func (a *Agent) WaitLog(ctx context.Context, s string, n int) error {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		if a.Count(s) >= n {
			return nil
		}
		select {
		case <-a.exited:
			if a.Count(s) >= n {
				return nil
			}
			out, _ := os.ReadFile(a.OutFile)
			return fmt.Errorf("pcpclients: pxp-agent exited (%v) before logging %q; command: %s; output: %s; log:\n%s", a.err, s, strings.Join(a.cmd.Args, " "), out, procgroup.Tail(a.Log(), 40))
		case <-ctx.Done():
			return fmt.Errorf("pcpclients: pxp-agent did not log %q %d times: %w; log:\n%s", s, n, ctx.Err(), procgroup.Tail(a.Log(), 40))
		case <-tick.C:
		}
	}
}

// Associations counts the v1 session associations that succeeded.
func (a *Agent) Associations() int {
	n := 0
	for _, line := range strings.Split(a.Log(), "\n") {
		if strings.Contains(line, "Received an Associate Session response") && strings.HasSuffix(strings.TrimSpace(line), ": success") {
			n++
		}
	}
	return n
}

// WaitAssociations waits until the agent has associated n times (v1).
func (a *Agent) WaitAssociations(ctx context.Context, n int) error {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for a.Associations() < n {
		select {
		case <-a.exited:
			return fmt.Errorf("pcpclients: pxp-agent exited (%v) after %d associations; log:\n%s", a.err, a.Associations(), procgroup.Tail(a.Log(), 40))
		case <-ctx.Done():
			return fmt.Errorf("pcpclients: pxp-agent associated %d times, not %d: %w; log:\n%s", a.Associations(), n, ctx.Err(), procgroup.Tail(a.Log(), 40))
		case <-tick.C:
		}
	}
	return nil
}

// WaitReady waits until the agent is connected (and associated, v1) for
// the first time.
func (a *Agent) WaitReady(ctx context.Context) error {
	return a.WaitLog(ctx, Ready, 1)
}

// Exited reports whether the process has ended.
func (a *Agent) Exited() bool {
	select {
	case <-a.exited:
		return true
	default:
		return false
	}
}

// Stop ends the agent by its PID: SIGTERM, then SIGKILL after 5 seconds.
func (a *Agent) Stop() error {
	if a.Exited() {
		return nil
	}
	_ = a.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-a.exited:
		return nil
	case <-time.After(5 * time.Second):
	}
	if err := a.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	<-a.exited
	return nil
}

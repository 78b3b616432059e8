package puppet

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/compilefarm/compilefarm/pkg/compiler"
)

// process is one running Ruby worker (worker.rb). It is owned by one
// goroutine at a time (whoever holds its worker), except for the reader
// goroutines it starts itself.
type process struct {
	cmd      *exec.Cmd
	pid      int
	stdin    io.WriteCloser
	stdout   io.ReadCloser
	stderr   io.ReadCloser
	lines    chan []byte   // stdout lines; closed at EOF
	exited   chan struct{} // closed once the process has been waited for
	stopped  chan struct{} // closed when we stop or kill it
	stopOnce sync.Once     // closes stopped once
	waitErr  error         // valid after exited is closed
	tail     *lineTail
	ready    readyLine
}

// readyLine is the first line a worker prints once Puppet is loaded.
type readyLine struct {
	Ready         bool   `json:"ready"`
	PuppetVersion string `json:"puppet_version"`
	RubyVersion   string `json:"ruby_version"`
	PID           int    `json:"pid"`
	// Recording tells whether the worker records the facts compiles read,
	// Hooks which of its recording hooks are on.
	Recording bool     `json:"recording"`
	Hooks     []string `json:"hooks"`
}

// startProcess starts `ruby script dir args...` and waits until it reports
// ready, ctx ends, or startTimeout passes. The process itself is not tied to
// ctx.
func startProcess(ctx context.Context, ruby, script, dir string, args []string, startTimeout time.Duration, log *slog.Logger) (*process, error) {
	cmd := exec.Command(ruby, append([]string{script, dir}, args...)...)
	cmd.Dir = dir
	// Its own process group, so that killing it also kills anything a
	// manifest spawned (generate(), a custom function's system call).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	p := &process{
		cmd:     cmd,
		lines:   make(chan []byte, 1),
		exited:  make(chan struct{}),
		stopped: make(chan struct{}),
		tail:    &lineTail{max: 20},
	}
	var err error
	if p.stdin, err = cmd.StdinPipe(); err != nil {
		return nil, fmt.Errorf("create stdin pipe: %w", err)
	}
	if p.stdout, err = cmd.StdoutPipe(); err != nil {
		return nil, fmt.Errorf("create stdout pipe: %w", err)
	}
	if p.stderr, err = cmd.StderrPipe(); err != nil {
		return nil, fmt.Errorf("create stderr pipe: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s %s: %w", ruby, script, err)
	}
	p.pid = cmd.Process.Pid
	log = log.With("pid", p.pid)

	var readers sync.WaitGroup
	readers.Add(2)
	go func() {
		defer readers.Done()
		p.readStdout(log)
	}()
	go func() {
		defer readers.Done()
		p.readStderr(log)
	}()
	go func() {
		// Wait only after the pipes are drained (os/exec's rule).
		readers.Wait()
		p.waitErr = cmd.Wait()
		close(p.exited)
	}()

	timer := time.NewTimer(startTimeout)
	defer timer.Stop()
	select {
	case line, ok := <-p.lines:
		if !ok {
			<-p.exited
			return nil, fmt.Errorf("ruby worker exited before it was ready (%v)%s", p.waitErr, p.tail.suffix())
		}
		if err := json.Unmarshal(line, &p.ready); err != nil || !p.ready.Ready {
			p.kill()
			return nil, fmt.Errorf("ruby worker said %q instead of ready%s", compiler.Excerpt(line, 200), p.tail.suffix())
		}
		return p, nil
	case <-timer.C:
		p.kill()
		return nil, fmt.Errorf("ruby worker not ready after %s%s", startTimeout, p.tail.suffix())
	case <-ctx.Done():
		p.kill()
		return nil, fmt.Errorf("wait for ruby worker to load puppet: %w", ctx.Err())
	}
}

func (p *process) readStdout(log *slog.Logger) {
	defer close(p.lines)
	r := bufio.NewReaderSize(p.stdout, 64<<10)
	for {
		line, err := r.ReadBytes('\n')
		if len(bytes.TrimSpace(line)) > 0 {
			select {
			case p.lines <- bytes.TrimRight(line, "\r\n"):
			case <-p.stopped:
				return
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrClosedPipe) {
				select {
				case <-p.stopped:
				default:
					log.Warn("read puppet worker stdout", "err", err)
				}
			}
			return
		}
	}
}

// rubyLog is a Puppet log line as worker.rb writes it to stderr.
type rubyLog struct {
	Level     string   `json:"level"`
	Msg       string   `json:"msg"`
	Source    string   `json:"source"`
	File      string   `json:"file"`
	Line      int      `json:"line"`
	Node      string   `json:"node"`
	Backtrace []string `json:"backtrace"`
}

func (p *process) readStderr(log *slog.Logger) {
	sc := bufio.NewScanner(p.stderr)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		text := sc.Text()
		if strings.TrimSpace(text) == "" {
			continue
		}
		var l rubyLog
		if strings.HasPrefix(text, "{") && json.Unmarshal([]byte(text), &l) == nil && l.Level != "" {
			p.tail.add(l.Msg)
			attrs := []any{}
			if l.Node != "" {
				attrs = append(attrs, "node", l.Node)
			}
			if l.Source != "" && l.Source != "Puppet" {
				attrs = append(attrs, "source", l.Source)
			}
			if l.File != "" {
				attrs = append(attrs, "file", l.File, "line", l.Line)
			}
			if len(l.Backtrace) > 0 {
				attrs = append(attrs, "backtrace", l.Backtrace)
			}
			log.Log(context.Background(), puppetLevel(l.Level), l.Msg, attrs...)
			continue
		}
		p.tail.add(text)
		log.Warn(text)
	}
}

// puppetLevel maps Puppet's log levels to slog's.
func puppetLevel(level string) slog.Level {
	switch level {
	case "debug":
		return slog.LevelDebug
	case "info", "notice":
		return slog.LevelInfo
	case "warning":
		return slog.LevelWarn
	default: // err, alert, emerg, crit
		return slog.LevelError
	}
}

// send writes one request line; it gives up when the process stops.
func (p *process) send(line []byte) error {
	done := make(chan error, 1)
	go func() {
		_, err := p.stdin.Write(line)
		done <- err
	}()
	select {
	case err := <-done:
		return err
	case <-p.exited:
		return errors.New("worker exited")
	}
}

// kill ends the whole process group by its PID (the process we started is
// its leader) and waits until the process has been reaped.
func (p *process) kill() {
	p.stopOnce.Do(func() { close(p.stopped) })
	_ = syscall.Kill(-p.pid, syscall.SIGKILL)
	_ = p.cmd.Process.Kill()
	_ = p.stdin.Close()
	// Unblock the readers even if something outside the group holds the pipes.
	_ = p.stdout.Close()
	_ = p.stderr.Close()
	<-p.exited
}

// stop asks the worker to exit (by closing its stdin) and kills it when it
// has not exited after grace.
func (p *process) stop(grace time.Duration) error {
	_ = p.stdin.Close()
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.exited:
		p.stopOnce.Do(func() { close(p.stopped) })
		return nil
	case <-t.C:
		p.kill()
		return fmt.Errorf("puppet worker pid %d did not exit within %s; killed", p.pid, grace)
	}
}

// lineTail keeps the last lines a worker wrote to stderr, for error messages.
type lineTail struct {
	mu    sync.Mutex
	max   int
	lines []string
}

func (t *lineTail) add(s string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.lines = append(t.lines, s)
	if len(t.lines) > t.max {
		t.lines = t.lines[len(t.lines)-t.max:]
	}
}

// suffix is ": <last stderr lines>" or "" when there were none.
func (t *lineTail) suffix() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.lines) == 0 {
		return ""
	}
	return ": " + strings.Join(t.lines, "; ")
}

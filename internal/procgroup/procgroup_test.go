package procgroup

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"
)

func TestOutputAndExit(t *testing.T) {
	g, err := Start(exec.Command("sh", "-c", "echo hello; echo oops >&2"), 1<<10)
	if err != nil {
		t.Fatal(err)
	}
	<-g.Done()
	if out := g.Output(); !strings.Contains(out, "hello") || !strings.Contains(out, "oops") {
		t.Fatalf("Output = %q, want stdout and stderr", out)
	}
	g.Stop(time.Second) // exited: nothing to do
}

// Stop ends the whole group: a grandchild that ignores nothing dies with
// its parent shell, and one that ignores SIGTERM is killed after grace.
func TestStopEndsTheGroup(t *testing.T) {
	g, err := Start(exec.Command("sh", "-c", "trap '' TERM; sleep 60 & wait"), 1<<10)
	if err != nil {
		t.Fatal(err)
	}
	stopped := make(chan struct{})
	go func() { g.Stop(200 * time.Millisecond); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(30 * time.Second):
		t.Fatal("Stop did not end a group that ignores SIGTERM")
	}
	select {
	case <-g.Done():
	default:
		t.Fatal("Stop returned before the child exited")
	}
}

func TestOutputKeepsATail(t *testing.T) {
	b := &tailBuffer{keep: 100}
	for i := range 200 {
		fmt.Fprintf(b, "line%03d\n", i)
	}
	out := b.String()
	if len(out) > 108 || !strings.HasSuffix(out, "line199\n") {
		t.Fatalf("kept %d bytes ending %q; want at most keep plus one write, ending with the last line", len(out), out[max(0, len(out)-20):])
	}
}

func TestTail(t *testing.T) {
	for _, c := range []struct {
		in   string
		n    int
		want string
	}{
		{"", 3, ""},
		{"a\nb\nc\n", 2, "b\nc"},
		{"a\nb\nc", 2, "b\nc"},
		{"a\nb\n", 5, "a\nb"},
		{"one line", 1, "one line"},
	} {
		if got := Tail(c.in, c.n); got != c.want {
			t.Errorf("Tail(%q, %d) = %q, want %q", c.in, c.n, got, c.want)
		}
	}
}

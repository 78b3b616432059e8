package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/compilefarm/compilefarm/bench/internal/brokermetrics"
	"github.com/compilefarm/compilefarm/internal/farmproc"
	"github.com/compilefarm/compilefarm/internal/puppetdbtest"
)

// TestMain removes the broker and agentsim farmproc built.
func TestMain(m *testing.M) {
	code := m.Run()
	farmproc.CleanupBinaries()
	os.Exit(code)
}

func TestParseSizes(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want []int
		ok   bool
	}{
		{"10,100", []int{10, 100}, true},
		{" 1 , 2,3", []int{1, 2, 3}, true},
		{"100,10", nil, false},
		{"10,10", nil, false},
		{"0", nil, false},
		{"x", nil, false},
		{"20000", nil, false},
	} {
		got, err := parseSizes(tt.in)
		if (err == nil) != tt.ok || (tt.ok && !slices.Equal(got, tt.want)) {
			t.Errorf("parseSizes(%q) = %v, %v; want %v (ok %v)", tt.in, got, err, tt.want, tt.ok)
		}
	}
}

// The metrics pdbbench reads, from two scrapes: commands by kind and
// result, and the refresh rounds between them.
func TestMetricDeltas(t *testing.T) {
	before := brokermetrics.Samples{
		`compilefarm_puppetdb_commands_total{command="store_report",result="queued"}`:  10,
		`compilefarm_puppetdb_commands_total{command="replace_facts",result="queued"}`: 2,
		`compilefarm_puppetdb_commands_total{command="store_report",result="retried"}`: 1,
		mRoundsCount: 3, mRoundsSum: 0.5, mNodesQueued: 1,
		queryRunsName + `outcome="unchanged"}`: 20, queryRunsName + `outcome="changed"}`: 5,
	}
	after := brokermetrics.Samples{
		`compilefarm_puppetdb_commands_total{command="store_report",result="queued"}`:    1010,
		`compilefarm_puppetdb_commands_total{command="replace_facts",result="queued"}`:   42,
		`compilefarm_puppetdb_commands_total{command="replace_catalog",result="queued"}`: 0,
		`compilefarm_puppetdb_commands_total{command="store_report",result="retried"}`:   4,
		`compilefarm_puppetdb_commands_total{command="replace_facts",result="retried"}`:  2,
		mRoundsCount: 5, mRoundsSum: 2.5, mNodesQueued: 3,
		queryRunsName + `outcome="unchanged"}`: 216, queryRunsName + `outcome="changed"}`: 7, queryRunsName + `outcome="failed"}`: 2,
	}
	q := commandsBetween(before, after, "queued")
	if q["store_report"] != 1000 || q["replace_facts"] != 40 || q["replace_catalog"] != 0 {
		t.Errorf("queued between: %v", q)
	}
	if n := allCommands(after, "retried") - allCommands(before, "retried"); n != 5 {
		t.Errorf("retried between: %v, want 5", n)
	}
	rd := roundBetween(before, after)
	want := RefreshRound{Seconds: 1, Runs: 100, Changed: 1, Failed: 1, Queued: 1}
	if rd != want {
		t.Errorf("roundBetween = %+v, want %+v (the mean of 2 rounds)", rd, want)
	}
	if ms := rd.PerQueryMs(); ms != 10 {
		t.Errorf("PerQueryMs = %v, want 10", ms)
	}
	if rd := roundBetween(after, after); rd != (RefreshRound{}) {
		t.Errorf("no round between equal scrapes: got %+v", rd)
	}
	s := &Steady{Runs: 500}
	if got := s.Per1000(21); got != 42 {
		t.Errorf("Per1000(21) of 500 runs = %v, want 42", got)
	}
	b := &Backlog{Delivered: map[string]float64{"store_report": 90, "replace_facts": 10}, DeliverSeconds: 4}
	if got := b.PerSecond(); got != 25 {
		t.Errorf("PerSecond = %v, want 25", got)
	}
}

// echoServer answers every connection with what it reads.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); io.Copy(c, c) }()
		}
	}()
	return ln.Addr().String()
}

// The gate forwards both ways; held, it keeps what a client sends (on a
// connection already open and on a new one) until released, and answers
// flow again at once.
func TestGateHoldsAndReleases(t *testing.T) {
	g, err := newGate(echoServer(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	dial := func() net.Conn {
		c, err := net.Dial("tcp", g.Addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	echo := func(c net.Conn, msg string, within time.Duration) (string, error) {
		c.SetDeadline(time.Now().Add(within))
		if _, err := c.Write([]byte(msg)); err != nil {
			return "", err
		}
		buf := make([]byte, len(msg))
		_, err := io.ReadFull(c, buf)
		return string(buf), err
	}
	open := dial()
	if got, err := echo(open, "before", 5*time.Second); err != nil || got != "before" {
		t.Fatalf("open gate: %q, %v", got, err)
	}
	g.Hold()
	if got, err := echo(open, "held", 300*time.Millisecond); err == nil {
		t.Fatalf("held gate let %q through on an open connection", got)
	}
	fresh := dial()
	fresh.SetDeadline(time.Now().Add(5 * time.Second))
	fresh.Write([]byte("new"))
	g.Release()
	// The open connection's held bytes arrive first, then the new one's.
	buf := make([]byte, len("held"))
	open.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(open, buf); err != nil || string(buf) != "held" {
		t.Fatalf("after release, the open connection got %q, %v; want the held bytes", buf, err)
	}
	buf = make([]byte, len("new"))
	if _, err := io.ReadFull(fresh, buf); err != nil || string(buf) != "new" {
		t.Fatalf("after release, the new connection got %q, %v", buf, err)
	}
	if got, err := echo(open, "after", 5*time.Second); err != nil || got != "after" {
		t.Fatalf("released gate: %q, %v", got, err)
	}
}

// The report says which phases failed and what was not measured, and
// keeps the tables of what was.
func TestMarkdownPartial(t *testing.T) {
	r := &Results{Command: "pdbbench --agents 1", Errors: []string{"fact change: change 1: B's recompile: not within 3m0s"}}
	r.PuppetDB.Version = "7.12.1"
	r.Steady = &Steady{Agents: 1, Rounds: 1, Runs: 1000, Queued: map[string]float64{"store_report": 1000, "replace_facts": 40}, InSlot: 41}
	r.Refresh = []RefreshSize{{Queries: 10, Nodes: 20, Recorded: 10, Rounds: []RefreshRound{{Seconds: 0.1, Runs: 10}, {Seconds: 0.12, Runs: 10}}}}
	var b bytes.Buffer
	if err := r.writeMarkdown(&b); err != nil {
		t.Fatal(err)
	}
	md := b.String()
	for _, want := range []string{
		"## PuppetDB", "**Failed in this run:** fact change: change 1",
		"| store report | 1,000.0 |", "| replace facts | 40.0 | 41.0:", "| replace catalog | 0.0 |",
		"### Delivering a backlog\n\nNot measured in this run.",
		"### A fact change to the dependent node's recompile\n\nNot measured in this run.",
		"| 10 | 20 | 10 | 0 | 0.100, 0.120 s | 10 | 10.0–12.0 ms |",
		"pdbbench --agents 1",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("the report lacks %q:\n%s", want, md)
		}
	}
}

// TestPDBBenchTiny runs every phase at a tiny size against a real broker,
// bench/agentsim and the shared PuppetDB: the commands of steady runs,
// a delivered backlog, a fact change followed to the dependent node's
// recompile, and refresh rounds over recorded queries. It checks that
// each phase measured what it says, not how fast anything is.
func TestPDBBenchTiny(t *testing.T) {
	if testing.Short() {
		t.Skip("needs a real PuppetDB, broker and Puppet compile engine; skipped with -short")
	}
	for _, tool := range []string{"ruby", "puppet"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is required and missing: run scripts/install-deps.sh (as root) first", tool)
		}
	}
	puppetdbtest.Shared(t)
	o, _, _, _, err := parseFlags([]string{
		"--puppetdb-dir", os.Getenv("COMPILEFARM_PUPPETDB_DIR"),
		"--broker", farmproc.Binary(t, "broker"), "--agentsim", farmproc.Binary(t, "bench/agentsim"),
		"--bench-dir", "..", "--work", t.TempDir(), "--workers", "2",
		"--agents", "3", "--steady-rounds", "1", "--backlog-rounds", "1", "--fact-rounds", "1",
		"--query-sizes", "2", "--refresh-rounds", "1",
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	res, err := run(ctx, o, func(s string) { t.Log(s) })
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	var md bytes.Buffer
	res.writeMarkdown(&md)
	t.Logf("report:\n%s", md.String())

	if s := res.Steady; s == nil || s.Runs != 3 || s.Failed != 0 || s.Queued["store_report"] != 3 || s.Queued["replace_catalog"] != 0 || s.Compiles != 0 {
		t.Errorf("steady runs: %+v; want 3 runs, 3 store reports, no catalog, no compile", s)
	} else if s.Queued["replace_facts"] != s.InSlot {
		t.Errorf("steady runs sent %v replace facts, want %v (the runs in their node's daily slot)", s.Queued["replace_facts"], s.InSlot)
	}
	if b := res.Backlog; b == nil || b.Commands < 3 || b.Delivered["store_report"] != 3 || b.PerSecond() <= 0 ||
		b.Retried != 0 || b.Refused != 0 || float64(b.Reports) < b.ReportsExpected {
		t.Errorf("backlog: %+v; want at least 3 commands, the 3 reports delivered and stored, none retried", b)
	}
	if len(res.FactChanges) != 1 {
		t.Fatalf("%d fact changes timed, want 1", len(res.FactChanges))
	}
	fc := res.FactChanges[0]
	if !(fc.Upload <= fc.Delivered && fc.Delivered <= fc.InPuppetDB && fc.InPuppetDB < fc.Queued && fc.Queued <= fc.CompileFrom+0.01 &&
		fc.CompileFrom <= fc.Compiled) || fc.Queued < 9 || fc.RoundRuns < 3 {
		t.Errorf("fact change: %+v; want its steps in order, B queued after the 10 s debounce, a round of 3 queries", fc)
	}
	if len(res.Refresh) != 1 || len(res.Refresh[0].Rounds) != 1 {
		t.Fatalf("refresh: %+v; want one size, one round", res.Refresh)
	}
	if sz := res.Refresh[0]; sz.Nodes != 4 || sz.Recorded != 2 || sz.Rounds[0].Runs != 2 || sz.Rounds[0].Seconds <= 0 || sz.Direct.P50 <= 0 {
		t.Errorf("refresh: %+v; want 4 nodes, 2 queries recorded and run in a timed round, PuppetDB's own times", sz)
	}
	if _, err := os.Stat(filepath.Join(o.work, "broker.log")); err != nil {
		t.Errorf("the broker's log: %v", err)
	}
}

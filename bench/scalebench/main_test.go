package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/compilefarm/compilefarm/bench/internal/numfmt"
	"github.com/compilefarm/compilefarm/pkg/awscalls"
	"github.com/compilefarm/compilefarm/pkg/facts"
	"github.com/compilefarm/compilefarm/pkg/farm"
	"github.com/compilefarm/compilefarm/pkg/memstore"
)

// TestCountingDecorators checks that each decorator counts each call it
// passes on, and nothing else.
func TestCountingDecorators(t *testing.T) {
	ctx := context.Background()
	type stores struct {
		nodes   farm.NodeStore
		content farm.ContentStore
		envs    farm.EnvironmentStore
		queue   farm.Queue
		coll    countingCollectors
	}
	seed := func(t *testing.T, s *memstore.Store) farm.Digest {
		t.Helper()
		for _, c := range []string{"a.test", "b.test", "c.test"} {
			if _, err := s.UpdateNode(ctx, c, func(n *farm.Node) error { n.Environment = "production"; return nil }); err != nil {
				t.Fatal(err)
			}
		}
		d, err := s.Put(ctx, farm.SpaceFacts, []byte(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	for _, tc := range []struct {
		name string
		do   func(s stores, d farm.Digest) error
		want Counts
	}{
		{"nothing", func(stores, farm.Digest) error { return nil }, Counts{}},
		{"GetNode, found and not", func(s stores, _ farm.Digest) error {
			_, err := s.nodes.GetNode(ctx, "a.test")
			_, _ = s.nodes.GetNode(ctx, "missing.test")
			return err
		}, Counts{GetNode: 2}},
		{"QueryNodes pages and their records", func(s stores, _ farm.Digest) error {
			return farm.EachNode(ctx, s.nodes, farm.NodeQuery{Environment: "production", Limit: 2}, func(farm.Node) error { return nil })
		}, Counts{QueryPages: 2, QueryNodes: 3}},
		{"UpdateNode and RecordReport", func(s stores, _ farm.Digest) error {
			if _, err := s.nodes.UpdateNode(ctx, "a.test", func(*farm.Node) error { return nil }); err != nil {
				return err
			}
			_, err := s.nodes.RecordReport(ctx, "a.test", farm.ReportSummary{At: time.Now()})
			return err
		}, Counts{UpdateNode: 1, RecordReport: 1}},
		{"content Get, Put, Has", func(s stores, d farm.Digest) error {
			if _, err := s.content.Get(ctx, farm.SpaceFacts, d); err != nil {
				return err
			}
			if _, err := s.content.Has(ctx, farm.SpaceFacts, d); err != nil {
				return err
			}
			_, err := s.content.Put(ctx, farm.SpaceFacts, []byte(`{"x":1}`))
			return err
		}, Counts{ContentGet: 1, ContentHas: 1, ContentPut: 1}},
		{"environments", func(s stores, _ farm.Digest) error {
			if err := s.envs.PutEnvironment(ctx, farm.Environment{Name: "production", CodeID: "c1"}); err != nil {
				return err
			}
			if _, err := s.envs.GetEnvironment(ctx, "production"); err != nil {
				return err
			}
			_, err := s.envs.ListEnvironments(ctx)
			return err
		}, Counts{EnvPut: 1, EnvGet: 1, EnvList: 1}},
		{"jobs by lane", func(s stores, d farm.Digest) error {
			for i, lane := range []farm.Lane{farm.LaneUrgent, farm.LaneBulk, farm.LaneBulk} {
				job := farm.Job{Certname: []string{"a.test", "b.test", "c.test"}[i], Environment: "production", FactsDigest: d, Lane: lane, Seq: 1}
				if err := s.queue.Enqueue(ctx, job); err != nil {
					return err
				}
			}
			return nil
		}, Counts{Enqueued: 3, EnqueuedBulk: 2}},
		{"collectors", func(s stores, _ farm.Digest) error {
			_, err := s.coll.RecompileCollectors(ctx, "production", "a.test", []string{"File"})
			return err
		}, Counts{CollectorRuns: 1, Collectors: 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem := memstore.New()
			d := seed(t, mem)
			c := &counter{}
			s := stores{
				nodes: countingNodes{mem, c}, content: countingContent{mem, c}, envs: countingEnvs{mem, c},
				queue: countingQueue{memstore.NewQueue(memstore.QueueOptions{}), c},
				coll:  countingCollectors{fakeCollectors{2}, c},
			}
			if err := tc.do(s, d); err != nil {
				t.Fatal(err)
			}
			if got := c.Snapshot(); got != tc.want {
				t.Errorf("counts %+v, want %+v", got, tc.want)
			}
		})
	}
}

type fakeCollectors struct{ n int }

func (f fakeCollectors) RecompileCollectors(context.Context, string, string, []string) (int, error) {
	return f.n, nil
}

func TestCountsReadsAndSub(t *testing.T) {
	a := Counts{GetNode: 5, QueryPages: 3, QueryNodes: 300, UpdateNode: 2, ContentGet: 7, ContentHas: 1, ContentPut: 4, Enqueued: 9}
	b := Counts{GetNode: 1, QueryPages: 1, QueryNodes: 100, ContentGet: 2, Enqueued: 4}
	if got, want := a.Reads(), int64(5+3+7+1); got != want {
		t.Errorf("Reads() = %d, want %d", got, want)
	}
	want := Counts{GetNode: 4, QueryPages: 2, QueryNodes: 200, UpdateNode: 2, ContentGet: 5, ContentHas: 1, ContentPut: 4, Enqueued: 5}
	if got := a.Sub(b); got != want {
		t.Errorf("Sub = %+v, want %+v", got, want)
	}
}

func TestDiffCalls(t *testing.T) {
	key := func(s, op, res string) awscalls.Key { return awscalls.Key{Service: s, Operation: op, Resource: res} }
	before := []awscalls.Count{{Key: key("DynamoDB", "GetItem", "nodes"), Calls: 10}, {Key: key("S3", "PutObject", "farm"), Calls: 3}}
	now := []awscalls.Count{
		{Key: key("DynamoDB", "GetItem", "nodes"), Calls: 15}, {Key: key("DynamoDB", "GetItem", "environments"), Calls: 2},
		{Key: key("S3", "PutObject", "farm"), Calls: 3}, {Key: key("DynamoDB", "Query", "node-index"), Calls: 1},
	}
	d := diffCalls(now, before)
	for _, tc := range []struct {
		service, op string
		want        int64
	}{{"DynamoDB", "GetItem", 7}, {"DynamoDB", "Query", 1}, {"DynamoDB", "Scan", 0}, {"S3", "PutObject", 0}} {
		if got := d.op(tc.service, tc.op); got != tc.want {
			t.Errorf("%s %s: %d calls, want %d", tc.service, tc.op, got, tc.want)
		}
	}
	if got := strings.Join(d.ops("DynamoDB"), ","); got != "GetItem,Query" {
		t.Errorf("DynamoDB operations %q", got)
	}
	if got := d.service("S3"); got != 0 {
		t.Errorf("S3 calls %d, want 0 (unchanged)", got)
	}
}

func TestTable(t *testing.T) {
	for _, tc := range []struct {
		name           string
		header         []string
		rows           [][]string
		markdown, text string
	}{
		{"alignment", []string{"what", "n>"}, [][]string{{"a", "1"}, {"longer", "1,000"}},
			"| what | n |\n|:--|--:|\n| a | 1 |\n| longer | 1,000 |\n",
			"what        n\na           1\nlonger  1,000\n"},
		{"pipes escaped, short rows padded", []string{"a", "b"}, [][]string{{"x|y"}},
			"| a | b |\n|:--|:--|\n| x\\|y |  |\n",
			"a    b\nx|y\n"},
		{"no rows", []string{"only>"}, nil, "| only |\n|--:|\n", "only\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tb := newTable(tc.header...)
			for _, r := range tc.rows {
				tb.add(r...)
			}
			var md, txt bytes.Buffer
			if err := tb.markdown(&md); err != nil {
				t.Fatal(err)
			}
			if err := tb.text(&txt); err != nil {
				t.Fatal(err)
			}
			if md.String() != tc.markdown {
				t.Errorf("markdown:\n%s\nwant:\n%s", md.String(), tc.markdown)
			}
			if txt.String() != tc.text {
				t.Errorf("text:\n%q\nwant:\n%q", txt.String(), tc.text)
			}
		})
	}
}

func TestNumbers(t *testing.T) {
	for _, tc := range []struct{ got, want string }{
		{numfmt.Int(0), "0"}, {numfmt.Int(999), "999"}, {numfmt.Int(1000), "1,000"}, {numfmt.Int(100000), "100,000"},
		{numfmt.Int(-1234567), "-1,234,567"},
		{numfmt.Float(1234.5, 1), "1,234.5"}, {numfmt.Float(0.25, 2), "0.25"}, {numfmt.Float(-2.5, 1), "-2.5"}, {numfmt.Float(-0.001, 1), "0.0"},
		{fmtPer(10, 4), "2.50"}, {fmtPer(8, 4), "2"}, {fmtPer(100000, 1), "100,000"}, {fmtPer(1, 0), "–"},
		{fmtPer(801, 800), "1.0012"}, {fmtPer(100001, 100000), "1.0000"}, {fmtPer(1, 3), "0.33"},
		{fmtRate(500, 2*time.Second), "250"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}

func TestParseSizes(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []int
		err  bool
	}{
		{"", nil, false}, {"0", nil, false},
		{"1000,10000,100000", []int{1000, 10000, 100000}, false},
		{"1k, 10k,100_000", []int{1000, 10000, 100000}, false},
		{"10,5", nil, true}, {"10,10", nil, true}, {"-1", nil, true}, {"x", nil, true}, {"20000k", nil, true},
	} {
		got, err := parseSizes(tc.in)
		if (err != nil) != tc.err || !equalInts(got, tc.want) {
			t.Errorf("parseSizes(%q) = %v, %v; want %v (error %v)", tc.in, got, err, tc.want, tc.err)
		}
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestFleet checks that each node's facts are its own: certname, host
// name, FQDN and IP address, and a valid facts document.
func TestFleet(t *testing.T) {
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	fl, err := loadFleet(filepath.Join(root, "testdata", "puppet-protocol", "facts-agent1.json"), "scale", "scalebench.test")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		i, variant           int
		certname, host, addr string
	}{
		{0, 0, "scale-000000.scalebench.test", "scale-000000", "10.0.0.0"},
		{70000, 0, "scale-070000.scalebench.test", "scale-070000", "10.1.17.112"},
		{70000, 1, "scale-070000.scalebench.test", "scale-070000", "172.17.17.112"},
	} {
		d, err := facts.Decode(tc.certname, fl.doc(tc.i, tc.variant))
		if err != nil {
			t.Fatal(err)
		}
		net := d.Values["networking"].(map[string]any)
		if net["fqdn"] != tc.certname || net["hostname"] != tc.host || net["ip"] != tc.addr || d.Values["clientcert"] != tc.certname {
			t.Errorf("node %d variant %d: networking %v %v %v, clientcert %v", tc.i, tc.variant, net["fqdn"], net["hostname"], net["ip"], d.Values["clientcert"])
		}
		if bytes.Contains(fl.doc(tc.i, tc.variant), []byte("agent1")) {
			t.Errorf("node %d still names agent1", tc.i)
		}
		if got, want := fl.doc(tc.i, tc.variant), replaced(t, root, tc.certname, tc.host, tc.addr); !bytes.Equal(got, want) {
			t.Errorf("node %d variant %d: the document differs from the template with its values replaced", tc.i, tc.variant)
		}
	}
}

// replaced is the template facts with the agent's values replaced one by
// one: what fleet.doc must make.
func replaced(t *testing.T, root, certname, host, addr string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "testdata", "puppet-protocol", "facts-agent1.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range [][2]string{
		{`"agent1.example.test"`, `"` + certname + `"`}, {`"fqdn": "vm"`, `"fqdn": "` + certname + `"`},
		{`"hostname": "vm"`, `"hostname": "` + host + `"`}, {`"192.0.2.2"`, `"` + addr + `"`}, {`/agent1/`, "/" + host + "/"},
	} {
		b = bytes.ReplaceAll(b, []byte(r[0]), []byte(r[1]))
	}
	return b
}

// TestScaleBenchTiny runs the benchmark end to end at tiny sizes, every
// part (the embedded store, the AWS drivers on the emulators, exported
// resources), and checks what it counted (never its times). Without
// -short, a missing Puppet or emulator fails it.
func TestScaleBenchTiny(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the Puppet compile engine and the S3, DynamoDB and SQS emulators; skipped with -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	dir := t.TempDir()
	jsonPath, mdPath := filepath.Join(dir, "out.json"), filepath.Join(dir, "out.md")
	cfg, err := parseFlags([]string{"--sizes", "20,50", "--aws-sizes", "2,3", "--export-sizes", "6", "--samples", "2",
		"--checkins", "5", "--workers", "1", "--concurrency", "4", "--work", filepath.Join(dir, "work"),
		"--json", jsonPath, "--markdown", mdPath}, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	if err := run(ctx, cfg, &stdout, &stderr); err != nil {
		t.Fatalf("run: %v\n%s", err, stderr.String())
	}
	b, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	var rep report
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		s     *storeResult
		nodes int
	}{{"embedded", rep.Embedded, 50}, {"aws", rep.AWS, 3}} {
		e := tc.s
		if e == nil || e.Nodes != tc.nodes || len(e.Samples) != 2 || len(e.Ops) != 4 || len(e.Creates) != 2 {
			t.Fatalf("%s part: %+v", tc.name, e)
		}
		if e.CheckoutReads == 0 {
			t.Errorf("%s: the warm-up checked out no code", tc.name)
		}
		for _, c := range e.Creates {
			if n := int64(c.To - c.From); c.Queued != int(n) || c.Calls.UpdateNode != n || c.Calls.GetNode != n || c.Calls.QueryPages != 0 {
				t.Errorf("%s: creating nodes %d to %d: %d queued, calls %+v", tc.name, c.From, c.To, c.Queued, c.Calls)
			}
		}
		// Samples take the jobs there are: at 3 nodes on AWS, the one
		// queued since the sample at 2.
		if want := min(2, tc.nodes-e.Samples[0].Jobs); e.Samples[0].Jobs != 2 || e.Samples[1].Jobs != want {
			t.Errorf("%s: sampled %d and %d compiles, want 2 and %d", tc.name, e.Samples[0].Jobs, e.Samples[1].Jobs, want)
		}
		for _, s := range e.Samples {
			if s.Outcomes.compiled() != s.Jobs || s.Pool.EngineCompiles != int64(s.Jobs) {
				t.Errorf("%s at %d nodes: outcomes %v, %d engine compiles", tc.name, s.Nodes, s.Outcomes, s.Pool.EngineCompiles)
			}
			if s.Pool.QueryPages != 0 || s.Pool.GetNode != int64(s.Jobs) || s.Code.Reads() != 0 {
				t.Errorf("%s at %d nodes a compile read %+v (code library %+v)", tc.name, s.Nodes, s.Pool, s.Code)
			}
		}
		if a, b := e.Samples[0].ReadsPerCompile(), e.Samples[1].ReadsPerCompile(); a != b {
			t.Errorf("%s: store reads per compile %v at %d nodes, %v at %d", tc.name, a, e.Samples[0].Nodes, b, e.Samples[1].Nodes)
		}
		dep := e.Ops[0]
		if dep.Name != "code deploy" || dep.Enqueued != int64(tc.nodes) || dep.Calls.UpdateNode != int64(tc.nodes) || dep.Calls.QueryNodes != int64(tc.nodes) || dep.Mem == nil {
			t.Errorf("%s deploy: %+v", tc.name, dep)
		}
		for _, o := range e.Ops[1:3] {
			if o.Calls.QueryNodes != int64(tc.nodes) || o.Calls.UpdateNode != 0 || o.Enqueued != 0 {
				t.Errorf("%s %s: %+v", tc.name, o.Name, o)
			}
		}
		if c := e.Ops[3]; c.Count != min(5, tc.nodes) || c.Enqueued != 0 || c.Calls.UpdateNode != 0 {
			t.Errorf("%s check-ins: %+v", tc.name, c)
		}
	}
	aws := rep.AWS
	if aws.scans() != 0 {
		t.Errorf("%d DynamoDB Scans", aws.scans())
	}
	for _, r := range aws.awsRows() {
		if r.calls.service("DynamoDB") == 0 && r.per != "check-in" {
			t.Errorf("%s: no DynamoDB call counted", r.what)
		}
	}
	if len(rep.Exports) != 1 {
		t.Fatalf("exports: %+v", rep.Exports)
	}
	x := rep.Exports[0]
	if x.CollectorsQueued != 5 || x.Warm.Jobs != 4 || x.Cold.Jobs != 1 || x.SetupOut.compiled() != 6 {
		t.Fatalf("exports: %+v", x)
	}
	// A first compile of a collector is two engine compiles; a recompile
	// one, given every other node's export.
	if x.Setup.EngineCompiles != 12 || x.Warm.Pool.EngineCompiles != 4 || x.Warm.Pool.ExportedGiven != 4*5 || x.Cold.Pool.ExportedGiven != 5 {
		t.Errorf("exports engine work: setup %+v, warm %+v, cold %+v", x.Setup, x.Warm.Pool, x.Cold.Pool)
	}
	if x.Warm.Pool.QueryPages != 4 || x.Cold.Pool.ContentGet != 1+5 {
		t.Errorf("collector compiles read: warm %+v, cold %+v", x.Warm.Pool, x.Cold.Pool)
	}
	md, err := os.ReadFile(mdPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"## Scale: 50 nodes\n", "| 50 | 2 |", "| 3 | 1 |", "Scan calls on the compile and request paths", "**0**", "| 6 | 4 |"} {
		if !bytes.Contains(md, []byte(want)) {
			t.Errorf("markdown has no %q", want)
		}
	}
	if !bytes.Equal(md, stdout.Bytes()) || t.Failed() {
		t.Errorf("markdown (also on stdout):\n%s", md)
	}
	if strings.Contains(rep.Command, jsonPath) || strings.Contains(rep.Command, "--work ") {
		t.Errorf("command %q names output files", rep.Command)
	}
}

func TestCommandLine(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "go run ./bench/scalebench"},
		{[]string{"--sizes", "1000,10000", "--json", "/tmp/x.json", "--markdown=/tmp/x.md", "-work", "/tmp/w", "--aws-sizes", ""},
			`go run ./bench/scalebench --sizes 1000,10000 --aws-sizes ""`},
		{[]string{"--tmpdir", "/dev/shm", "--cpuprofile", "p", "--facts", "a b.json"}, `go run ./bench/scalebench --tmpdir /dev/shm --facts "a b.json"`},
	} {
		if got := commandLine(tc.args); got != tc.want {
			t.Errorf("commandLine(%q) = %s, want %s", tc.args, got, tc.want)
		}
	}
}

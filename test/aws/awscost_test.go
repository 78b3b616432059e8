package aws

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/compilefarm/compilefarm/pkg/frontdoor"
	"github.com/compilefarm/compilefarm/test/e2e"
)

// steadyRuns is how many steady-state agent runs each phase of
// TestAWSCallsPerRun measures.
const steadyRuns = 8

// TestAWSCallsPerRun measures what one steady-state agent run costs on
// AWS: `broker serve --backend aws` on the emulators counts its AWS calls
// and bytes (compilefarm_aws_* on /metrics); a real puppet agent runs once
// (its node is compiled), then steadyRuns times with fresh volatile facts
// (uptime, memory: nothing to compile), first as agents run by default (no
// node request: the agent knows its environment from its last run), then
// with --no-use_last_environment (a node request every run). The test
// prints the calls and bytes per run by operation and requires, per run,
// at most one read and one write of the node table, no other DynamoDB
// write and at most 0.1 S3 PUTs. Two kinds of reads a task makes by the
// clock, not by the run, are bounded by the time the runs took: an
// environment read per --environment-cache interval, and the CA's CRL
// read at most once a second (pkg/ca); a one-node test cannot show them
// shared by a fleet's runs, docs/operations.md prices them so.
func TestAWSCallsPerRun(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: real brokers, Ruby Puppet and a puppet agent; skipped with -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	a := e2e.StartAWS(t, ctx)
	envs := e2e.CopyExampleEnvs(t)
	const envCache = 10 * time.Second // broker serve's default --environment-cache
	doors, _ := a.StartFleet(t, ctx, envs, []string{"--certname", "door1.example.test"})
	door := doors[0]

	agent := e2e.NewAgent(t, quietCertname(t, 20*time.Minute))
	if code, out := agent.Run(t, door); code != 2 {
		t.Fatalf("first run: exit %d, want 2 (compiled and applied)\n%s", code, out)
	}
	if code, out := agent.Run(t, door); code != 0 {
		t.Fatalf("second run: exit %d, want 0\n%s", code, out)
	}
	compiles := door.FinishedCompiles()

	for _, phase := range []struct {
		name  string
		extra []string
	}{
		{"default agent (no node request)", nil},
		{"--no-use_last_environment (node request every run)", []string{"--no-use_last_environment"}},
	} {
		before, start := awsCalls(t, door), time.Now()
		for i := range steadyRuns {
			if code, out := agent.Run(t, door, phase.extra...); code != 0 {
				t.Fatalf("%s: steady-state run %d: exit %d, want 0\n%s", phase.name, i+1, code, out)
			}
		}
		took := time.Since(start)
		per := awsCalls(t, door).minus(before)
		t.Logf("AWS calls per steady-state agent run, %s (%d runs in %s):\n%s", phase.name, steadyRuns, took.Round(time.Second), per.table(steadyRuns))
		table := func(name string) func(awsOp) bool { return func(op awsOp) bool { return op.resource == name } }
		nodeReads, envReads, caReads := per.sum(all(isDynamoRead, table("nodes"))), per.sum(all(isDynamoRead, table("environments"))), per.sum(all(isDynamoRead, table(e2e.CATable)))
		nodeWrites, writes, puts := per.sum(all(isDynamoWrite, table("nodes"))), per.sum(isDynamoWrite), per.sum(isS3Put)
		n := float64(steadyRuns)
		t.Logf("per run: %.2f DynamoDB reads of nodes, %.2f DynamoDB writes, %.2f S3 PUTs; by the clock: %.2f environment reads, %.2f CA reads",
			nodeReads/n, writes/n, puts/n, envReads/n, caReads/n)
		if nodeReads > n {
			t.Errorf("%s: %.2f reads of the node table per run, want at most 1", phase.name, nodeReads/n)
		}
		if nodeWrites > n || writes != nodeWrites {
			t.Errorf("%s: %.2f writes of the node table per run and %v others, want at most 1 and none", phase.name, nodeWrites/n, writes-nodeWrites)
		}
		if puts > 0.1*n {
			t.Errorf("%s: %.2f S3 PUTs per run, want at most 0.1", phase.name, puts/n)
		}
		if bound := math.Floor(took.Seconds()/envCache.Seconds()) + 1; envReads > bound {
			t.Errorf("%s: %v environment reads in %s, want at most one per %s (%v)", phase.name, envReads, took.Round(time.Second), envCache, bound)
		}
		if bound := math.Floor(took.Seconds()) + 1; caReads > bound {
			t.Errorf("%s: %v CA reads in %s, want at most one a second (%v)", phase.name, caReads, took.Round(time.Second), bound)
		}
	}
	if got := door.FinishedCompiles(); got != compiles {
		t.Errorf("steady-state runs compiled %v times, want none", got-compiles)
	}
}

// quietCertname returns a certname whose periodic full report
// (frontdoor.ReportPolicy's slot, with broker serve's defaults) falls
// outside the next d, so that the steady-state runs of a test store no
// full report by the clock.
func quietCertname(t *testing.T, d time.Duration) string {
	t.Helper()
	var p frontdoor.ReportPolicy
	for i := 1; i < 100; i++ {
		name := fmt.Sprintf("cost%d.example.test", i)
		quiet := true
		for at := time.Now(); at.Before(time.Now().Add(d)); at = at.Add(time.Minute) {
			if p.InSlot(name, at) {
				quiet = false
				break
			}
		}
		if quiet {
			return name
		}
	}
	t.Fatal("no certname has a quiet slot")
	return ""
}

func all(preds ...func(awsOp) bool) func(awsOp) bool {
	return func(op awsOp) bool {
		for _, p := range preds {
			if !p(op) {
				return false
			}
		}
		return true
	}
}

// awsSamples are the compilefarm_aws_* samples of a /metrics scrape:
// sample (name{labels}) -> value.
type awsSamples map[string]float64

var awsSampleRE = regexp.MustCompile(`^(compilefarm_aws_\w+)\{(.*)\} (\S+)$`)

// awsCalls scrapes the front door's AWS call counters.
func awsCalls(t *testing.T, f *e2e.Farm) awsSamples {
	t.Helper()
	resp, err := http.Get(f.Metrics + "/metrics")
	if err != nil {
		t.Fatalf("scrape metrics: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	out := awsSamples{}
	for _, line := range strings.Split(string(b), "\n") {
		if m := awsSampleRE.FindStringSubmatch(line); m != nil {
			v, err := strconv.ParseFloat(m[3], 64)
			if err != nil {
				t.Fatalf("metric %s: %v", line, err)
			}
			out[m[1]+"{"+m[2]+"}"] = v
		}
	}
	if len(out) == 0 {
		t.Fatalf("no compilefarm_aws_* metrics on %s/metrics", f.Metrics)
	}
	return out
}

func (s awsSamples) minus(before awsSamples) awsSamples {
	out := awsSamples{}
	for k, v := range s {
		if d := v - before[k]; d != 0 {
			out[k] = d
		}
	}
	return out
}

// awsOp is one row of the table: a service's operation on a resource.
type awsOp struct{ service, operation, resource string }

var labelRE = regexp.MustCompile(`(\w+)="([^"]*)"`)

// parse splits a sample into its metric name, operation and error code.
func parseSample(sample string) (name string, op awsOp, code string) {
	name, labels, _ := strings.Cut(sample, "{")
	for _, m := range labelRE.FindAllStringSubmatch(labels, -1) {
		switch m[1] {
		case "service":
			op.service = m[2]
		case "operation":
			op.operation = m[2]
		case "resource":
			op.resource = m[2]
		case "code":
			code = m[2]
		}
	}
	return name, op, code
}

// sum adds the calls of the operations that match.
func (s awsSamples) sum(match func(awsOp) bool) float64 {
	var n float64
	for k, v := range s {
		if name, op, _ := parseSample(k); name == "compilefarm_aws_calls_total" && match(op) {
			n += v
		}
	}
	return n
}

func isDynamoRead(op awsOp) bool {
	return op.service == "DynamoDB" && slices.Contains([]string{"GetItem", "BatchGetItem", "Query", "Scan", "TransactGetItems"}, op.operation)
}

func isDynamoWrite(op awsOp) bool {
	return op.service == "DynamoDB" && slices.Contains([]string{"PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem", "TransactWriteItems"}, op.operation)
}

func isS3Put(op awsOp) bool {
	return op.service == "S3" && slices.Contains([]string{"PutObject", "CopyObject", "CompleteMultipartUpload"}, op.operation)
}

// table formats the samples per run: one row per operation with calls,
// failed calls (by code) and request and response body bytes.
func (s awsSamples) table(runs int) string {
	type row struct {
		calls, sent, received float64
		errors                []string
	}
	rows := map[awsOp]*row{}
	for k, v := range s {
		name, op, code := parseSample(k)
		r := rows[op]
		if r == nil {
			r = &row{}
			rows[op] = r
		}
		switch name {
		case "compilefarm_aws_calls_total":
			r.calls = v
		case "compilefarm_aws_request_bytes_total":
			r.sent = v
		case "compilefarm_aws_response_bytes_total":
			r.received = v
		case "compilefarm_aws_errors_total":
			r.errors = append(r.errors, fmt.Sprintf("%s %.2f", code, v/float64(runs)))
		}
	}
	ops := make([]awsOp, 0, len(rows))
	for op := range rows {
		ops = append(ops, op)
	}
	slices.SortFunc(ops, func(a, b awsOp) int {
		return strings.Compare(a.service+" "+a.operation+" "+a.resource, b.service+" "+b.operation+" "+b.resource)
	})
	var b strings.Builder
	fmt.Fprintf(&b, "%-9s %-22s %-14s %9s %12s %12s  %s\n", "service", "operation", "resource", "calls/run", "sent B/run", "recv B/run", "errors/run")
	for _, op := range ops {
		r := rows[op]
		slices.Sort(r.errors)
		n := float64(runs)
		fmt.Fprintf(&b, "%-9s %-22s %-14s %9.2f %12.0f %12.0f  %s\n", op.service, op.operation, op.resource,
			r.calls/n, r.sent/n, r.received/n, strings.Join(r.errors, ", "))
	}
	return b.String()
}

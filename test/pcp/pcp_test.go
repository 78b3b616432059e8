package pcp

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/compilefarm/compilefarm/internal/pcpclients"
	"github.com/compilefarm/compilefarm/internal/procgroup"
	"github.com/compilefarm/compilefarm/test/e2e"
)

// pxpAgent starts a real pxp-agent for a (after its first puppet run has
// enrolled it: it uses the agent's certificate) connected to broker (a
// wss:// URL). pxp-module-puppet runs the agent's own puppet: its
// puppet_bin is a wrapper that adds the agent's settings against f.
func pxpAgent(t *testing.T, a *e2e.Agent, tools *pcpclients.Tools, f *e2e.Farm, broker string) *pcpclients.Agent {
	t.Helper()
	dir := filepath.Join(a.Dir, "pxp")
	conf := filepath.Join(dir, "modules-config")
	if err := os.MkdirAll(conf, 0o755); err != nil {
		t.Fatal(err)
	}
	var wrapper strings.Builder
	wrapper.WriteString("#!/bin/sh\n# puppet as this test's agent " + a.Certname + "\n")
	for _, kv := range a.Env() {
		wrapper.WriteString("export " + shellQuote(kv) + "\n")
	}
	wrapper.WriteString(`exec puppet "$@"`)
	for _, s := range a.Settings(f) {
		wrapper.WriteString(" " + shellQuote(s))
	}
	wrapper.WriteString("\n")
	bin := filepath.Join(dir, "puppet")
	if err := os.WriteFile(bin, []byte(wrapper.String()), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg, _ := json.Marshal(map[string]string{"puppet_bin": bin})
	if err := os.WriteFile(filepath.Join(conf, "pxp-module-puppet.conf"), cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	ssl := filepath.Join(a.Dir, "ssl")
	px, err := tools.StartAgent(pcpclients.AgentOptions{
		Broker: broker,
		Identity: pcpclients.Identity{Certname: a.Certname, CA: filepath.Join(ssl, "certs", "ca.pem"),
			Cert: filepath.Join(ssl, "certs", a.Certname+".pem"), Key: filepath.Join(ssl, "private_keys", a.Certname+".pem")},
		Dir:              dir,
		ModulesConfigDir: conf,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		px.Stop()
		if t.Failed() {
			t.Logf("pxp-agent %s log:\n%s", a.Certname, procgroup.Tail(px.Log(), 30))
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := px.WaitReady(ctx); err != nil {
		t.Fatalf("pxp-agent %s did not associate with %s: %v", a.Certname, broker, err)
	}
	return px
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

var reportLinkRE = regexp.MustCompile(`/admin/v1/reports/[0-9a-f]{64}`)

var jobIDRE = regexp.MustCompile(`job (\d{8}T\d{6}Z-[0-9a-f]+)`)

// runJob runs `broker job run` against f and returns its output, the job id
// and whether it exited 0.
func runJob(t *testing.T, f *e2e.Farm, args ...string) (string, string, bool) {
	t.Helper()
	out, err := f.CLI(append([]string{"job", "run"}, args...)...)
	m := jobIDRE.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("broker job run %v printed no job id (err %v):\n%s", args, err, out)
	}
	return out, m[1], err == nil
}

// nodeLine finds the line of node in `broker job show` output.
func nodeLine(out, node string) string {
	for _, l := range strings.Split(out, "\n") {
		if fs := strings.Fields(l); len(fs) > 0 && fs[0] == node {
			return l
		}
	}
	return ""
}

// showJob returns what `broker job show id` prints.
func showJob(t *testing.T, f *e2e.Farm, id string) string {
	t.Helper()
	out, err := f.CLI("job", "show", id)
	if err != nil {
		t.Fatalf("job show %s: %v\n%s", id, err, out)
	}
	return out
}

// checkJob checks `broker job show` output: the agents' runs finished
// with exit code 0 (pxp-module-puppet runs without --detailed-exitcodes)
// and status changed, the unreachable nodes are so.
func checkJob(t *testing.T, out string, finished []*e2e.Agent, unreachable ...string) {
	t.Helper()
	for _, a := range finished {
		if l := nodeLine(out, a.Certname); !strings.Contains(l, "finished") || !strings.Contains(l, " 0 ") || !strings.Contains(l, "changed") {
			t.Errorf("%s in job show: %q, want finished with exit code 0 and status changed\n%s", a.Certname, l, out)
		}
	}
	for _, n := range unreachable {
		if l := nodeLine(out, n); !strings.Contains(l, "unreachable") {
			t.Errorf("%s in job show: %q, want unreachable\n%s", n, l, out)
		}
	}
}

// TestPCPJobs: three nodes, each with a real pxp-agent connected to the
// broker dev's PCP broker and a real puppet agent, and a fourth that is
// not connected: `broker job run` reaches the three, each applies its new
// catalog, the fourth is unreachable, the job fails for it; the results
// are stored and `broker job show` still has them after a restart.
func TestPCPJobs(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: real brokers, pxp-agents and puppet agents; skipped with -short")
	}
	t.Parallel() // with the other PCP test, after the package's serial tests: ports and directories are its own
	tools := pcpclients.Require(t)
	envs := e2e.CopyExampleEnvs(t)
	data := t.TempDir()
	f := e2e.StartFarm(t, data, envs, "--pcp-listen", "127.0.0.1:0")
	if f.PCP == "" {
		t.Fatal("broker dev named no PCP broker in its up line")
	}
	var names []string
	var connected []*e2e.Agent
	for i := 1; i <= 3; i++ {
		a := e2e.NewAgent(t, fmt.Sprintf("pcp%d.example.test", i))
		if code, out := a.Run(t, f); code != 2 {
			t.Fatalf("%s first run: exit %d, want 2\n%s", a.Certname, code, out)
		}
		names = append(names, a.Certname)
		pxpAgent(t, a, tools, f, f.PCP)
		a.SetFact(t, "cf_role", "web") // the job's run applies a new catalog
		connected = append(connected, a)
	}
	names = append(names, "pcp4.example.test") // no pxp-agent

	out, id, ok := runJob(t, f, "--nodes", strings.Join(names, ","), "--concurrency", "2", "--timeout", "3m")
	if ok {
		t.Errorf("job run with an unreachable node exited 0:\n%s", out)
	}
	for _, a := range connected {
		e2e.CheckManaged(t, a, "web")
	}
	show := func(f *e2e.Farm) string { return showJob(t, f, id) }
	check := func(out string) { checkJob(t, out, connected, "pcp4.example.test") }
	check(show(f))
	if list, err := f.CLI("job", "list"); err != nil || !strings.Contains(list, id) {
		t.Errorf("job list: %v, want %s in it:\n%s", err, id, list)
	}
	// The reports of the job's runs reached the farm, and job show links
	// each to it: broker report prints the run's report.
	jobOut := show(f)
	for _, a := range connected {
		if r := f.Nodes()[a.Certname].Report; r == nil || r.Status != "changed" {
			t.Errorf("%s's last report: %+v, want changed (the job's run)", a.Certname, r)
		}
		link := reportLinkRE.FindString(nodeLine(jobOut, a.Certname))
		if link == "" {
			t.Errorf("%s in job show has no report link:\n%s", a.Certname, jobOut)
			continue
		}
		rep, err := f.CLI("report", link)
		if err != nil || !strings.Contains(rep, `"host":"`+a.Certname+`"`) && !strings.Contains(rep, `"host": "`+a.Certname+`"`) {
			t.Errorf("broker report %s: %v, want %s's report:\n%.300s", link, err, a.Certname, rep)
		}
	}
	if got := f.Metric("compilefarm_pcp_messages_routed_total"); got < 6 {
		t.Errorf("compilefarm_pcp_messages_routed_total = %v, want at least two answers per connected node", got)
	}

	// A canary release in one command: the held code is released to pcp1,
	// which runs at once through the broker; pcp2 keeps the old catalog.
	cli := func(args ...string) string {
		t.Helper()
		out, err := f.CLI(args...)
		if err != nil {
			t.Fatalf("broker %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return out
	}
	cli("release", "production", "--hold")
	static := filepath.Join(envs, "production", "modules", "demo", "files", "static.txt")
	if err := os.WriteFile(static, []byte("canary\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cli("code", "deploy", "production")
	rel := cli("release", "production", "--nodes", connected[0].Certname, "--run")
	if b, _ := os.ReadFile(filepath.Join(connected[0].Root, "static.txt")); string(b) != "canary\n" {
		t.Errorf("canary %s's static.txt = %q after release --run, want the new code's\n%s", connected[0].Certname, b, rel)
	}
	if b, _ := os.ReadFile(filepath.Join(connected[1].Root, "static.txt")); string(b) == "canary\n" {
		t.Errorf("%s, not released, got the new static.txt", connected[1].Certname)
	}
	if fields := strings.Fields(e2e.LineOf(rel, "new ")); len(fields) < 7 || fields[5] != "1" {
		t.Errorf("release --run's status does not show the canary applying the new code:\n%s", rel)
	}

	// Stored: a restarted farm still shows the job.
	f.Stop()
	f2 := e2e.StartFarm(t, data, envs, "--pcp-listen", "127.0.0.1:0")
	check(show(f2))
}

// TestPCPJobsAcrossTasks: two broker serve tasks on the AWS emulators, a
// pxp-agent connected to each. A job started through the second task
// reaches the agent held by the first (presence table, the first task's
// SQS inbox), both apply their catalogs, and the first task shows the
// same results (the jobs table).
func TestPCPJobsAcrossTasks(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: AWS emulators, real brokers, pxp-agents and puppet agents; skipped with -short")
	}
	t.Parallel()
	tools := pcpclients.Require(t)
	ctx := context.Background()
	aws := e2e.StartAWS(t, ctx)
	envs := e2e.CopyExampleEnvs(t)
	doors, _ := aws.StartFleet(t, ctx, envs, aws.PCPArgs("task1.example.test"), aws.PCPArgs("task2.example.test"))
	var agents []*e2e.Agent
	for i, door := range doors {
		a := e2e.NewAgent(t, fmt.Sprintf("fleet%d.example.test", i+1))
		if code, out := a.Run(t, door); code != 2 {
			t.Fatalf("%s first run through task %d: exit %d, want 2\n%s", a.Certname, i+1, code, out)
		}
		pxpAgent(t, a, tools, door, door.PCP)
		a.SetFact(t, "cf_role", "web")
		agents = append(agents, a)
	}

	out, id, ok := runJob(t, doors[1], "--nodes", agents[0].Certname+","+agents[1].Certname, "--timeout", "3m")
	if !ok {
		t.Fatalf("job run through task 2 failed:\n%s", out)
	}
	for _, a := range agents {
		e2e.CheckManaged(t, a, "web")
	}
	checkJob(t, showJob(t, doors[0], id), agents)
	if got := doors[1].Metric("compilefarm_pcp_messages_relayed_total"); got < 1 {
		t.Errorf("task 2 relayed %v messages to task 1's inbox, want at least the run request", got)
	}
	if got := doors[0].Metric("compilefarm_pcp_messages_from_inbox_total"); got < 1 {
		t.Errorf("task 1 took %v messages from its inbox, want at least the run request", got)
	}
}

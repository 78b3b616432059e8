package puppetdb

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/compilefarm/compilefarm/internal/puppetdbtest"
	"github.com/compilefarm/compilefarm/test/e2e"
)

// lbRole is a load balancer whose members are the web nodes of its
// cluster, as PuppetDB knows them: the usual use of puppetdb_query().
const lbRole = `# @summary A load balancer: its members are its cluster's web nodes in PuppetDB.
class role::lb {
  $cluster = $facts['cf_cluster']
  $members = puppetdb_query("inventory[certname] { facts.cf_role = 'web' and facts.cf_cluster = '${cluster}' }").map |$r| { $r['certname'] }
  file { "${facts['cf_root']}/lb-members":
    ensure  => file,
    content => "${sort($members).join("\n")}\n",
  }
}
`

// TestQueriesInCompiles: a manifest's puppetdb_query() is answered by
// PuppetDB, which the farm itself feeds; when another web node joins the
// cluster (its facts reach PuppetDB through the sink), the farm runs the
// recorded query again, finds a new answer, recompiles the load balancer
// (and no other node), explain names the query, and the balancer's next
// run applies the new member list.
func TestQueriesInCompiles(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: real broker, PuppetDB and puppet agent; skipped with -short")
	}
	p := puppetdbtest.Shared(t)
	envs := e2e.CopyExampleEnvs(t)
	if err := os.WriteFile(filepath.Join(envs, "production", "modules", "role", "manifests", "lb.pp"), []byte(lbRole), 0o644); err != nil {
		t.Fatal(err)
	}
	data := t.TempDir()
	copyCA(t, p, data)
	// The refresh interval is long: the answer changes through the sink's
	// trigger (a refresh soon after commands are delivered).
	f := e2e.StartFarm(t, data, envs, "--puppetdb", p.TLSURL, "--puppetdb-facts-every", "-1s", "--puppetdb-query-refresh", "1h")
	cluster := strings.TrimSuffix(puppetdbtest.Certname(t, "cluster"), ".test")
	agent := func(base, role string) *e2e.Agent {
		a := e2e.NewAgent(t, puppetdbtest.Certname(t, base))
		a.SetFact(t, "cf_role", role)
		a.SetFact(t, "cf_cluster", cluster)
		return a
	}
	web1, lb, web2 := agent("web1", "web"), agent("lb", "lb"), agent("web2", "web")
	if code, out := web1.Run(t, f); code != 2 {
		t.Fatalf("web1: exit %d\n%s", code, out)
	}
	p.Eventually(t, "inventory", fmt.Sprintf(`["=","certname",%q]`, web1.Certname), func(rows []map[string]any) bool { return len(rows) == 1 })
	if code, out := lb.Run(t, f); code != 2 {
		t.Fatalf("lb: exit %d\n%s", code, out)
	}
	members := func() string {
		b, _ := os.ReadFile(filepath.Join(lb.Root, "lb-members"))
		return string(b)
	}
	if got := members(); got != web1.Certname+"\n" {
		t.Fatalf("lb members after its first run: %q, want web1", got)
	}
	out, err := f.CLI("explain", lb.Certname)
	if err != nil || !strings.Contains(out, "PuppetDB queries") || !strings.Contains(out, "inventory[certname]") {
		t.Errorf("explain does not list the lb's query: %v\n%s", err, out)
	}

	before := f.FinishedCompiles()
	if code, out := web2.Run(t, f); code != 2 {
		t.Fatalf("web2: exit %d\n%s", code, out)
	}
	// web2's own compile, then the lb's, once the refresh saw web2 in
	// PuppetDB's answer; nothing else.
	e2e.WaitFor(t, "the lb's recompile", 2*time.Minute, func() bool { return f.FinishedCompiles() >= before+2 })
	time.Sleep(2 * time.Second)
	if got := f.FinishedCompiles() - before; got != 2 {
		t.Errorf("web2 joining caused %v compiles, want 2 (web2, then the lb once)", got)
	}
	out, err = f.CLI("explain", lb.Certname)
	if err != nil || !strings.Contains(out, "query_result") || !strings.Contains(out, "cf_cluster") {
		t.Errorf("explain does not name the query whose answer changed: %v\n%s", err, out)
	}
	if code, out := lb.Run(t, f); code != 2 {
		t.Fatalf("lb after web2 joined: exit %d\n%s", code, out)
	}
	want := []string{web1.Certname, web2.Certname}
	if want[1] < want[0] {
		want[0], want[1] = want[1], want[0]
	}
	if got := members(); got != strings.Join(want, "\n")+"\n" {
		t.Errorf("lb members after web2 joined: %q, want %q", got, want)
	}

	// web2 leaves the cluster: a fact no catalog of web2's own reads, so
	// nothing of web2 compiles, but PuppetDB must still see it at once
	// (the farm stores every non-volatile change when it feeds PuppetDB),
	// and the lb is recompiled without web2.
	before = f.FinishedCompiles()
	web2.SetFact(t, "cf_cluster", cluster+"-other")
	if code, out := web2.Run(t, f); code != 0 {
		t.Fatalf("web2 after leaving: exit %d, want 0 (its catalog does not read the cluster)\n%s", code, out)
	}
	e2e.WaitFor(t, "the lb's recompile after web2 left", 2*time.Minute, func() bool { return f.FinishedCompiles() >= before+1 })
	if code, out := lb.Run(t, f); code != 2 {
		t.Fatalf("lb after web2 left: exit %d\n%s", code, out)
	}
	if got := members(); got != web1.Certname+"\n" {
		t.Errorf("lb members after web2 left: %q, want web1 only", got)
	}
}

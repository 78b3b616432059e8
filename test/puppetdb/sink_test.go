package puppetdb

import (
	"context"
	"fmt"
	"io"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/compilefarm/compilefarm/internal/puppetdbtest"
	"github.com/compilefarm/compilefarm/test/e2e"
)

// farmWithPuppetDB starts broker dev whose CA is the shared PuppetDB's
// (so each trusts the other's certificate, as a site whose PuppetDB has a
// certificate from its Puppet CA), feeding PuppetDB at url.
func farmWithPuppetDB(t *testing.T, p *puppetdbtest.PuppetDB, url string, extra ...string) *e2e.Farm {
	t.Helper()
	data := t.TempDir()
	copyCA(t, p, data)
	// Unchanged facts are sent once a day, in each node's slot; never here,
	// so that what a run sends does not depend on the hour.
	return e2e.StartFarm(t, data, e2e.CopyExampleEnvs(t), append([]string{"--puppetdb", url, "--puppetdb-facts-every", "-1s"}, extra...)...)
}

// copyCA makes the shared PuppetDB's CA the CA of a broker dev whose data
// directory is data.
func copyCA(t *testing.T, p *puppetdbtest.PuppetDB, data string) {
	t.Helper()
	if out, err := exec.Command("cp", "-a", p.CADir, filepath.Join(data, "ca")).CombinedOutput(); err != nil {
		t.Fatalf("copy the shared CA: %v: %s", err, out)
	}
}

// nodeQuery is PuppetDB's AST query for one certname.
func nodeQuery(name string) string { return fmt.Sprintf(`["=","certname",%q]`, name) }

// TestSinkFeedsPuppetDB: real agents run against the farm, which feeds the
// shared PuppetDB over mutual TLS (its own certificate, PuppetDB's checked
// against the farm's CA): PuppetDB then holds each node's facts (with
// trusted), the catalog it applied (exported resources flagged, edges),
// and every report with its events, logs and metrics; a second, unchanged
// run adds a report and sends the catalog and facts no more; Puppetboard's
// client library (pypuppetdb) sees the nodes.
func TestSinkFeedsPuppetDB(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: real broker, PuppetDB and puppet agent; skipped with -short")
	}
	p := puppetdbtest.Shared(t)
	f := farmWithPuppetDB(t, p, p.TLSURL)
	exporter := e2e.NewAgent(t, puppetdbtest.Certname(t, "exporter"))
	exporter.SetFact(t, "cf_export_ip", "192.0.2.10")
	if code, out := exporter.Run(t, f); code != 2 {
		t.Fatalf("first run: exit %d\n%s", code, out)
	}
	name := exporter.Certname
	facts := p.Eventually(t, "facts", `["and",["=","certname","`+name+`"],["=","name","cf_export_ip"]]`,
		func(rows []map[string]any) bool { return len(rows) == 1 })
	if facts[0]["value"] != "192.0.2.10" || facts[0]["environment"] != "production" {
		t.Errorf("fact cf_export_ip in PuppetDB: %v", facts[0])
	}
	trusted := p.Eventually(t, "facts", `["and",["=","certname","`+name+`"],["=","name","trusted"]]`,
		func(rows []map[string]any) bool { return len(rows) == 1 })
	if tr, _ := trusted[0]["value"].(map[string]any); tr["certname"] != name || tr["authenticated"] != "remote" {
		t.Errorf("trusted in PuppetDB: %v", trusted[0]["value"])
	}
	exported := p.Eventually(t, "resources", `["and",["=","certname","`+name+`"],["=","exported",true]]`,
		func(rows []map[string]any) bool { return len(rows) > 0 })
	if exported[0]["type"] != "Host" {
		t.Errorf("exported resource: %v", exported[0])
	}
	p.Eventually(t, "edges", nodeQuery(name), func(rows []map[string]any) bool { return len(rows) > 0 })
	catalogs := p.Eventually(t, "catalogs", nodeQuery(name), func(rows []map[string]any) bool { return len(rows) == 1 })
	firstCatalogAt := catalogs[0]["producer_timestamp"]
	reports := p.Eventually(t, "reports", nodeQuery(name), func(rows []map[string]any) bool { return len(rows) == 1 })
	if reports[0]["status"] != "changed" {
		t.Errorf("first report's status %v, want changed", reports[0]["status"])
	}
	p.Eventually(t, "events", nodeQuery(name), func(rows []map[string]any) bool { return len(rows) > 0 })

	// An unchanged run: one more report; the catalog and facts stay.
	if code, out := exporter.Run(t, f); code != 0 {
		t.Fatalf("second run: exit %d\n%s", code, out)
	}
	p.Eventually(t, "reports", nodeQuery(name), func(rows []map[string]any) bool { return len(rows) == 2 })
	e2e.WaitFor(t, "the outbox to drain", time.Minute, func() bool {
		return f.Metric("compilefarm_puppetdb_outbox_backlog") == 0
	})
	catalogs, err := p.Query(context.Background(), "catalogs", nodeQuery(name))
	if err != nil || len(catalogs) != 1 || catalogs[0]["producer_timestamp"] != firstCatalogAt {
		t.Errorf("after an unchanged run PuppetDB's catalog is %v (%v), want the first one (at %v) kept", catalogs, err, firstCatalogAt)
	}
	for _, c := range []struct{ command, result string }{
		{"replace_facts", "delivered"}, {"replace_catalog", "delivered"}, {"store_report", "delivered"},
	} {
		want := 1.0
		if c.command == "store_report" {
			want = 2
		}
		if got := f.Metric(fmt.Sprintf(`compilefarm_puppetdb_commands_total{command=%q,result=%q}`, c.command, c.result)); got != want {
			t.Errorf("%s %s: %v, want %v", c.command, c.result, got, want)
		}
	}

	// What Puppetboard shows, through Puppetboard's client library.
	if out, err := check(t, "--url", p.URL, name); err != nil {
		t.Errorf("pypuppetdb sees the farm's node incompletely: %v\n%s", err, out)
	}
}

// forwarder forwards a loopback port to PuppetDB while it is open: a
// PuppetDB that goes away and comes back, at one address.
type forwarder struct {
	addr, target string
	mu           sync.Mutex
	ln           net.Listener
}

func (f *forwarder) open(t *testing.T) {
	t.Helper()
	ln, err := net.Listen("tcp", f.addr)
	if err != nil {
		t.Fatalf("reopen %s: %v", f.addr, err)
	}
	f.mu.Lock()
	f.ln = ln
	f.mu.Unlock()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				u, err := net.Dial("tcp", f.target)
				if err != nil {
					return
				}
				defer u.Close()
				go io.Copy(u, c)
				io.Copy(c, u)
			}()
		}
	}()
	t.Cleanup(func() { ln.Close() })
}

// TestSinkOutage: PuppetDB is away while agents run; their runs are not
// slowed or failed, the commands wait in the outbox (its backlog a metric),
// and when PuppetDB is back every one is delivered, in order.
func TestSinkOutage(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: real broker, PuppetDB and puppet agent; skipped with -short")
	}
	p := puppetdbtest.Shared(t)
	// A free loopback port, closed until PuppetDB "comes back".
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fw := &forwarder{addr: l.Addr().String(), target: strings.TrimPrefix(p.URL, "http://")}
	l.Close()
	f := farmWithPuppetDB(t, p, "http://"+fw.addr)
	a := e2e.NewAgent(t, puppetdbtest.Certname(t, "outage"))
	a.SetFact(t, "cf_role", "web")
	for i, want := range []int{2, 0} {
		if code, out := a.Run(t, f); code != want {
			t.Fatalf("run %d while PuppetDB is away: exit %d, want %d\n%s", i+1, code, want, out)
		}
	}
	// facts, catalog, report; report.
	e2e.WaitFor(t, "the commands to wait in the outbox", time.Minute, func() bool {
		return f.Metric("compilefarm_puppetdb_outbox_backlog") == 4 && f.Metric(`compilefarm_puppetdb_commands_total{command="replace_facts",result="retried"}`) >= 1
	})
	if rows, err := p.Query(context.Background(), "reports", nodeQuery(a.Certname)); err != nil || len(rows) != 0 {
		t.Fatalf("PuppetDB has %d reports of a node it never heard from (%v)", len(rows), err)
	}
	fw.open(t)
	// The drainer waits out its back-off (1 s, doubling) before trying again.
	p.Eventually(t, "reports", nodeQuery(a.Certname), func(rows []map[string]any) bool { return len(rows) == 2 })
	p.Eventually(t, "catalogs", nodeQuery(a.Certname), func(rows []map[string]any) bool { return len(rows) == 1 })
	p.Eventually(t, "factsets", nodeQuery(a.Certname), func(rows []map[string]any) bool { return len(rows) == 1 })
	e2e.WaitFor(t, "the outbox to drain", time.Minute, func() bool {
		return f.Metric("compilefarm_puppetdb_outbox_backlog") == 0
	})
	if n := f.Metric("compilefarm_puppetdb_dead_letters"); n != 0 {
		t.Errorf("%v commands dead-lettered after an outage; want none", n)
	}
}

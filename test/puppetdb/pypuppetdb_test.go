// Package puppetdb's tests check what a real PuppetDB holds through the
// clients people read it with: pypuppetdb_check.py makes Puppetboard's
// pypuppetdb calls for the nodes it is given.
package puppetdb

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/compilefarm/compilefarm/internal/puppetdbtest"
)

// python is Debian's python3, which has python3-pypuppetdb (a python3
// earlier on PATH, such as pyenv's, may not).
const python = "/usr/bin/python3"

// TestPypuppetdbCheck feeds two nodes to the shared PuppetDB the way Puppet
// Server's termini do (replace_facts, replace_catalog, store_report) and
// runs pypuppetdb_check.py on them over plain http and over https with the
// CA's client certificate; it must also name what is missing for a node
// PuppetDB never heard of.
func TestPypuppetdbCheck(t *testing.T) {
	p := puppetdbtest.Shared(t)
	if _, err := os.Stat(python); err != nil {
		t.Fatalf("Debian's python3 (%s) is needed for pypuppetdb: %v; run scripts/puppetdb.sh install", python, err)
	}
	nodes := []string{puppetdbtest.Certname(t, "pdbenv-board-a"), puppetdbtest.Certname(t, "pdbenv-board-b")}
	for _, n := range nodes {
		submitNode(t, p, n)
	}

	t.Run("http", func(t *testing.T) {
		out, err := check(t, "--url", p.URL, nodes[0], nodes[1])
		if err != nil {
			t.Fatalf("pypuppetdb_check over http: %v\n%s", err, out)
		}
	})
	t.Run("https", func(t *testing.T) {
		out, err := check(t, "--url", p.TLSURL, "--cacert", p.CACert, "--cert", p.ClientCert, "--key", p.ClientKey, nodes[0])
		if err != nil {
			t.Fatalf("pypuppetdb_check over https: %v\n%s", err, out)
		}
	})
	t.Run("names what is missing", func(t *testing.T) {
		ghost := puppetdbtest.Certname(t, "pdbenv-ghost")
		out, err := check(t, "--url", p.URL, nodes[0], ghost)
		if err == nil || !strings.Contains(out, "not among the nodes: "+ghost) || !strings.Contains(out, "catalog "+ghost) {
			t.Fatalf("pypuppetdb_check with a node PuppetDB does not have: %v; want a failure naming it\n%s", err, out)
		}
	})
}

// check runs pypuppetdb_check.py and returns its output.
func check(t *testing.T, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, python, append([]string{"pypuppetdb_check.py"}, args...)...).CombinedOutput()
	t.Logf("pypuppetdb_check.py %s:\n%s", strings.Join(args, " "), out)
	return string(out), err
}

// submitNode stores facts, a catalog and a report for certname, shaped as
// puppet-terminus-puppetdb sends them, and waits until PuppetDB has all
// three.
func submitNode(t *testing.T, p *puppetdbtest.PuppetDB, certname string) {
	t.Helper()
	now := time.Now().UTC()
	ts := func(d time.Duration) string { return now.Add(d).Format("2006-01-02T15:04:05.000Z") }
	txn := fmt.Sprintf("%08x-0000-4000-8000-%012x", now.UnixNano()&0xffffffff, now.UnixNano()&0xffffffffffff)
	res := func(typ, title string, params map[string]any) map[string]any {
		return map[string]any{"type": typ, "title": title, "exported": false, "file": "/etc/puppetlabs/code/environments/production/manifests/site.pp",
			"line": 3, "tags": []string{strings.ToLower(typ), "pdbenv", "class"}, "parameters": params}
	}
	edge := func(st, stitle, tt, ttitle, rel string) map[string]any {
		return map[string]any{"source": map[string]string{"type": st, "title": stitle},
			"target": map[string]string{"type": tt, "title": ttitle}, "relationship": rel}
	}
	commands := []struct {
		command string
		version int
		payload map[string]any
	}{
		{"replace_facts", 5, map[string]any{
			"certname": certname, "environment": "production", "producer_timestamp": ts(0), "producer": "puppet.test",
			"values": map[string]any{
				"fqdn": certname, "kernelrelease": "6.1.0-28-amd64", "ipaddress": "192.0.2.10",
				"os": map[string]any{"family": "Debian", "name": "Debian", "release": map[string]any{"major": "12"}},
			},
		}},
		{"replace_catalog", 9, map[string]any{
			"certname": certname, "version": "1700000000", "environment": "production", "transaction_uuid": txn,
			"catalog_uuid": txn, "producer_timestamp": ts(0), "producer": "puppet.test", "code_id": nil, "job_id": nil,
			"resources": []map[string]any{
				res("Stage", "main", map[string]any{"name": "main"}),
				res("Class", "Settings", map[string]any{}),
				res("Class", "main", map[string]any{"name": "main"}),
				res("Class", "Pdbenv", map[string]any{}),
				res("File", "/tmp/pdbenv", map[string]any{"ensure": "file", "content": "hello\n"}),
				res("Notify", "hello", map[string]any{"message": "hello"}),
			},
			"edges": []map[string]any{
				edge("Stage", "main", "Class", "Settings", "contains"),
				edge("Stage", "main", "Class", "main", "contains"),
				edge("Class", "main", "Class", "Pdbenv", "contains"),
				edge("Class", "Pdbenv", "File", "/tmp/pdbenv", "contains"),
				edge("Class", "Pdbenv", "Notify", "hello", "contains"),
				edge("File", "/tmp/pdbenv", "Notify", "hello", "before"),
			},
		}},
		{"store_report", 8, map[string]any{
			"certname": certname, "environment": "production", "status": "changed", "noop": false, "noop_pending": false,
			"corrective_change": false, "puppet_version": "7.23.0", "report_format": 12, "configuration_version": "1700000000",
			"start_time": ts(-5 * time.Second), "end_time": ts(-time.Second), "producer_timestamp": ts(0), "producer": "puppet.test",
			"transaction_uuid": txn, "catalog_uuid": txn, "code_id": nil, "job_id": nil, "cached_catalog_status": "not_used",
			"logs": []map[string]any{
				{"file": nil, "line": nil, "level": "info", "message": "Applying configuration version '1700000000'",
					"source": "Puppet", "tags": []string{"info"}, "time": ts(-4 * time.Second)},
				{"file": "/etc/puppetlabs/code/environments/production/manifests/site.pp", "line": 3, "level": "notice",
					"message": "defined 'message' as 'hello'", "source": "/Stage[main]/Pdbenv/Notify[hello]/message",
					"tags": []string{"notice", "notify", "hello", "class", "pdbenv"}, "time": ts(-3 * time.Second)},
			},
			"metrics": []map[string]any{
				{"category": "resources", "name": "total", "value": 2}, {"category": "resources", "name": "changed", "value": 1},
				{"category": "time", "name": "total", "value": 4.2}, {"category": "changes", "name": "total", "value": 1},
				{"category": "events", "name": "success", "value": 1}, {"category": "events", "name": "total", "value": 1},
			},
			"resources": []map[string]any{{
				"resource_type": "Notify", "resource_title": "hello", "skipped": false, "timestamp": ts(-3 * time.Second),
				"file": "/etc/puppetlabs/code/environments/production/manifests/site.pp", "line": 3,
				"containment_path": []string{"Stage[main]", "Pdbenv", "Notify[hello]"}, "corrective_change": false,
				"events": []map[string]any{{"status": "success", "timestamp": ts(-3 * time.Second), "name": "message_changed",
					"property": "message", "new_value": "hello", "old_value": "absent", "corrective_change": false,
					"message": "defined 'message' as 'hello'"}},
			}},
		}},
	}
	for _, c := range commands {
		b, err := json.Marshal(c.payload)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Submit(t.Context(), c.command, c.version, certname, b); err != nil {
			t.Fatal(err)
		}
	}
	p.Eventually(t, "nodes", fmt.Sprintf(`["=", "certname", %q]`, certname), func(rows []map[string]any) bool {
		return len(rows) == 1 && rows[0]["facts_timestamp"] != nil && rows[0]["catalog_timestamp"] != nil && rows[0]["report_timestamp"] != nil
	})
}

package command

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/compilefarm/compilefarm/internal/puppetdbtest"
)

// TestPuppetDBAccepts submits the three commands for one node, made from a
// real agent's facts and report and a catalog compiled by the farm's
// engine, to the shared real PuppetDB, and reads back what it stored: the
// facts with $trusted and the package inventory, the catalog's resources
// (an exported one among them, its sensitive parameter left out) and
// edges, the report with its events, logs and metrics. None of them may
// land in PuppetDB's dead-letter office.
func TestPuppetDBAccepts(t *testing.T) {
	pdb := puppetdbtest.Shared(t)
	certname := puppetdbtest.Certname(t, "wire-exports")
	ctx := t.Context()
	produced := time.Now()

	facts, err := Facts(FactsInput{
		Certname: certname, Environment: "production", Producer: "farm.example.test", ProducerTimestamp: produced,
		TrustedExtensions: map[string]string{"pp_role": "web"},
		Facts: agentFacts(t, certname, map[string]any{"_puppet_inventory_1": map[string]any{
			"packages": []any{[]any{"openssl", "3.0.11-1", "apt"}}}}),
	})
	if err != nil {
		t.Fatal(err)
	}
	served, exports := farmCatalog(t, sharedEngine(t), testEnvironment(t), catalogCase{certname: certname}, agentValues(t, certname))
	cat, err := Catalog(CatalogInput{Catalog: served, Exports: exports, TransactionUUID: "b0c1f2a3-0000-4000-8000-000000000001",
		Producer: "farm.example.test", ProducerTimestamp: produced})
	if err != nil {
		t.Fatal(err)
	}
	report, err := Report(ReportInput{Producer: "farm.example.test", ProducerTimestamp: produced,
		Report: report1(t, func(r map[string]any) {
			r["host"] = certname
			r["time"] = produced.Add(-time.Minute).Format(time.RFC3339Nano)
			status(r, "File[/srv/demo/managed]")["skipped"] = true
		})})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		cmd     Command
		payload []byte
	}{{ReplaceFacts, facts}, {ReplaceCatalog, cat}, {StoreReport, report}} {
		if err := pdb.Submit(ctx, c.cmd.Param(), c.cmd.Version, certname, c.payload); err != nil {
			t.Fatalf("%v: %v", c.cmd, err)
		}
	}

	node := `["=", "certname", "` + certname + `"]`
	pdb.Eventually(t, "facts", `["and", `+node+`, ["=", "name", "trusted"]]`, func(rows []map[string]any) bool {
		if len(rows) != 1 {
			return false
		}
		v := rows[0]["value"].(map[string]any)
		return v["authenticated"] == "remote" && v["extensions"].(map[string]any)["pp_role"] == "web" && v["domain"] == "test"
	})
	pdb.Eventually(t, "facts", `["and", `+node+`, ["=", "name", "os"]]`, func(rows []map[string]any) bool {
		return len(rows) == 1 && rows[0]["value"].(map[string]any)["family"] == "Debian"
	})
	pdb.Eventually(t, "package-inventory", node, func(rows []map[string]any) bool {
		return len(rows) == 1 && rows[0]["package_name"] == "openssl" && rows[0]["version"] == "3.0.11-1"
	})

	pdb.Eventually(t, "resources", `["and", `+node+`, ["=", "type", "Host"]]`, func(rows []map[string]any) bool {
		if len(rows) != 1 {
			return false
		}
		params := rows[0]["parameters"].(map[string]any)
		_, secret := params["comment"]
		return rows[0]["exported"] == true && params["ip"] == "10.0.0.1" && !secret
	})
	pdb.Eventually(t, "resources", `["and", `+node+`, ["=", "type", "File"], ["=", "title", "motd"]]`, func(rows []map[string]any) bool {
		return len(rows) == 1 && slices.Contains(rows[0]["parameters"].(map[string]any)["alias"].([]any), any("/etc/motd"))
	})
	pdb.Eventually(t, "edges", node, func(rows []map[string]any) bool {
		return hasPDBEdge(rows, "Node", "", "contains", "Host", certname) && // the node's definition
			hasPDBEdge(rows, "Class", "Wire::Exporter", "contains", "Wire::Svc", "class-"+certname) &&
			hasPDBEdge(rows, "File", "/tmp/wire/", "required-by", "Notify", "n1")
	})
	catalogs := pdb.Eventually(t, "catalogs", node, func(rows []map[string]any) bool { return len(rows) == 1 })
	if got := catalogs[0]["transaction_uuid"]; got != "b0c1f2a3-0000-4000-8000-000000000001" {
		t.Errorf("catalog transaction_uuid = %v", got)
	}

	reports := pdb.Eventually(t, "reports", node, func(rows []map[string]any) bool { return len(rows) == 1 })
	r := reports[0]
	logs := r["logs"].(map[string]any)["data"].([]any)
	metrics := r["metrics"].(map[string]any)["data"].([]any)
	events := r["resource_events"].(map[string]any)["data"].([]any)
	// PuppetDB makes the skipped resource an event of its own.
	if r["status"] != "changed" || len(logs) != 35 || len(metrics) != 25 || len(events) != 2 {
		t.Errorf("report: status %v, %d logs, %d metrics, %d events; want changed, 35, 25, 2", r["status"], len(logs), len(metrics), len(events))
	}
	pdb.Eventually(t, "events", `["and", `+node+`, ["=", "resource_title", "pupdemo-notify"]]`, func(rows []map[string]any) bool {
		return len(rows) == 1 && rows[0]["status"] == "success" && rows[0]["old_value"] == "absent"
	})
	pdb.Eventually(t, "events", `["and", `+node+`, ["=", "status", "skipped"]]`, func(rows []map[string]any) bool {
		return len(rows) == 1 && rows[0]["resource_title"] == "/srv/demo/managed"
	})

	if dir := os.Getenv(puppetdbtest.EnvDir); dir != "" {
		discard := filepath.Join(dir, "puppetdb", "var", "stockpile", "discard")
		if _, err := os.Stat(discard); err != nil {
			t.Fatalf("PuppetDB's dead-letter office: %v", err)
		}
		dead, _ := filepath.Glob(filepath.Join(discard, "*_"+certname+".json*"))
		if len(dead) > 0 {
			t.Errorf("PuppetDB refused commands: %v", dead)
		}
	}
}

// agentValues are the recorded agent's fact values, as the farm's engine
// takes them.
func agentValues(t *testing.T, certname string) map[string]any {
	var doc struct {
		Values map[string]any `json:"values"`
	}
	if err := decode(agentFacts(t, certname, nil), &doc); err != nil {
		t.Fatal(err)
	}
	return doc.Values
}

// hasPDBEdge is whether PuppetDB's edges hold source -relationship-> target
// (a source of any title for srcTitle "").
func hasPDBEdge(rows []map[string]any, srcType, srcTitle, relationship, dstType, dstTitle string) bool {
	for _, e := range rows {
		if e["relationship"] == relationship && e["source_type"] == srcType && (srcTitle == "" || e["source_title"] == srcTitle) &&
			e["target_type"] == dstType && e["target_title"] == dstTitle {
			return true
		}
	}
	return false
}

package puppetdbref

// The harness's own tests: they need nothing running and run with -short.

import (
	"reflect"
	"strings"
	"testing"
)

func TestNormalizeLogMessage(t *testing.T) {
	tests := []struct{ in, want string }{
		{"Applied catalog in 0.91 seconds", "Applied catalog in <seconds> seconds"},
		{"Applying configuration version '1795822740'", "Applying configuration version '<config-version>'"},
		{"Applying configuration version 'code-3f2a'", "Applying configuration version '<config-version>'"},
		{
			"\n--- /a/motd\t2026-11-27 23:45:02.306754629 +0000\n+++ /tmp/puppet-file20261127-22592-88wzmq\t2026-11-27 23:45:17.420629972 +0000\n@@ -1 +1 @@\n-role web\n+role db\n",
			"\n--- /a/motd\t<mtime>\n+++ /tmp/<tempfile>\t<mtime>\n@@ -1 +1 @@\n-role web\n+role db\n",
		},
		{"Retrieving plugin", "Retrieving plugin"},
		{"Applied catalog in a while", "Applied catalog in a while"},
	}
	for _, tt := range tests {
		if got := normalizeLogMessage(tt.in); got != tt.want {
			t.Errorf("normalizeLogMessage(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestEventKind(t *testing.T) {
	tests := []struct {
		event map[string]any
		want  string
	}{
		{map[string]any{"property": "ensure", "name": "file_created", "status": "success"}, "ensure"},
		{map[string]any{"property": nil, "name": "refresh", "status": "success"}, "(refresh)"},
		{map[string]any{"property": nil, "name": nil, "status": "skipped"}, "(skipped)"},
	}
	for _, tt := range tests {
		if got := eventKind(tt.event); got != tt.want {
			t.Errorf("eventKind(%v) = %q, want %q", tt.event, got, tt.want)
		}
	}
}

// TestNormalize: a side's own names become placeholders, dropped fields
// go, and lists PuppetDB does not order become maps or sorted lists.
func TestNormalize(t *testing.T) {
	id := identity{Certname: "x-ref-01.test", AgentDir: "/tmp/a1", Environments: "/tmp/envs"}
	r := raw{
		Node: map[string]any{"certname": "x-ref-01.test", "latest_report_status": "changed", "latest_report_hash": "abc", "report_timestamp": "T"},
		Factset: map[string]any{"certname": "x-ref-01.test", "environment": "production", "hash": "h", "producer": "p", "timestamp": "T",
			"facts": map[string]any{"data": []any{
				map[string]any{"name": "cf_root", "value": "/tmp/a1/managed"},
				map[string]any{"name": "trusted", "value": map[string]any{"certname": "x-ref-01.test", "hostname": "x-ref-01"}},
			}}},
		Catalog: map[string]any{"certname": "x-ref-01.test", "version": "17", "catalog_uuid": "u", "environment": "production",
			"resources": map[string]any{"data": []any{
				map[string]any{"type": "File", "title": "/tmp/a1/managed/m-x-ref-01.test", "resource": "hash", "exported": true,
					"file": "/tmp/envs/production/manifests/site.pp", "tags": []any{"node", "file", "class"}},
			}},
			"edges": map[string]any{"data": []any{
				map[string]any{"source_type": "Stage", "source_title": "main", "relationship": "contains", "target_type": "Class", "target_title": "main"},
				map[string]any{"source_type": "Class", "source_title": "main", "relationship": "contains", "target_type": "Node", "target_title": "default"},
			}}},
		Reports: []map[string]any{{
			"certname": "x-ref-01.test", "status": "failed", "start_time": "T", "configuration_version": "17",
			"resource_events": map[string]any{"data": []any{
				map[string]any{"resource_type": "Exec", "resource_title": "x", "property": nil, "name": "refresh", "timestamp": "T"},
				map[string]any{"resource_type": "Exec", "resource_title": "x", "property": nil, "name": "refresh", "timestamp": "T2"},
			}},
			"logs": map[string]any{"data": []any{
				map[string]any{"message": "Caching catalog for x-ref-01.test", "time": "T", "tags": []any{"info"}},
				map[string]any{"message": "Applied catalog in 1.5 seconds", "time": "T", "tags": []any{"notice"}},
			}},
			"metrics": map[string]any{"data": []any{
				map[string]any{"category": "time", "name": "total", "value": 1.5},
				map[string]any{"category": "resources", "name": "total", "value": 3.0},
			}},
		}},
	}
	want := map[string]any{
		"node":  map[string]any{"latest_report_status": "changed"},
		"facts": map[string]any{"environment": "production", "facts": map[string]any{"cf_root": "<agent>/managed", "trusted": map[string]any{"certname": "<certname>", "hostname": "<hostname>"}}},
		"catalog": map[string]any{"environment": "production",
			"resources": map[string]any{"File[<agent>/managed/m-<certname>]": map[string]any{
				"type": "File", "title": "<agent>/managed/m-<certname>", "exported": true,
				"file": "<environments>/production/manifests/site.pp", "tags": []any{"class", "file", "node"}}},
			"edges": []any{"Class[main] contains Node[default]", "Stage[main] contains Class[main]"},
		},
		"reports": []any{map[string]any{
			"status": "failed",
			"resource_events": map[string]any{
				"Exec[x] (refresh)":    map[string]any{"resource_type": "Exec", "resource_title": "x", "property": nil, "name": "refresh"},
				"Exec[x] (refresh) #2": map[string]any{"resource_type": "Exec", "resource_title": "x", "property": nil, "name": "refresh"},
			},
			"logs": []any{
				map[string]any{"message": "Caching catalog for <certname>", "tags": []any{"info"}},
				map[string]any{"message": "Applied catalog in <seconds> seconds", "tags": []any{"notice"}},
			},
			"metrics": map[string]any{"time/total": "<seconds>", "resources/total": 3.0},
		}},
	}
	got := normalize(id, r)
	if d := diff("", want, got); len(d) != 0 || !reflect.DeepEqual(canonical(got), canonical(want)) {
		t.Errorf("normalize: %v\ngot  %s", d, canonical(got))
	}
}

func TestCheckLinks(t *testing.T) {
	reports := []map[string]any{
		{"transaction_uuid": "t1", "catalog_uuid": "c1", "configuration_version": "v1"},
		{"transaction_uuid": "t2", "catalog_uuid": "c2", "configuration_version": "v2"},
		{"transaction_uuid": "t3", "catalog_uuid": "c2", "configuration_version": "v2"},
	}
	tests := []struct {
		name    string
		catalog map[string]any
		want    string // "" for no complaint, else a part of the first
	}{
		{"compiled for run 2, applied by run 3 too", map[string]any{"transaction_uuid": "t2", "catalog_uuid": "c2", "version": "v2"}, ""},
		{"another catalog", map[string]any{"transaction_uuid": "t2", "catalog_uuid": "c9", "version": "v2"}, "catalog.catalog_uuid c9"},
		{"another version", map[string]any{"transaction_uuid": "t2", "catalog_uuid": "c2", "version": "v1"}, "catalog.version v1"},
		{"no run of the node", map[string]any{"transaction_uuid": "t9", "catalog_uuid": "c2", "version": "v2"}, "catalog.transaction_uuid t9"},
	}
	for _, tt := range tests {
		bad := checkLinks(raw{Catalog: tt.catalog, Reports: reports})
		switch {
		case tt.want == "" && len(bad) != 0:
			t.Errorf("%s: %v, want nothing", tt.name, bad)
		case tt.want != "" && (len(bad) == 0 || !strings.Contains(bad[0], tt.want)):
			t.Errorf("%s: %v, want %q", tt.name, bad, tt.want)
		}
	}
}

func TestDiff(t *testing.T) {
	ref := map[string]any{"a": 1.0, "b": map[string]any{"c": "x", "only ref": true}, "l": []any{"p", "q"}, "m": []any{"p"}}
	farm := map[string]any{"a": 1.0, "b": map[string]any{"c": "y", "d": nil}, "l": []any{"p", "r"}, "m": []any{"p", "s"}}
	var got []string
	for _, d := range diff("", ref, farm) {
		got = append(got, d.String())
	}
	want := []string{
		`.b.c: reference "x", farm "y"`,
		`.b.d: reference (absent), farm null`,
		`.b["only ref"]: reference true, farm (absent)`,
		`.l[1]: reference "q", farm "r"`,
		`.m.length: reference 1, farm 2`,
		`.m[only in farm]: reference (absent), farm "s"`,
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("diff:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

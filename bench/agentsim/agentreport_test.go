package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"slices"
	"testing"
	"time"
)

// A run's report has the recorded report's fields in the recorded order,
// and each resource status the recorded statuses' fields; it names the
// run and its catalog.
func TestReportFollowsRecording(t *testing.T) {
	tpl, err := newReportTemplate(recordedReport)
	if err != nil {
		t.Fatal(err)
	}
	var recorded struct {
		Statuses map[string]map[string]json.RawMessage `json:"resource_statuses"`
	}
	if err := json.Unmarshal(recordedReport, &recorded); err != nil {
		t.Fatal(err)
	}
	cat := recordedCatalog(t, "catalog-agent1.body")
	start := time.Date(2026, 11, 21, 22, 28, 30, 0, time.UTC)
	for _, tc := range []struct {
		what   string
		cat    *servedCatalog
		status string
	}{
		{"applied", cat, "unchanged"},
		{"no catalog", nil, "failed"},
	} {
		r := &reportRun{node: "agent1.example.test", env: "production", txn: "f443bbc2-4e7e-4b26-9bdf-ed753cb6b4f5",
			start: start, end: start.Add(2 * time.Second), pluginSync: time.Second, catalogTime: 500 * time.Millisecond, cat: tc.cat}
		if tc.cat == nil {
			r.catalogErr = errors.New("HTTP 500")
		}
		b, err := tpl.build(r)
		if err != nil {
			t.Fatal(err)
		}
		keys, raw, err := orderedObject(b)
		if err != nil {
			t.Fatalf("%s: report is not a JSON object: %v", tc.what, err)
		}
		if !slices.Equal(keys, tpl.keys) {
			t.Errorf("%s: report fields %v, recorded %v", tc.what, keys, tpl.keys)
		}
		var rep struct {
			Host, Time, Status, TransactionUUID string
			CatalogUUID                         *string                               `json:"catalog_uuid"`
			ConfigurationVersion                json.RawMessage                       `json:"configuration_version"`
			Statuses                            map[string]map[string]json.RawMessage `json:"resource_statuses"`
		}
		if err := json.Unmarshal(b, &rep); err != nil {
			t.Fatal(err)
		}
		if rep.Host != r.node || rep.Status != tc.status || rep.Time != "2026-11-21T22:28:30.000000000+00:00" ||
			!bytes.Equal(raw["transaction_uuid"], []byte(`"`+r.txn+`"`)) {
			t.Errorf("%s: host %q, status %q, time %q, transaction %s", tc.what, rep.Host, rep.Status, rep.Time, raw["transaction_uuid"])
		}
		if tc.cat != nil && (rep.CatalogUUID == nil || *rep.CatalogUUID != cat.CatalogUUID || !bytes.Equal(rep.ConfigurationVersion, cat.Version)) {
			t.Errorf("%s: catalog_uuid %v, configuration_version %s", tc.what, rep.CatalogUUID, rep.ConfigurationVersion)
		}
		for ref, st := range rep.Statuses {
			rec, ok := recorded.Statuses[ref]
			if !ok {
				t.Errorf("%s: status for %s, which the recorded run has none for", tc.what, ref)
				continue
			}
			for f := range rec {
				if _, ok := st[f]; !ok && f != "provider_used" {
					t.Errorf("%s: status of %s lacks %s", tc.what, ref, f)
				}
			}
			for f := range st {
				if _, ok := rec[f]; !ok {
					t.Errorf("%s: status of %s has %s, which the recording does not", tc.what, ref, f)
				}
			}
			if tc.cat != nil && ref == "File[/srv/demo/managed]" && string(st["containment_path"]) != `["Stage[main]","Pupdemo","File[/srv/demo/managed]"]` {
				t.Errorf("containment_path of %s = %s", ref, st["containment_path"])
			}
		}
		want := 7 // the agent's schedules and filebucket
		if tc.cat != nil {
			want += 6 // the catalog's five files and a notify
		}
		if len(rep.Statuses) != want {
			t.Errorf("%s: %d resource statuses, want %d", tc.what, len(rep.Statuses), want)
		}
	}
}

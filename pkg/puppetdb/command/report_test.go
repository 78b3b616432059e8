package command

import (
	"bytes"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/compilefarm/compilefarm/pkg/farm"
)

// report1 returns the recorded agent's report, edited.
func report1(t *testing.T, edit func(r map[string]any)) []byte {
	t.Helper()
	var r map[string]any
	if err := decode(readFile(t, filepath.Join(recorded, "report-request-agent1.json")), &r); err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		edit(r)
	}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// status returns the resource status key of report r.
func status(r map[string]any, key string) map[string]any {
	return r["resource_statuses"].(map[string]any)[key].(map[string]any)
}

const managedFile = "File[/srv/demo/managed/from_epp.txt]"

// event is an event of the resource status key, edited.
func addEvent(r map[string]any, key string, e map[string]any) {
	ev := map[string]any{
		"audited": false, "property": "content", "previous_value": "{md5}aa", "desired_value": "{md5}bb",
		"historical_value": nil, "message": "content changed", "name": "content_changed", "status": "success",
		"time": "2026-11-21T22:28:47.400000000+00:00", "redacted": nil, "corrective_change": false,
	}
	for k, v := range e {
		if v == nil {
			delete(ev, k)
		} else {
			ev[k] = v
		}
	}
	s := status(r, key)
	s["events"] = append(s["events"].([]any), ev)
}

type reportCase struct {
	name   string
	report func(t *testing.T) []byte
}

var reportCases = []reportCase{
	{"the recorded agent", func(t *testing.T) []byte { return report1(t, nil) }},
	{"the recorded noop run", func(t *testing.T) []byte {
		return readFile(t, filepath.Join(recorded, "report-request-agent2-noop.trimmed.json"))
	}},
	{"noop computed from the events", func(t *testing.T) []byte {
		return report1(t, func(r map[string]any) {
			delete(r, "noop")
			for _, s := range r["resource_statuses"].(map[string]any) {
				for _, e := range s.(map[string]any)["events"].([]any) {
					e.(map[string]any)["status"] = "noop"
				}
			}
		})
	}},
	{"noop computed, an enforced event", func(t *testing.T) []byte {
		return report1(t, func(r map[string]any) {
			r["noop"] = nil
			addEvent(r, managedFile, map[string]any{"status": "noop"})
		})
	}},
	{"skipped resources and event values of every kind", func(t *testing.T) []byte {
		return report1(t, func(r map[string]any) {
			status(r, "File[/srv/demo/managed]")["skipped"] = true
			addEvent(r, managedFile, map[string]any{"previous_value": []any{"b", "a", json.Number("1"), nil, true}, "desired_value": map[string]any{"z": json.Number("1.5"), "a": []any{"x\n\"y\"#{z}"}, "__ptype": "not rich"}})
			addEvent(r, managedFile, map[string]any{"previous_value": json.Number("1e20"), "desired_value": json.Number("420"), "name": nil, "property": "mode"})
			addEvent(r, managedFile, map[string]any{"previous_value": false, "desired_value": json.Number("0.0001"), "corrective_change": true, "status": "failure"})
			addEvent(r, managedFile, map[string]any{"previous_value": json.Number("1000000000000000.0"), "desired_value": json.Number("100000000000000.0")})
			addEvent(r, managedFile, map[string]any{"previous_value": "absent", "desired_value": json.Number("1.0e-05"), "message": map[string]any{"__pvalue": 1}})
		})
	}},
	{"run identifiers and versions", func(t *testing.T) []byte {
		return report1(t, func(r map[string]any) {
			r["job_id"] = "1234"
			r["code_id"] = "urn:puppet:code-id:1:abc;production"
			r["configuration_version"] = "abc123"
			delete(r, "catalog_uuid")
			r["cached_catalog_status"] = false
		})
	}},
	{"float configuration version", func(t *testing.T) []byte {
		return report1(t, func(r map[string]any) { r["configuration_version"] = json.Number("1.5e+20") })
	}},
	{"no time metric", func(t *testing.T) []byte {
		return report1(t, func(r map[string]any) { delete(r["metrics"].(map[string]any), "time") })
	}},
	{"an integer total", func(t *testing.T) []byte {
		return report1(t, func(r map[string]any) {
			m := r["metrics"].(map[string]any)["time"].(map[string]any)
			m["values"] = []any{[]any{"total", "Total", json.Number("17")}, []any{"abc", "Zlabel", json.Number("1")}, []any{"total", "Again", json.Number("99")}}
		})
	}},
	{"a total that rounds across a millisecond", func(t *testing.T) []byte {
		return report1(t, func(r map[string]any) {
			// 0.3 is a little less than 3/10 as a Float: .7 + 0.3 is .999...
			r["time"] = "2026-11-21T22:28:30.700000000Z"
			m := r["metrics"].(map[string]any)["time"].(map[string]any)
			m["values"] = []any{[]any{"total", "Total", json.Number("0.3")}}
		})
	}},
	{"times in other zones", func(t *testing.T) []byte {
		return report1(t, func(r map[string]any) {
			r["time"] = "2026-11-21T17:28:30.337368966-05:00"
			status(r, "Notify[pupdemo-notify]")["time"] = "2026-11-21T22:28:47.548Z"
			r["logs"].([]any)[0].(map[string]any)["time"] = "2026-11-22T03:58:31.390124212+05:30"
		})
	}},
	{"logs with places and repeated tags", func(t *testing.T) []byte {
		return report1(t, func(r map[string]any) {
			l := r["logs"].([]any)[1].(map[string]any)
			l["file"] = "/etc/puppet/site.pp"
			l["line"] = json.Number("12")
			l["tags"] = []any{"notice", "b", "notice", "a"}
			l["level"] = "warning"
			r["logs"].([]any)[2].(map[string]any)["file"] = false
		})
	}},
	{"bytes that are not UTF-8", func(t *testing.T) []byte {
		b := report1(t, func(r map[string]any) {
			r["logs"].([]any)[0].(map[string]any)["message"] = "MARK é"
		})
		return bytes.Replace(b, []byte("MARK"), []byte("caf\xe9"), 1)
	}},
}

// TestReportReference compares Report with what Puppet Server's puppetdb
// report processor sends for the same report.
func TestReportReference(t *testing.T) {
	ref := newReference(t)
	for _, c := range reportCases {
		t.Run(c.name, func(t *testing.T) {
			doc := c.report(t)
			got, err := Report(ReportInput{Report: doc, Producer: "farm.example.test", ProducerTimestamp: now})
			if err != nil {
				t.Fatalf("Report: %v", err)
			}
			want := ref.payload(t, map[string]any{"report": doc})
			sameAsReference(t, comparable(t, got), comparable(t, want))
		})
	}
}

// TestReportReferenceRefuses: a report the processor refuses is refused.
func TestReportReferenceRefuses(t *testing.T) {
	ref := newReference(t)
	tests := []struct {
		name string
		edit func(r map[string]any)
	}{
		{"no environment", func(r map[string]any) { delete(r, "environment") }},
		{"no time", func(r map[string]any) { delete(r, "time") }},
		{"a log without level", func(r map[string]any) { delete(r["logs"].([]any)[0].(map[string]any), "level") }},
		{"an event without time", func(r map[string]any) { addEvent(r, managedFile, map[string]any{"time": nil}) }},
		{"an empty resource status", func(r map[string]any) { r["resource_statuses"].(map[string]any)["X[y]"] = map[string]any{} }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			doc := report1(t, tt.edit)
			refErr := ref.error(t, map[string]any{"report": doc})
			_, err := Report(ReportInput{Report: doc, ProducerTimestamp: now})
			if !errors.Is(err, farm.ErrInvalid) {
				t.Errorf("Report = %v, want ErrInvalid (the processor: %s)", err, refErr)
			}
		})
	}
}

func TestReport(t *testing.T) {
	b, err := Report(ReportInput{Report: report1(t, nil), Producer: "farm.example.test", ProducerTimestamp: now})
	if err != nil {
		t.Fatal(err)
	}
	var p struct {
		Certname, Environment, Status string
		ConfigurationVersion          string `json:"configuration_version"`
		Noop                          bool
		Logs, Metrics                 []map[string]any
		Resources                     []struct {
			ResourceTitle string `json:"resource_title"`
			Events        []map[string]any
		}
	}
	if err := json.Unmarshal(b, &p); err != nil {
		t.Fatal(err)
	}
	if p.Certname != "agent1.example.test" || p.Environment != "production" || p.Status != "changed" ||
		p.ConfigurationVersion != "1795300126" || p.Noop {
		t.Errorf("payload = %s", b)
	}
	// 35 logs, 25 metrics; of 16 resources only the one with an event.
	if len(p.Logs) != 35 || len(p.Metrics) != 25 || len(p.Resources) != 1 || p.Resources[0].ResourceTitle != "pupdemo-notify" {
		t.Errorf("logs %d, metrics %d, resources %+v", len(p.Logs), len(p.Metrics), p.Resources)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ key, want string }{
		{"start_time", "2026-11-21T22:28:30.337+00:00"},
		{"end_time", "2026-11-21T22:28:47.614+00:00"},
		{"producer_timestamp", "2026-11-21T22:30:00.123Z"},
	} {
		if m[tt.key] != tt.want {
			t.Errorf("%s = %v, want %s", tt.key, m[tt.key], tt.want)
		}
	}
}

func TestReportInvalid(t *testing.T) {
	tests := []struct {
		name string
		doc  []byte
		want string
	}{
		{"not JSON", []byte(`{`), "not a JSON report"},
		{"no host", []byte(`{"environment":"e"}`), "no host"},
		{"no environment", report1(t, func(r map[string]any) { delete(r, "environment") }), "no environment"},
		{"bad time", report1(t, func(r map[string]any) { r["time"] = "yesterday" }), `time "yesterday"`},
		{"no metrics", report1(t, func(r map[string]any) { delete(r, "metrics") }), "metrics"},
		{"no resource statuses", report1(t, func(r map[string]any) { delete(r, "resource_statuses") }), "resource_statuses"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Report(ReportInput{Report: tt.doc, ProducerTimestamp: now})
			if !errors.Is(err, farm.ErrInvalid) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Report = %v, want ErrInvalid saying %q", err, tt.want)
			}
		})
	}
	if _, err := Report(ReportInput{Report: report1(t, nil)}); !errors.Is(err, farm.ErrInvalid) {
		t.Errorf("Report without a producer timestamp = %v", err)
	}
}

package main

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"
)

// recordedReport is the report a real puppet agent 7.23.0 sent (PUT
// /puppet/v3/report, report format 12; /work/shared/puppet-protocol): the
// template of the reports the simulated agents send.
//
//go:embed testdata/report-request-agent1.json
var recordedReport []byte

// reportTemplate is the recorded report's fields, in the agent's order, as
// the agent encoded them. A run's report keeps the constant ones
// (report_format, puppet_version, noop, ...) and fills the others from the
// run and its catalog.
type reportTemplate struct {
	keys []string
	raw  map[string]json.RawMessage
}

// reportFilled are the fields a run fills in; the recorded report must have
// each of them.
var reportFilled = []string{"host", "time", "configuration_version", "transaction_uuid", "status", "environment",
	"logs", "metrics", "resource_statuses", "catalog_uuid", "cached_catalog_status"}

func newReportTemplate(b []byte) (*reportTemplate, error) {
	keys, raw, err := orderedObject(b)
	if err != nil {
		return nil, fmt.Errorf("recorded report: %w", err)
	}
	for _, k := range reportFilled {
		if _, ok := raw[k]; !ok {
			return nil, fmt.Errorf("recorded report has no %s", k)
		}
	}
	return &reportTemplate{keys: keys, raw: raw}, nil
}

// reportRun is what a report says about one run.
type reportRun struct {
	node, env, txn string
	start, end     time.Time
	pluginSync     time.Duration // the pluginsync requests
	catalogTime    time.Duration // the catalog request: config_retrieval
	cat            *servedCatalog
	catalogErr     error // the catalog request failed: a failed run without a catalog
}

// build is the run's report, as the agent would send it after applying
// the catalog and changing nothing: status unchanged (failed without a
// catalog), a status per resource of the catalog, metrics and the agent's
// usual log lines.
func (t *reportTemplate) build(r *reportRun) ([]byte, error) {
	status := "unchanged"
	if r.cat == nil {
		status = "failed"
	}
	statuses, n, typeTimes := resourceStatuses(r.cat, r.end)
	var apply float64
	for _, v := range typeTimes {
		apply += v
	}
	fields := map[string]any{
		"host":                  r.node,
		"time":                  puppetTime(r.start),
		"transaction_uuid":      r.txn,
		"status":                status,
		"environment":           r.env,
		"cached_catalog_status": "not_used",
		"logs":                  runLogs(r, apply),
		"metrics":               runMetrics(r, n, typeTimes, apply),
		"configuration_version": nil,
		"catalog_uuid":          nil,
	}
	if r.cat != nil {
		fields["configuration_version"] = r.cat.Version
		fields["catalog_uuid"] = r.cat.CatalogUUID
	}
	b := make([]byte, 0, 8<<10+len(statuses))
	b = append(b, '{')
	for i, k := range t.keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, k)
		b = append(b, ':')
		if k == "resource_statuses" {
			b = append(b, statuses...)
			continue
		}
		v, ok := fields[k]
		if !ok {
			b = append(b, t.raw[k]...)
			continue
		}
		vb, err := json.Marshal(v)
		if err != nil {
			return nil, fmt.Errorf("report field %s: %w", k, err)
		}
		b = append(b, vb...)
	}
	return append(b, '}'), nil
}

// logLine is one entry of a report's logs.
type logLine struct {
	Level   string   `json:"level"`
	Message string   `json:"message"`
	Source  string   `json:"source"`
	Tags    []string `json:"tags"`
	Time    string   `json:"time"`
	File    *string  `json:"file"`
	Line    *int     `json:"line"`
}

// runLogs are the lines a run without changes logs, as in the recording;
// apply is the seconds the catalog took to apply.
func runLogs(r *reportRun, apply float64) []logLine {
	at := func(t time.Time, level, msg string) logLine {
		return logLine{Level: level, Message: msg, Source: "Puppet", Tags: []string{level}, Time: puppetTime(t)}
	}
	logs := []logLine{
		at(r.start, "info", fmt.Sprintf("Using environment '%s'", r.env)),
		at(r.start, "info", "Retrieving pluginfacts"),
		at(r.start, "info", "Retrieving plugin"),
		at(r.start.Add(r.pluginSync), "info", "Loading facts"),
	}
	if r.cat == nil {
		return append(logs, at(r.end, "err", fmt.Sprintf("Could not retrieve catalog from remote server: %v", r.catalogErr)),
			at(r.end, "notice", "Applied catalog in 0.00 seconds"))
	}
	return append(logs,
		at(r.end, "info", fmt.Sprintf("Caching catalog for %s", r.node)),
		at(r.end, "info", fmt.Sprintf("Applying configuration version '%s'", strings.Trim(string(r.cat.Version), `"`))),
		at(r.end, "notice", fmt.Sprintf("Applied catalog in %.2f seconds", apply)))
}

// metric is one of a report's metrics: name, label and [name, label, value] rows.
type metric struct {
	Name   string  `json:"name"`
	Label  string  `json:"label"`
	Values [][]any `json:"values"`
}

// runMetrics are the report's metrics for a run that changed nothing.
func runMetrics(r *reportRun, resources int, typeTimes map[string]float64, apply float64) map[string]metric {
	label := func(s string) string {
		s = strings.ReplaceAll(s, "_", " ")
		return strings.ToUpper(s[:1]) + s[1:]
	}
	row := func(name string, v any) []any { return []any{name, label(name), v} }
	var times [][]any
	types := make([]string, 0, len(typeTimes))
	for typ := range typeTimes {
		types = append(types, typ)
	}
	sort.Strings(types)
	for _, typ := range types {
		times = append(times, row(typ, typeTimes[typ]))
	}
	total := r.end.Sub(r.start).Seconds()
	times = append(times,
		row("plugin_sync", r.pluginSync.Seconds()),
		row("config_retrieval", r.catalogTime.Seconds()),
		row("transaction_evaluation", apply),
		row("catalog_application", apply),
		row("total", total))
	return map[string]metric{
		"resources": {Name: "resources", Label: "Resources", Values: [][]any{
			row("total", resources), row("skipped", 0), row("failed", 0), row("failed_to_restart", 0), row("restarted", 0),
			row("changed", 0), row("out_of_sync", 0), row("scheduled", 0), row("corrective_change", 0)}},
		"time":    {Name: "time", Label: "Time", Values: times},
		"changes": {Name: "changes", Label: "Changes", Values: [][]any{row("total", 0)}},
		"events":  {Name: "events", Label: "Events", Values: [][]any{row("total", 0), row("failure", 0), row("success", 0)}},
	}
}

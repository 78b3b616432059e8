package command

import (
	"encoding/json"
	"fmt"
	"math/big"
	"sort"
	"strconv"
	"time"

	"github.com/compilefarm/compilefarm/internal/jsonscan"
)

// ReportInput is what store report is made of.
type ReportInput struct {
	// Report is the report as the agent sent it (PUT
	// /puppet/v3/report/<certname>, Puppet's report format 12).
	Report []byte
	// Producer is the certname of the farm, which sends the command.
	Producer string
	// ProducerTimestamp is when the farm received the report.
	ProducerTimestamp time.Time
}

// Report returns the payload of store report (StoreReport) that Puppet
// Server's puppetdb report processor sends for the agent's report
// (Puppet::Reports::Puppetdb#report_to_hash on the
// Puppet::Transaction::Report read from it), with the processor's default
// configuration: only the resources with events, or skipped, are sent.
// The certname is the report's host.
func Report(in ReportInput) ([]byte, error) {
	if in.ProducerTimestamp.IsZero() {
		return nil, invalid("store report: no producer timestamp")
	}
	doc, isLossy := text(in.Report)
	var r map[string]json.RawMessage
	if err := decode(doc, &r); err != nil {
		return nil, invalid("store report: not a JSON report: %v", err)
	}
	var host string
	if err := json.Unmarshal(r["host"], &host); err != nil || host == "" {
		return nil, invalid("store report: the report has no host")
	}
	payload, err := reportPayload(r)
	if err != nil {
		return nil, invalid("store report for %s: %v", host, err)
	}
	payload["certname"] = host
	payload["producer_timestamp"] = WireTime(in.ProducerTimestamp)
	payload["producer"] = orNull(in.Producer)
	b, err := encode(payload, isLossy)
	if err != nil {
		return nil, invalid("store report for %s: %v", host, err)
	}
	return b, nil
}

// reportPayload is report_to_hash but for certname and producer.
func reportPayload(r map[string]json.RawMessage) (map[string]any, error) {
	field := func(name string) any {
		var v any
		if raw, ok := r[name]; ok {
			_ = decode(raw, &v) // the document decoded whole
		}
		return v
	}
	// Puppet::Transaction::Report#initialize_from_hash sets these only
	// when they are truthy.
	truthy := func(name string) any {
		if v := field(name); v != false {
			return v
		}
		return nil
	}
	env := field("environment")
	if env == nil {
		return nil, fmt.Errorf("the report has no environment")
	}
	timeText, ok := field("time").(string)
	if !ok {
		return nil, fmt.Errorf("the report has no time")
	}
	start, startTime, err := wireTimeOf(timeText)
	if err != nil {
		return nil, err
	}
	metrics, duration, err := reportMetrics(r["metrics"])
	if err != nil {
		return nil, fmt.Errorf("metrics: %v", err)
	}
	end, err := endTime(startTime, timeText, duration)
	if err != nil {
		return nil, err
	}
	logs, err := reportLogs(r["logs"])
	if err != nil {
		return nil, fmt.Errorf("logs: %v", err)
	}
	resources, err := reportResources(r["resource_statuses"])
	if err != nil {
		return nil, fmt.Errorf("resource_statuses: %v", err)
	}
	noop := field("noop")
	if noop == nil {
		noop = anyEvent(resources, func(s any) bool { return s == "noop" }) &&
			!anyEvent(resources, func(s any) bool { return s != "noop" })
	}
	return map[string]any{
		"job_id":                truthy("job_id"),
		"puppet_version":        field("puppet_version"),
		"report_format":         field("report_format"),
		"configuration_version": rubyToS(field("configuration_version")),
		"start_time":            start,
		"end_time":              end,
		"environment":           env,
		"transaction_uuid":      field("transaction_uuid"),
		"status":                field("status"),
		"noop":                  noop,
		"noop_pending":          field("noop_pending"),
		"corrective_change":     field("corrective_change"),
		"logs":                  logs,
		"metrics":               metrics,
		"resources":             resources,
		"catalog_uuid":          truthy("catalog_uuid"),
		"code_id":               truthy("code_id"),
		"cached_catalog_status": truthy("cached_catalog_status"),
	}, nil
}

// anyEvent is whether an event of the resources has a status that is.
func anyEvent(resources []any, is func(status any) bool) bool {
	for _, r := range resources {
		for _, e := range r.(map[string]any)["events"].([]any) {
			if is(e.(map[string]any)["status"]) {
				return true
			}
		}
	}
	return false
}

// endTime is the report's time plus the run's duration (the total of its
// time metrics; 0 without one), added exactly as Ruby adds a Float to a
// Time, then written as to_wire_time writes it.
func endTime(start time.Time, text string, duration *big.Rat) (string, error) {
	ns := new(big.Rat).SetInt(new(big.Int).SetInt64(start.UnixNano()))
	ns.Add(ns, new(big.Rat).Mul(duration, big.NewRat(1e9, 1)))
	ms := new(big.Int).Div(ns.Num(), new(big.Int).Mul(ns.Denom(), big.NewInt(1e6))) // floor: ns > 0
	if !ms.IsInt64() {
		return "", fmt.Errorf("end time out of range")
	}
	end := time.UnixMilli(ms.Int64()).In(start.Location())
	return formatLike(end, text), nil
}

// metric is Puppet::Util::Metric as read from a report.
type metric struct {
	Name   any     `json:"name"`
	Values [][]any `json:"values"`
}

// reportMetrics returns the metrics flattened as build_metrics_list
// does (by category in the report's order, each category's values sorted
// by label as Metric#values sorts them) and the run's duration
// (metrics["time"]["total"]).
func reportMetrics(raw json.RawMessage) ([]any, *big.Rat, error) {
	keys, err := objectKeys(raw)
	if err != nil {
		return nil, nil, err
	}
	var metrics map[string]metric
	if err := decode(raw, &metrics); err != nil {
		return nil, nil, err
	}
	out := []any{}
	duration := new(big.Rat)
	for _, k := range keys {
		m := metrics[k]
		for _, v := range m.Values {
			if len(v) == 0 {
				return nil, nil, fmt.Errorf("metric %s has an empty value", k)
			}
		}
		values := append([][]any(nil), m.Values...)
		sort.SliceStable(values, func(i, j int) bool { return label(values[i]) < label(values[j]) })
		for _, v := range values {
			out = append(out, map[string]any{"category": m.Name, "name": v[0], "value": v[len(v)-1]})
		}
		if k == "time" {
			// Metric#[]: the first value named so, else 0.
			for _, v := range m.Values {
				if v[0] != "total" {
					continue
				}
				if duration, err = seconds(v); err != nil {
					return nil, nil, fmt.Errorf("metric time total: %v", err)
				}
				break
			}
		}
	}
	return out, duration, nil
}

func label(v []any) string {
	if len(v) < 2 {
		return ""
	}
	s, _ := v[1].(string)
	return s
}

// seconds is the number a metric value [name, label, value] holds,
// exactly as Ruby holds it (an Integer, or the Float nearest a decimal).
func seconds(v []any) (*big.Rat, error) {
	if len(v) < 3 {
		return nil, fmt.Errorf("%v has no value", v)
	}
	n, ok := v[2].(json.Number)
	if !ok {
		return nil, fmt.Errorf("%v is not a number", v[2])
	}
	if isIntegerLiteral(string(n)) {
		r, ok := new(big.Rat).SetString(string(n))
		if !ok {
			return nil, fmt.Errorf("%s is not a number", n)
		}
		return r, nil
	}
	f, err := strconv.ParseFloat(string(n), 64)
	if err != nil {
		return nil, err
	}
	return new(big.Rat).SetFloat64(f), nil
}

// logEntry is Puppet::Util::Log as read from a report.
type logEntry struct {
	Level   any   `json:"level"`
	Message any   `json:"message"`
	Source  any   `json:"source"`
	Tags    []any `json:"tags"`
	Time    any   `json:"time"`
	File    any   `json:"file"`
	Line    any   `json:"line"`
}

// reportLogs is build_logs_list.
func reportLogs(raw json.RawMessage) ([]any, error) {
	var logs []logEntry
	if err := decode(raw, &logs); err != nil {
		return nil, err
	}
	out := make([]any, 0, len(logs))
	for i, l := range logs {
		if _, ok := l.Level.(string); !ok {
			return nil, fmt.Errorf("log %d has no level", i)
		}
		ts, ok := l.Time.(string)
		if !ok {
			return nil, fmt.Errorf("log %d has no time", i)
		}
		wt, _, err := wireTimeOf(ts)
		if err != nil {
			return nil, fmt.Errorf("log %d: %v", i, err)
		}
		out = append(out, map[string]any{
			"file":    falseIsNil(l.File),
			"line":    falseIsNil(l.Line),
			"level":   l.Level,
			"message": l.Message,
			"source":  l.Source,
			"tags":    uniq(l.Tags),
			"time":    wt,
		})
	}
	return out, nil
}

// falseIsNil is v as Log#initialize_from_hash sets an optional field: only
// when it is truthy.
func falseIsNil(v any) any {
	if v == false {
		return nil
	}
	return v
}

// uniq is the tags as a Puppet::Util::TagSet keeps them: each once, in
// their first place.
func uniq(tags []any) []any {
	out := make([]any, 0, len(tags))
	seen := map[string]bool{}
	for _, t := range tags {
		k := rubyInspect(t)
		if !seen[k] {
			seen[k] = true
			out = append(out, t)
		}
	}
	return out
}

// resourceStatus is Puppet::Resource::Status as read from a report.
type resourceStatus struct {
	ResourceType     any               `json:"resource_type"`
	Title            any               `json:"title"`
	File             any               `json:"file"`
	Line             any               `json:"line"`
	ContainmentPath  any               `json:"containment_path"`
	Skipped          any               `json:"skipped"`
	Time             any               `json:"time"`
	CorrectiveChange any               `json:"corrective_change"`
	Events           []json.RawMessage `json:"events"`
}

// reportResources is build_resources_list: the statuses in the report's
// order, those without events left out unless they were skipped.
func reportResources(raw json.RawMessage) ([]any, error) {
	keys, err := objectKeys(raw)
	if err != nil {
		return nil, err
	}
	var statuses map[string]json.RawMessage
	if err := decode(raw, &statuses); err != nil {
		return nil, err
	}
	out := []any{}
	for _, k := range keys {
		var rs resourceStatus
		var fields map[string]json.RawMessage
		if err := decode(statuses[k], &fields); err != nil || len(fields) == 0 {
			return nil, fmt.Errorf("%s is not a resource status", k)
		}
		if err := decode(statuses[k], &rs); err != nil {
			return nil, fmt.Errorf("%s: %v", k, err)
		}
		if _, ok := rs.ResourceType.(string); !ok {
			return nil, fmt.Errorf("%s has no resource_type", k)
		}
		ts, ok := rs.Time.(string)
		if !ok {
			return nil, fmt.Errorf("%s has no time", k)
		}
		wt, _, err := wireTimeOf(ts)
		if err != nil {
			return nil, fmt.Errorf("%s: %v", k, err)
		}
		events := make([]any, 0, len(rs.Events))
		for i, raw := range rs.Events {
			e, err := event(raw)
			if err != nil {
				return nil, fmt.Errorf("%s event %d: %v", k, i, err)
			}
			events = append(events, e)
		}
		if len(events) == 0 && (rs.Skipped == nil || rs.Skipped == false) {
			continue
		}
		out = append(out, map[string]any{
			"skipped":           rs.Skipped,
			"timestamp":         wt,
			"resource_type":     rs.ResourceType,
			"resource_title":    rubyToS(rs.Title),
			"file":              rs.File,
			"line":              rs.Line,
			"containment_path":  rs.ContainmentPath,
			"corrective_change": rs.CorrectiveChange,
			"events":            events,
		})
	}
	return out, nil
}

// eventFields is Puppet::Transaction::Event as read from a report.
type eventFields struct {
	Status           any             `json:"status"`
	Time             any             `json:"time"`
	Name             any             `json:"name"`
	Property         any             `json:"property"`
	DesiredValue     json.RawMessage `json:"desired_value"`
	PreviousValue    json.RawMessage `json:"previous_value"`
	CorrectiveChange any             `json:"corrective_change"`
	Message          any             `json:"message"`
}

// event is event_to_hash of an event read from raw: its values read by
// ToStringifiedConverter, and its old and new values as their to_s.
func event(raw json.RawMessage) (map[string]any, error) {
	var e eventFields
	if err := decode(raw, &e); err != nil {
		return nil, err
	}
	ts, ok := e.Time.(string)
	if !ok {
		return nil, fmt.Errorf("no time")
	}
	wt, _, err := wireTimeOf(ts)
	if err != nil {
		return nil, err
	}
	name := e.Name
	switch name.(type) {
	case string, nil:
	default:
		if name != false {
			return nil, fmt.Errorf("name %v is not a string", name)
		}
		name = nil
	}
	newValue, err := valueText(e.DesiredValue)
	if err != nil {
		return nil, fmt.Errorf("desired_value: %v", err)
	}
	oldValue, err := valueText(e.PreviousValue)
	if err != nil {
		return nil, fmt.Errorf("previous_value: %v", err)
	}
	return map[string]any{
		"status":            plainStringified(e.Status),
		"timestamp":         wt,
		"name":              name,
		"property":          plainStringified(e.Property),
		"new_value":         newValue,
		"old_value":         oldValue,
		"corrective_change": plainStringified(e.CorrectiveChange),
		"message":           plainStringified(e.Message),
	}, nil
}

// valueText is to_s of an event value ("" when absent).
func valueText(raw json.RawMessage) (string, error) {
	if len(raw) == 0 {
		return "", nil
	}
	return inspectRaw(raw)
}

// plainStringified is ToStringifiedConverter's result for plain JSON data:
// the same data, with the two Pcore keys of hashes renamed.
func plainStringified(v any) any {
	switch v := v.(type) {
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = plainStringified(e)
		}
		return out
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, e := range v {
			out[stringifiedKey(k)] = plainStringified(e)
		}
		return out
	}
	return v
}

// objectKeys returns the keys of the JSON object raw in their order (each
// once, where it first appears, as a Ruby hash keeps them); none for null.
func objectKeys(raw json.RawMessage) ([]string, error) {
	s := jsonscan.New(raw)
	if s.Peek() == 'n' || len(raw) == 0 {
		return nil, fmt.Errorf("missing")
	}
	var keys []string
	seen := map[string]bool{}
	s.Object(func(key []byte) {
		k := string(key)
		if !seen[k] {
			seen[k] = true
			keys = append(keys, k)
		}
		s.Skip()
	})
	s.End()
	if err := s.Err(); err != nil {
		return nil, err
	}
	return keys, nil
}

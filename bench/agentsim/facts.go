package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/compilefarm/compilefarm/bench/internal/agentwire"
	"github.com/compilefarm/compilefarm/internal/corpus"
)

// factTemplate is the recorded agent's facts document, ready to be sent
// again for any node at any run: the facts in the agent's order, each kept
// as the agent encoded it, except those facter measures anew at every run
// (corpus.Volatile: uptime, memory and filesystem usage, load), which
// corpus.Churn changes per run and which are encoded again.
type factTemplate struct {
	keys     []string                   // top-level facts, in the agent's order
	raw      map[string]json.RawMessage // each as the agent encoded it
	values   map[string]any             // decoded (json.Number for numbers), for Churn
	volatile map[string]bool            // top-level facts Churn may change
	form     []agentwire.FormField      // the recorded catalog request's fields, in order
}

// The uptime facts facter 4 reports on a machine that has /proc/uptime.
// The recording, made in a container, has none; a fleet's agents do, and
// uptime is the fact that changes at every run, so the template adds them
// (3 days, 4 hours, 5 minutes and 6 seconds of uptime) where missing.
const recordedUptime = 3*86400 + 4*3600 + 5*60 + 6

// newFactTemplate reads the facts of the recorded catalog request.
func newFactTemplate(recorded []byte) (*factTemplate, error) {
	form, err := agentwire.SplitForm(string(recorded))
	if err != nil {
		return nil, err
	}
	doc, err := agentwire.DecodeFacts(recorded)
	if err != nil {
		return nil, err
	}
	var d struct {
		Name   string          `json:"name"`
		Values json.RawMessage `json:"values"`
	}
	if err := json.Unmarshal([]byte(doc), &d); err != nil {
		return nil, fmt.Errorf("recorded facts: %w", err)
	}
	if d.Name != agentwire.RecordedName {
		return nil, fmt.Errorf("recorded facts are named %q, want %q", d.Name, agentwire.RecordedName)
	}
	keys, raw, err := orderedObject(d.Values)
	if err != nil {
		return nil, fmt.Errorf("recorded facts: %w", err)
	}
	t := &factTemplate{keys: keys, raw: raw, values: map[string]any{}, volatile: map[string]bool{}, form: form}
	if _, ok := raw["system_uptime"]; !ok {
		t.addUptime(recordedUptime)
	}
	for _, p := range corpus.Volatile {
		t.volatile[p[0]] = true
	}
	for k, v := range t.raw {
		dec := json.NewDecoder(bytes.NewReader(v))
		dec.UseNumber()
		var x any
		if err := dec.Decode(&x); err != nil {
			return nil, fmt.Errorf("recorded fact %s: %w", k, err)
		}
		t.values[k] = x
	}
	return t, nil
}

// addUptime adds facter 4's uptime facts for secs seconds of uptime.
func (t *factTemplate) addUptime(secs uint64) {
	text := corpus.UptimeText(secs)
	add := func(k, v string) {
		t.keys = append(t.keys, k)
		t.raw[k] = json.RawMessage(v)
	}
	add("system_uptime", fmt.Sprintf(`{"days":%d,"hours":%d,"seconds":%d,"uptime":%q}`, secs/86400, secs/3600, secs, text))
	add("uptime", fmt.Sprintf("%q", text))
	add("uptime_days", fmt.Sprint(secs/86400))
	add("uptime_hours", fmt.Sprint(secs/3600))
	add("uptime_seconds", fmt.Sprint(secs))
}

// orderedObject splits a JSON object into its keys, in order, and their
// values as encoded.
func orderedObject(b []byte) ([]string, map[string]json.RawMessage, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, nil, fmt.Errorf("want a JSON object")
	}
	var keys []string
	raw := map[string]json.RawMessage{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, nil, err
		}
		k, ok := tok.(string)
		if !ok {
			return nil, nil, fmt.Errorf("object key %v is not a string", tok)
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, nil, fmt.Errorf("fact %s: %w", k, err)
		}
		if _, dup := raw[k]; !dup {
			keys = append(keys, k)
		}
		raw[k] = v
	}
	return keys, raw, nil
}

// puppetTime formats t as the agent's facts and reports do (Ruby's
// Time#iso8601(9)): 2026-11-21T22:27:59.591127718+00:00.
func puppetTime(t time.Time) string {
	return t.UTC().Format("2006-01-02T15:04:05.000000000-07:00")
}

// document is the facts document node's agent uploads at its run number
// run (0, 1, ...) at time now: every fact as recorded except the volatile
// ones, which differ at every run (corpus.Churn), and the document's
// timestamp (now) and expiration (now + runinterval), as the agent sets
// them. rename is agentwire.Renamer(node).
func (t *factTemplate) document(rename *strings.Replacer, run int, now time.Time, runinterval time.Duration) (string, error) {
	churned := corpus.Churn(t.values, run)
	var b strings.Builder
	b.Grow(20 << 10)
	b.WriteString(`{"name":"` + agentwire.RecordedName + `","values":{`)
	for i, k := range t.keys {
		if i > 0 {
			b.WriteByte(',')
		}
		kb, _ := json.Marshal(k)
		b.Write(kb)
		b.WriteByte(':')
		v := t.raw[k]
		if t.volatile[k] {
			var err error
			if v, err = json.Marshal(churned[k]); err != nil {
				return "", fmt.Errorf("encode fact %s: %w", k, err)
			}
		}
		b.Write(v)
	}
	fmt.Fprintf(&b, `},"timestamp":"%s","expiration":"%s"}`, puppetTime(now), puppetTime(now.Add(runinterval)))
	return rename.Replace(b.String()), nil
}

// catalogBody is the catalog request form the agent posts: the recorded
// fields in the recorded order, with this run's facts (URL-encoded twice,
// as the agent does), environment and transaction UUID.
func (t *factTemplate) catalogBody(doc, env, txn string) []byte {
	var b bytes.Buffer
	b.Grow(len(doc)*2 + 512)
	for i, f := range t.form {
		if i > 0 {
			b.WriteByte('&')
		}
		b.WriteString(f.Name)
		b.WriteByte('=')
		switch f.Name {
		case "facts":
			b.WriteString(agentwire.Escape(agentwire.Escape(doc)))
		case "environment", "configured_environment":
			b.WriteString(agentwire.Escape(env))
		case "transaction_uuid":
			b.WriteString(txn)
		default:
			b.WriteString(f.Value)
		}
	}
	return b.Bytes()
}

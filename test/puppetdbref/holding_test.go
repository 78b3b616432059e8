package puppetdbref

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/compilefarm/compilefarm/internal/puppetdbtest"
)

// raw is what PuppetDB answers for one node: its row of each entity
// (nodes, factsets, catalogs: with resources and edges inline) and its
// reports (with resource events, logs and metrics inline), oldest first.
type raw struct {
	Node    map[string]any   `json:"node"`
	Factset map[string]any   `json:"factset"`
	Catalog map[string]any   `json:"catalog"`
	Reports []map[string]any `json:"reports"`
}

// fetch waits until PuppetDB holds the node's reports of the whole
// scenario and its facts and catalog of the last fact change (PuppetDB
// processes commands asynchronously, and the farm's sink sends them from
// its outbox), and returns all of it.
func fetch(t *testing.T, pdb *puppetdbtest.PuppetDB, certname string) raw {
	t.Helper()
	q := fmt.Sprintf(`["=","certname",%q]`, certname)
	one := func(entity string, ok func(map[string]any) bool) map[string]any {
		rows := pdb.Eventually(t, entity, q, func(rows []map[string]any) bool { return len(rows) == 1 && ok(rows[0]) })
		return rows[0]
	}
	last := scenario[len(scenario)-1]
	var r raw
	r.Reports = pdb.Eventually(t, "reports", q, func(rows []map[string]any) bool { return len(rows) == len(scenario) })
	sort.Slice(r.Reports, func(i, j int) bool { return str(r.Reports[i]["start_time"]) < str(r.Reports[j]["start_time"]) })
	r.Factset = one("factsets", func(row map[string]any) bool {
		for _, f := range data(row["facts"]) {
			if f["name"] == "cf_role" {
				return f["value"] == last.role
			}
		}
		return false
	})
	r.Catalog = one("catalogs", func(row map[string]any) bool {
		for _, res := range data(row["resources"]) {
			if res["type"] == "File" && strings.HasSuffix(str(res["title"]), "/service.conf") {
				p, _ := res["parameters"].(map[string]any)
				return p["content"] == "role="+last.role+"\n"
			}
		}
		return false
	})
	r.Node = one("nodes", func(row map[string]any) bool {
		return row["latest_report_status"] == last.wantStatus && row["latest_report_hash"] == r.Reports[len(r.Reports)-1]["hash"]
	})
	return r
}

// data returns the rows of an expanded PuppetDB field ({"href", "data"}).
func data(v any) []map[string]any {
	m, _ := v.(map[string]any)
	list, _ := m["data"].([]any)
	out := make([]map[string]any, 0, len(list))
	for _, x := range list {
		if row, ok := x.(map[string]any); ok {
			out = append(out, row)
		}
	}
	return out
}

func str(v any) string { s, _ := v.(string); return s }

// identity names what differs between the two sides only because they are
// two nodes with their own agents reading the code from their own place.
type identity struct {
	Certname     string // the node's certname: each side has its own node
	AgentDir     string // the agent's directory (its vardir, and cf_root under it)
	Environments string // the directory the manifests were read from, as PuppetDB's file fields name it
}

// Placeholders normalize puts in place of a side's own values.
const (
	phCertname = "<certname>"
	phHostname = "<hostname>"
	phAgent    = "<agent>"
	phEnvs     = "<environments>"
	phVersion  = "<config-version>"
	phSeconds  = "<seconds>"
	phMtime    = "<mtime>"
	phTempFile = "<tempfile>"
)

// normalize turns what PuppetDB holds for one side into what must be
// equal on both sides. Every normalization and its reason:
//
//   - the certname becomes <certname> and its first label (trusted
//     facts' hostname) <hostname>, wherever they appear (facts, titles,
//     tags, messages): each side is its own node;
//   - the agent's directory becomes <agent>: each side has its own agent,
//     whose files (cf_root, the state file) live there;
//   - the directory of the environments becomes <environments> in
//     resources', events' and logs' file fields: Puppet Server names its
//     environmentpath, the farm the public name of its code's snapshots
//     (/compilefarm/environments, code.PublicDir);
//   - timestamps are dropped (node, factset, catalog, report, event and
//     log times; producer_timestamp, receive_time, start_time, end_time):
//     two sets of runs happen at two times;
//   - producer is dropped: Puppet Server's certname on one side, the
//     farm's on the other (issue 22 excepts it);
//   - hashes are dropped (the factset's, catalog's, report's, node's
//     latest_report_hash, each resource's "resource"), and so is code_id,
//     the code's hash where a server has one: they digest timestamps,
//     producers and certnames, or a server's own view of the code;
//   - transaction_uuid and catalog_uuid are dropped: each run has its own
//     and each compile makes its own. checkLinks checks, per side, what
//     links them instead;
//   - configuration_version (reports) and version (catalogs) are dropped,
//     and in the log "Applying configuration version '...'" it becomes
//     <config-version>: Puppet Server's default is the compile's time in
//     seconds. checkLinks checks that the stored catalog's version is the
//     one the last run applied;
//   - time metrics keep their names but their values become <seconds>,
//     and so does the duration in "Applied catalog in N seconds": two runs
//     never take the same time;
//   - in the file diffs the agent logs (show_diff), the header's file
//     times become <mtime> and the agent's temporary file's name
//     <tempfile>: files are written at the time of the run, temporary
//     names hold the agent's PID and a random part.
//
// Lists whose order PuppetDB does not keep (facts, resources, edges,
// events, metrics, tags) become maps or sorted lists; logs keep the order
// the agent logged them in.
func normalize(id identity, r raw) map[string]any {
	hostname, _, _ := strings.Cut(id.Certname, ".")
	rewrite := strings.NewReplacer(
		id.AgentDir, phAgent,
		id.Environments, phEnvs,
		id.Certname, phCertname,
		hostname, phHostname,
	)
	strs := func(v any) any { return rewriteStrings(v, rewrite.Replace) }
	return map[string]any{
		"node":    strs(normalizeNode(r.Node)),
		"facts":   strs(normalizeFactset(r.Factset)),
		"catalog": strs(normalizeCatalog(r.Catalog)),
		"reports": strs(normalizeReports(r.Reports)),
	}
}

// dropped are the fields of each entity normalize drops (see its doc).
var dropped = map[string][]string{
	"node":    {"facts_timestamp", "catalog_timestamp", "report_timestamp", "latest_report_hash", "certname"},
	"factset": {"timestamp", "producer_timestamp", "producer", "hash", "certname"},
	"catalog": {"producer_timestamp", "producer", "hash", "code_id", "transaction_uuid", "catalog_uuid", "version", "certname"},
	"report": {"producer_timestamp", "producer", "hash", "code_id", "transaction_uuid", "catalog_uuid",
		"configuration_version", "start_time", "end_time", "receive_time", "certname"},
	"event":    {"timestamp"},
	"log":      {"time"},
	"resource": {"resource"},
}

// without returns a copy of m without the keys.
func without(m map[string]any, keys []string) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		if !slices.Contains(keys, k) {
			out[k] = v
		}
	}
	return out
}

func normalizeNode(n map[string]any) map[string]any { return without(n, dropped["node"]) }

// normalizeFactset keeps the environment and the facts as a map by name.
func normalizeFactset(f map[string]any) map[string]any {
	out := without(f, dropped["factset"])
	values := map[string]any{}
	for _, row := range data(f["facts"]) {
		values[str(row["name"])] = row["value"]
	}
	out["facts"] = values
	return out
}

// normalizeCatalog keys resources by Type[title] and turns edges into a
// sorted list of "Type[title] relationship Type[title]".
func normalizeCatalog(c map[string]any) map[string]any {
	out := without(c, dropped["catalog"])
	resources := map[string]any{}
	for _, r := range data(c["resources"]) {
		r = without(r, dropped["resource"])
		r["tags"] = sortedStrings(r["tags"])
		resources[ref(r["type"], r["title"])] = r
	}
	out["resources"] = resources
	var edges []any
	for _, e := range data(c["edges"]) {
		edges = append(edges, ref(e["source_type"], e["source_title"])+" "+str(e["relationship"])+" "+ref(e["target_type"], e["target_title"]))
	}
	slices.SortFunc(edges, func(a, b any) int { return strings.Compare(a.(string), b.(string)) })
	out["edges"] = edges
	return out
}

var (
	appliedIn    = regexp.MustCompile(`^Applied catalog in [0-9.]+ seconds$`)
	applyingConf = regexp.MustCompile(`^Applying configuration version '.*'$`)
	// diffHeader is a line of a file diff's header: "--- PATH\tMTIME" or
	// "+++ TEMPFILE\tMTIME".
	diffHeader = regexp.MustCompile(`(?m)^(---|\+\+\+) (\S+)\t\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? [+-]\d{4}$`)
	// puppetTemp is a temporary file's name as the agent makes them
	// (Dir::Tmpname: prefix, date, PID, random).
	puppetTemp = regexp.MustCompile(`/puppet-file\d{8}-\d+-[0-9a-z]+`)
)

// normalizeLogMessage normalizes what a log message says of the time or
// of the run itself (see normalize).
func normalizeLogMessage(msg string) string {
	switch {
	case appliedIn.MatchString(msg):
		return "Applied catalog in " + phSeconds + " seconds"
	case applyingConf.MatchString(msg):
		return "Applying configuration version '" + phVersion + "'"
	}
	msg = diffHeader.ReplaceAllString(msg, "$1 $2\t"+phMtime)
	return puppetTemp.ReplaceAllString(msg, "/"+phTempFile)
}

// eventKind tells a resource's events apart: the property it changed,
// else its name (a refresh), else its status (a skip).
func eventKind(e map[string]any) string {
	switch {
	case str(e["property"]) != "":
		return str(e["property"])
	case str(e["name"]) != "":
		return "(" + str(e["name"]) + ")"
	}
	return "(" + str(e["status"]) + ")"
}

// normalizeReports normalizes each report: events keyed by resource and
// property, logs in order, metrics keyed by category/name.
func normalizeReports(reports []map[string]any) []any {
	var out []any
	for _, r := range reports {
		n := without(r, dropped["report"])
		events := map[string]any{}
		for _, e := range data(r["resource_events"]) {
			key := ref(e["resource_type"], e["resource_title"]) + " " + eventKind(e)
			k := key
			for n := 2; events[k] != nil; n++ {
				k = fmt.Sprintf("%s #%d", key, n)
			}
			events[k] = without(e, dropped["event"])
		}
		n["resource_events"] = events
		var logs []any
		for _, l := range data(r["logs"]) {
			l = without(l, dropped["log"])
			l["tags"] = sortedStrings(l["tags"])
			l["message"] = normalizeLogMessage(str(l["message"]))
			logs = append(logs, l)
		}
		n["logs"] = logs
		metrics := map[string]any{}
		for _, m := range data(r["metrics"]) {
			v := m["value"]
			if m["category"] == "time" {
				v = phSeconds
			}
			metrics[str(m["category"])+"/"+str(m["name"])] = v
		}
		n["metrics"] = metrics
		out = append(out, n)
	}
	return out
}

// ref is a resource's reference, Type[title].
func ref(typ, title any) string { return str(typ) + "[" + str(title) + "]" }

func sortedStrings(v any) any {
	list, ok := v.([]any)
	if !ok {
		return v
	}
	out := slices.Clone(list)
	slices.SortFunc(out, func(a, b any) int { return strings.Compare(fmt.Sprint(a), fmt.Sprint(b)) })
	return out
}

// rewriteStrings applies f to every string in v, map keys included.
func rewriteStrings(v any, f func(string) string) any {
	switch x := v.(type) {
	case string:
		return f(x)
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[f(k)] = rewriteStrings(e, f)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = rewriteStrings(e, f)
		}
		return out
	}
	return v
}

// checkLinks checks, on one side, what links the fields normalize drops:
// the stored catalog is the one the last run applied (its catalog_uuid
// and version are the last report's catalog_uuid and
// configuration_version), it was compiled for one of the node's runs (its
// transaction_uuid is a report's), and each report's runs are distinct.
// It returns what does not hold.
func checkLinks(r raw) []string {
	var bad []string
	if len(r.Reports) == 0 {
		return []string{"no reports"}
	}
	lastReport := r.Reports[len(r.Reports)-1]
	if c, l := r.Catalog["catalog_uuid"], lastReport["catalog_uuid"]; c != l {
		bad = append(bad, fmt.Sprintf("catalog.catalog_uuid %v is not the last report's catalog_uuid %v", c, l))
	}
	if c, l := r.Catalog["version"], lastReport["configuration_version"]; c != l {
		bad = append(bad, fmt.Sprintf("catalog.version %v is not the last report's configuration_version %v", c, l))
	}
	seen := map[any]bool{}
	for _, rep := range r.Reports {
		if seen[rep["transaction_uuid"]] {
			bad = append(bad, fmt.Sprintf("two reports with transaction_uuid %v", rep["transaction_uuid"]))
		}
		seen[rep["transaction_uuid"]] = true
	}
	if !seen[r.Catalog["transaction_uuid"]] {
		bad = append(bad, fmt.Sprintf("catalog.transaction_uuid %v is none of the reports' transaction_uuid", r.Catalog["transaction_uuid"]))
	}
	return bad
}

// canonical renders a normalized holding as indented JSON with sorted
// keys (and <placeholders> as they are), the form recorded in testdata.
func canonical(v any) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		panic(err) // only JSON values reach here
	}
	return b.Bytes()
}

package command

import (
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/compilefarm/compilefarm/pkg/farm"
)

// catalogPayloadOf builds the payload and decodes it.
func catalogPayloadOf(t *testing.T, in CatalogInput) map[string]any {
	t.Helper()
	if in.ProducerTimestamp.IsZero() {
		in.ProducerTimestamp = now
	}
	b, err := Catalog(in)
	if err != nil {
		t.Fatalf("Catalog: %v", err)
	}
	var p map[string]any
	if err := decode(b, &p); err != nil {
		t.Fatal(err)
	}
	return p
}

// resourceOf finds a resource of a payload.
func resourceOf(p map[string]any, typ, title string) map[string]any {
	for _, r := range p["resources"].([]any) {
		r := r.(map[string]any)
		if r["type"] == typ && r["title"] == title {
			return r
		}
	}
	return nil
}

// edgesOf lists a payload's edges as "Source -relationship-> Target".
func edgesOf(p map[string]any) []string {
	var out []string
	for _, e := range p["edges"].([]any) {
		e := e.(map[string]any)
		s, d := e["source"].(map[string]any), e["target"].(map[string]any)
		out = append(out, s["type"].(string)+"["+s["title"].(string)+"] -"+e["relationship"].(string)+"-> "+d["type"].(string)+"["+d["title"].(string)+"]")
	}
	return out
}

func hasEdge(p map[string]any, edge string) bool {
	for _, e := range edgesOf(p) {
		if e == edge {
			return true
		}
	}
	return false
}

// TestCatalogRecorded: the catalogs the recorded Puppet Server sent its
// agents (one static) become payloads without what Puppet Server does not
// send PuppetDB.
func TestCatalogRecorded(t *testing.T) {
	tests := []struct {
		file      string
		resources int
		edges     int // containment edges at least
	}{
		{"catalog-agent1-static-with-code_id.body", 11, 10},
		{"catalog-agent2-ntp-apache.body", 222, 221},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			doc := readFile(t, filepath.Join(recorded, tt.file))
			p := catalogPayloadOf(t, CatalogInput{Catalog: doc, TransactionUUID: "tx-1", JobID: "7", Producer: "farm.example.test"})
			var src map[string]any
			if err := decode(doc, &src); err != nil {
				t.Fatal(err)
			}
			want := map[string]any{
				"certname": src["name"], "version": string(src["version"].(json.Number)), "code_id": src["code_id"],
				"catalog_uuid": src["catalog_uuid"], "transaction_uuid": "tx-1", "job_id": "7",
				"environment": "production", "producer": "farm.example.test", "producer_timestamp": "2026-11-21T22:30:00.123Z",
			}
			for k, v := range want {
				if p[k] != v {
					t.Errorf("%s = %v, want %v", k, p[k], v)
				}
			}
			for _, k := range []string{"metadata", "recursive_metadata", "classes", "tags", "catalog_format", "name"} {
				if _, ok := p[k]; ok {
					t.Errorf("payload has %s", k)
				}
			}
			if n := len(p["resources"].([]any)); n != tt.resources {
				t.Errorf("%d resources, want %d", n, tt.resources)
			}
			if n := len(p["edges"].([]any)); n < tt.edges {
				t.Errorf("%d edges, want at least %d", n, tt.edges)
			}
			for _, r := range p["resources"].([]any) {
				if _, ok := r.(map[string]any)["parameters"].(map[string]any); !ok {
					t.Errorf("%v has no parameters object", r)
				}
			}
		})
	}
}

// exportsCatalog is a node's catalog: a class holding one exported
// resource the node collects itself.
const exportsCatalog = `{"tags":["settings"],"name":"n1.test","version":"code-1","code_id":"code-1",
"catalog_uuid":"uuid-1","catalog_format":2,"environment":"production","resources":[
{"type":"Stage","title":"main","tags":["stage"],"exported":false,"kind":"compilable_type","parameters":{"name":"main"}},
{"type":"Class","title":"main","tags":["class"],"exported":false,"kind":"unknown","parameters":{"name":"main"}},
{"type":"Class","title":"Web","tags":["class","web"],"exported":false,"kind":"class"},
{"type":"Class","title":"Db","tags":["class","db"],"exported":false,"kind":"class"},
{"type":"Notify","title":"mine","tags":["notify","mine","class","web"],"file":"/e/site.pp","line":3,"exported":true,"kind":"compilable_type","parameters":{"message":"m","require":"Class[Db]"}}
],"edges":[{"source":"Stage[main]","target":"Class[main]"},{"source":"Stage[main]","target":"Class[Web]"},
{"source":"Stage[main]","target":"Class[Db]"},{"source":"Class[Web]","target":"Notify[mine]"}],"classes":["web","db"]}`

func TestCatalogExports(t *testing.T) {
	host := `{"certname":"n1.test","type":"Host","title":"n1.test","tags":["host","n1.test","class","web"],
		"parameters":{"ip":"10.0.0.1","comment":{"__ptype":"Sensitive","__pvalue":"secret"},"name":"n1"},"file":"/e/site.pp","line":4}`
	mine := `{"certname":"n1.test","type":"Notify","title":"mine","tags":["notify","mine","class","web"],"parameters":{"message":"m"}}`
	tests := []struct {
		name      string
		exports   string
		wantEdge  string // the Host's containment edge, "" for none
		wantError string
	}{
		{"container found by tags", `[` + host + `,` + mine + `]`, "Class[Web] -contains-> Host[n1.test]", ""},
		{"container recorded", `[` + strings.Replace(host, `"line":4`, `"line":4,"container":"Class[Db]"`, 1) + `]`, "Class[Db] -contains-> Host[n1.test]", ""},
		{"recorded container not in the catalog", `[` + strings.Replace(host, `"line":4`, `"line":4,"container":"Class[Gone]"`, 1) + `]`, "", ""},
		{"tags of two containers", `[` + strings.Replace(host, `"class","web"`, `"class","web","db"`, 1) + `]`, "", ""},
		{"no container's tags", `[` + strings.Replace(host, `"class","web"`, `"x"`, 1) + `]`, "", ""},
		{"not a list", `{}`, "", "exported resources"},
		{"no title", `[{"type":"Host"}]`, "", "no type or title"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := CatalogInput{Catalog: []byte(exportsCatalog), Exports: []byte(tt.exports), ProducerTimestamp: now}
			b, err := Catalog(in)
			if tt.wantError != "" {
				if !errors.Is(err, farm.ErrInvalid) || !strings.Contains(err.Error(), tt.wantError) {
					t.Errorf("Catalog = %v, want ErrInvalid saying %q", err, tt.wantError)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var p map[string]any
			if err := decode(b, &p); err != nil {
				t.Fatal(err)
			}
			h := resourceOf(p, "Host", "n1.test")
			if h == nil || h["exported"] != true {
				t.Fatalf("Host[n1.test] = %v, want it exported", h)
			}
			params := h["parameters"].(map[string]any)
			if _, ok := params["comment"]; ok {
				t.Errorf("the sensitive comment was sent: %v", params)
			}
			if a, _ := json.Marshal(params["alias"]); string(a) != `["n1"]` {
				t.Errorf("alias = %s, want [\"n1\"]", a)
			}
			if _, ok := h["sensitive_parameters"]; ok {
				t.Error("sensitive_parameters sent")
			}
			var contains []string
			for _, e := range edgesOf(p) {
				if strings.HasSuffix(e, "Host[n1.test]") {
					contains = append(contains, e)
				}
			}
			if want := []string{tt.wantEdge}; (tt.wantEdge == "" && len(contains) > 0) || (tt.wantEdge != "" && strings.Join(contains, ",") != want[0]) {
				t.Errorf("edges to the Host = %v, want %q", contains, tt.wantEdge)
			}
			n := 0
			for _, r := range p["resources"].([]any) {
				if r.(map[string]any)["title"] == "mine" {
					n++
				}
			}
			if n != 1 {
				t.Errorf("Notify[mine] sent %d times, want once (the catalog's)", n)
			}
			if !hasEdge(p, "Class[Db] -required-by-> Notify[mine]") {
				t.Errorf("no edge for Notify[mine]'s require: %v", edgesOf(p))
			}
		})
	}
}

func TestCatalogRelationships(t *testing.T) {
	catalogWith := func(resources string) []byte {
		return []byte(`{"name":"n1.test","version":1,"environment":"e","resources":[
{"type":"Class","title":"main","tags":["class"],"exported":false,"parameters":{"name":"main"}},` + resources + `],
"edges":[{"source":"Class[main]","target":"File[/a/]"}]}`)
	}
	file := `{"type":"File","title":"/a/","tags":["file"],"exported":false,"parameters":{"path":"/a","alias":"x"}}`
	tests := []struct {
		name      string
		resource  string
		wantEdges []string
		wantError string
	}{
		{"by title, trailing slashes", `{"type":"Notify","title":"n","tags":[],"exported":false,"parameters":{"require":"File[/a//]","before":["File[/a/]"]}}`,
			[]string{"Notify[n] -before-> File[/a/]", "File[/a/] -required-by-> Notify[n]"}, ""},
		{"by namevar and alias", `{"type":"Notify","title":"n","tags":[],"exported":false,"parameters":{"notify":["File[x]","File[/a]"],"subscribe":"File[x]"}}`,
			[]string{"Notify[n] -notifies-> File[/a/]", "File[/a/] -subscription-of-> Notify[n]"}, ""},
		{"not in the catalog", `{"type":"Notify","title":"n","tags":[],"exported":false,"parameters":{"require":"File[/b]"}}`,
			nil, "File[/b] doesn't seem to be in the catalog"},
		{"not a reference", `{"type":"Notify","title":"n","tags":[],"exported":false,"parameters":{"require":"file[/a]"}}`,
			nil, "doesn't seem to be in the correct format"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := Catalog(CatalogInput{Catalog: catalogWith(file + "," + tt.resource), ProducerTimestamp: now})
			if tt.wantError != "" {
				if !errors.Is(err, farm.ErrInvalid) || !strings.Contains(err.Error(), tt.wantError) {
					t.Errorf("Catalog = %v, want ErrInvalid saying %q", err, tt.wantError)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var p map[string]any
			if err := decode(b, &p); err != nil {
				t.Fatal(err)
			}
			got := edgesOf(p)
			want := append([]string{"Class[main] -contains-> File[/a/]"}, tt.wantEdges...)
			if strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Errorf("edges:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
			if a, _ := json.Marshal(resourceOf(p, "File", "/a/")["parameters"].(map[string]any)["alias"]); string(a) != `["/a","x"]` {
				t.Errorf("File[/a/] aliases = %s", a)
			}
		})
	}
	exported := `{"type":"Notify","title":"n","tags":[],"exported":false,"parameters":{"require":"Host[h]"}}`
	_, err := Catalog(CatalogInput{Catalog: catalogWith(file + "," + exported), Exports: []byte(`[{"type":"Host","title":"h"}]`), ProducerTimestamp: now})
	if !errors.Is(err, farm.ErrInvalid) || !strings.Contains(err.Error(), "exported but not collected") {
		t.Errorf("a relationship to an exported resource: %v", err)
	}
}

func TestCatalogIdentifiers(t *testing.T) {
	tests := []struct {
		name                      string
		extra                     string // top-level keys added to the catalog
		tx, job                   string
		wantUUID, wantJob, wantTx any
		wantVersion, wantCode     any
	}{
		{"as served", `"version":"v1","code_id":"c1","catalog_uuid":"u1",`, "", "", "u1", nil, nil, "v1", "c1"},
		{"the run's", `"version":17,"catalog_uuid":"u1",`, "t1", "9", "u1", "9", "t1", "17", nil},
		{"catalog_uuid from the run", `"version":null,`, "t1", "", "t1", nil, "t1", "", nil},
		{"the catalog's job id", `"version":1,"job_id":42,`, "", "9", nil, "42", nil, "1", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			doc := `{"name":"n1.test",` + tt.extra + `"environment":"e","resources":[],"edges":[]}`
			p := catalogPayloadOf(t, CatalogInput{Catalog: []byte(doc), TransactionUUID: tt.tx, JobID: tt.job})
			for k, want := range map[string]any{"catalog_uuid": tt.wantUUID, "job_id": tt.wantJob,
				"transaction_uuid": tt.wantTx, "version": tt.wantVersion, "code_id": tt.wantCode} {
				if got, ok := p[k]; !ok || got != want {
					t.Errorf("%s = %v (present %v), want %v", k, got, ok, want)
				}
			}
		})
	}
}

func TestCatalogInvalid(t *testing.T) {
	tests := []struct {
		name, doc, want string
	}{
		{"not JSON", `{`, "parsing catalog"},
		{"no name", `{"environment":"e","resources":[],"edges":[]}`, "no name"},
		{"no environment", `{"name":"n","resources":[],"edges":[]}`, "no environment"},
		{"bad edge", `{"name":"n","environment":"e","resources":[],"edges":[{"source":"nothing","target":"X[y]"}]}`, "not a resource reference"},
		{"bad parameters", `{"name":"n","environment":"e","resources":[{"type":"A","title":"b","parameters":[1]}],"edges":[]}`, "parameters"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Catalog(CatalogInput{Catalog: []byte(tt.doc), ProducerTimestamp: now})
			if !errors.Is(err, farm.ErrInvalid) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Catalog = %v, want ErrInvalid saying %q", err, tt.want)
			}
		})
	}
	if _, err := Catalog(CatalogInput{Catalog: []byte(exportsCatalog)}); !errors.Is(err, farm.ErrInvalid) {
		t.Errorf("Catalog without a producer timestamp = %v", err)
	}
}

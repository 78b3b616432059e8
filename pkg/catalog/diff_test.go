package catalog

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
)

func TestCompare(t *testing.T) {
	base, err := os.ReadFile("../../testdata/puppet-protocol/catalog-agent1-static-with-code_id.body")
	if err != nil {
		t.Fatal(err)
	}
	edit := func(f func(c map[string]any)) []byte {
		var c map[string]any
		json.Unmarshal(base, &c)
		f(c)
		b, _ := json.Marshal(c)
		return b
	}
	resource := func(c map[string]any, title string) map[string]any {
		for _, r := range c["resources"].([]any) {
			if m := r.(map[string]any); m["title"] == title {
				return m
			}
		}
		t.Fatalf("no resource %s", title)
		return nil
	}
	tests := []struct {
		name string
		to   []byte
		want []string // "change Ref param..." lines
	}{
		{"identical but identity and tags", edit(func(c map[string]any) {
			c["version"], c["code_id"], c["catalog_uuid"] = "x", "y", "z"
			r := resource(c, "/srv/demo/managed")
			r["tags"], r["line"], r["file"] = []any{"other"}, 99, "/elsewhere.pp"
		}), nil},
		{"parameter changed", edit(func(c map[string]any) {
			resource(c, "/srv/demo/managed")["parameters"].(map[string]any)["mode"] = "0700"
		}), []string{"changed File[/srv/demo/managed] mode"}},
		{"integer becomes float", edit(func(c map[string]any) {
			resource(c, "/srv/demo/managed")["parameters"].(map[string]any)["mode"] = json.Number("1.0")
		}), []string{"changed File[/srv/demo/managed] mode"}},
		{"resource removed and added", edit(func(c map[string]any) {
			r := resource(c, "pupdemo-notify")
			r["title"] = "pupdemo-notify-2"
		}), []string{"added Notify[pupdemo-notify-2]", "removed Notify[pupdemo-notify]"}},
		{"static file content changed", edit(func(c map[string]any) {
			md := c["metadata"].(map[string]any)["/srv/demo/managed/static.txt"].(map[string]any)
			md["checksum"].(map[string]any)["value"] = "{sha256}00"
		}), []string{"changed File[/srv/demo/managed/static.txt] source content"}},
		{"recursive file content changed", edit(func(c map[string]any) {
			tree := c["recursive_metadata"].(map[string]any)["/srv/demo/managed/tree"].(map[string]any)
			for _, entries := range tree {
				entries.([]any)[1].(map[string]any)["checksum"].(map[string]any)["value"] = "{sha256}00"
			}
		}), []string{"changed File[/srv/demo/managed/tree] source content"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := Compare(base, tt.to)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, r := range d.Resources {
				line := r.Change + " " + r.Ref
				for p := range r.Params {
					line += " " + p
				}
				got = append(got, line)
			}
			if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("diff:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
		})
	}
	if _, err := Compare(base, []byte("{")); err == nil {
		t.Error("Compare accepted a broken catalog")
	}
}

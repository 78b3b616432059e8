package catalog_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/compilefarm/compilefarm/pkg/catalog"
	"github.com/compilefarm/compilefarm/pkg/farm"
)

func readTestdata(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("../../testdata/puppet-protocol", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func generic(t *testing.T, b []byte) any {
	t.Helper()
	var v any
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	if err := d.Decode(&v); err != nil {
		t.Fatalf("bad JSON: %v\n%s", err, b)
	}
	return v
}

func TestRoundTrip(t *testing.T) {
	tests := []struct {
		file      string
		byteExact bool // Puppet wrote every key in the order this package writes
	}{
		{"catalog-agent1.body", true},
		{"catalog-agent1-static-with-code_id.body", true},
		{"catalog-agent2-ntp-apache.body", false}, // one resource has kind before exported
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			in := readTestdata(t, tt.file)
			c, err := catalog.Parse(in)
			if err != nil {
				t.Fatal(err)
			}
			out, err := c.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(generic(t, in), generic(t, out)) {
				t.Errorf("round trip changed the catalog")
			}
			if tt.byteExact && !bytes.Equal(bytes.TrimSpace(in), out) {
				t.Errorf("round trip changed the bytes\n got %.300s\nwant %.300s", out, in)
			}
		})
	}
}

func TestUnknownFieldsKept(t *testing.T) {
	in := `{"tags":[],"name":"n","version":"abc","code_id":null,"catalog_uuid":"u","catalog_format":2,"environment":"production",` +
		`"resources":[{"type":"Notify","title":"<&>","tags":["notify"],"exported":false,"parameters":{"message":"a<b>&c","z":1,"a":[1.50,{"__ptype":"Sensitive"}]},"virtual":true,"zz":{"k":"v"}}],` +
		`"edges":[{"source":"Class[main]","target":"Notify[<&>]","event":"x"}],"classes":["main"],"future":{"x":[1,2]},"another":7}`
	c, err := catalog.Parse([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	if c.Resources[0].Extra["virtual"] == nil || c.Edges[0].Extra["event"] == nil || c.Extra["future"] == nil {
		t.Errorf("unknown keys not kept: %+v / %+v / %+v", c.Resources[0].Extra, c.Edges[0].Extra, c.Extra)
	}
	out, err := c.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(generic(t, []byte(in)), generic(t, out)) {
		t.Errorf("round trip changed the catalog:\n got %s\nwant %s", out, in)
	}
	// Unknown keys come after the known ones, sorted; no HTML escaping;
	// numbers in parameters keep their spelling.
	for _, want := range []string{`"classes":["main"],"another":7,"future":{"x":[1,2]}}`, `"a<b>&c"`, `1.50`, `"virtual":true,"zz":`} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output lacks %s:\n%s", want, out)
		}
	}
	if msg, ok := c.Resources[0].StringParam("message"); !ok || msg != "a<b>&c" {
		t.Errorf("StringParam = %q, %v", msg, ok)
	}
	if _, ok := c.Resources[0].Param("nothing"); ok {
		t.Errorf("Param of an unset parameter is set")
	}
}

func TestParseErrors(t *testing.T) {
	for _, in := range []string{
		`not json`,
		`[]`,
		`null`,
		`{"name":5}`,
		`{"resources":[{"type":"File","title":"/x","parameters":[1]}]}`,
		`{"resources":[{"type":"File","title":"/x","line":"ten"}]}`,
		`{"edges":[5]}`,
		`{"metadata":[]}`,
	} {
		if _, err := catalog.Parse([]byte(in)); !errors.Is(err, farm.ErrInvalid) {
			t.Errorf("Parse(%s) err = %v, want ErrInvalid", in, err)
		}
	}
}

func TestSummary(t *testing.T) {
	s, err := catalog.Summarize(readTestdata(t, "catalog-agent1-static-with-code_id.body"))
	if err != nil {
		t.Fatal(err)
	}
	want := catalog.Summary{
		Name: "agent1.example.test", Environment: "production", Version: "1795301488",
		CodeID: "demo-code-id-production-0001", CatalogUUID: "928b8b49-44f6-4123-b006-5d4a651a0408",
		Resources: 11, Types: map[string]int{"Stage": 1, "Class": 3, "Node": 1, "File": 5, "Notify": 1},
		Classes: []string{"settings", "agent1.example.test", "pupdemo"}, Edges: 10,
		Static: true, InlinedFiles: 1, InlinedTrees: 1,
	}
	if !reflect.DeepEqual(s, want) {
		t.Errorf("Summary =\n %+v\nwant\n %+v", s, want)
	}

	c, err := catalog.Parse(readTestdata(t, "catalog-agent2-ntp-apache.body"))
	if err != nil {
		t.Fatal(err)
	}
	s = c.Summary()
	if s.Resources != 222 || s.Static || s.CodeID != "" || s.Types["File"] == 0 {
		t.Errorf("ntp/apache summary = %+v", s)
	}
	if r := c.Resource("Class", "Ntp"); r == nil || r.Ref() != "Class[Ntp]" {
		t.Errorf("Resource(Class, Ntp) = %v", r)
	}
	if c.Resource("Class", "Nope") != nil {
		t.Errorf("Resource found a missing resource")
	}
}

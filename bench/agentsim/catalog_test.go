package main

import (
	"bytes"
	"compress/gzip"
	"os"
	"strings"
	"testing"
)

// recordedCatalog reads a catalog the real Puppet Server served agent1.
func recordedCatalog(t *testing.T, file string) *servedCatalog {
	t.Helper()
	b, err := os.ReadFile("../../testdata/puppet-protocol/" + file)
	if err != nil {
		t.Fatal(err)
	}
	c, n, err := decodeCatalog(b, false, "agent1.example.test", "production")
	if err != nil || n != len(b) {
		t.Fatalf("decodeCatalog = %d bytes, %v", n, err)
	}
	return c
}

func TestDecodeCatalogChecks(t *testing.T) {
	b, err := os.ReadFile("../../testdata/puppet-protocol/catalog-agent1.body")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		node, env, want string
	}{
		{"agent2.example.test", "production", "names"},
		{"agent1.example.test", "staging", "environment"},
	} {
		if _, _, err := decodeCatalog(b, false, tc.node, tc.env); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("decodeCatalog(%s, %s) = %v, want an error about %s", tc.node, tc.env, err, tc.want)
		}
	}
	if _, _, err := decodeCatalog(b, true, "agent1.example.test", "production"); err == nil {
		t.Errorf("a plain catalog decoded as gzip")
	}
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(b)
	zw.Close()
	c, n, err := decodeCatalog(gz.Bytes(), true, "agent1.example.test", "production")
	if err != nil || n != len(b) || len(c.Resources) != 11 {
		t.Errorf("gzip catalog: %d bytes, %v", n, err)
	}
}

// The file requests are the recorded agent's: file_metadata for a file,
// file_metadatas for a recursive directory; none for what a static catalog
// inlines unless asked.
func TestSourcedFiles(t *testing.T) {
	const q = "links=manage&checksum_type=sha256&source_permissions=ignore&environment=production"
	plain := recordedCatalog(t, "catalog-agent1.body")
	static := recordedCatalog(t, "catalog-agent1-static-with-code_id.body")
	recorded := []string{
		"/file_metadata/modules/pupdemo/static.txt?" + q,
		"/file_metadatas/modules/pupdemo/tree?recurse=true&max_files=0&" + q,
	}
	for _, tc := range []struct {
		what       string
		cat        *servedCatalog
		askInlined bool
		limit      int
		want       []string
	}{
		{"catalog without code_id: as recorded", plain, false, 20, recorded},
		{"static catalog: inlined, nothing to ask", static, false, 20, nil},
		{"static catalog, --file-metadata always", static, true, 20, recorded},
		{"bounded", plain, false, 1, recorded[:1]},
		{"none", plain, false, 0, nil},
	} {
		var got []string
		for _, f := range tc.cat.sourcedFiles("production", tc.askInlined, tc.limit) {
			got = append(got, f.path)
		}
		if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
			t.Errorf("%s: sourcedFiles =\n%s\nwant\n%s", tc.what, strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
		}
	}
}

func TestFirstPuppetSource(t *testing.T) {
	for _, tc := range []struct{ raw, want string }{
		{`"puppet:///modules/m/f.txt"`, "modules/m/f.txt"},
		{`"puppet://puppet.example.com/modules/m/f.txt"`, "modules/m/f.txt"},
		{`["file:///etc/x", "puppet:///modules/m/a b.txt"]`, "modules/m/a%20b.txt"},
		{`"/etc/hosts"`, ""},
		{`42`, ""},
	} {
		if got := firstPuppetSource([]byte(tc.raw)); got != tc.want {
			t.Errorf("firstPuppetSource(%s) = %q, want %q", tc.raw, got, tc.want)
		}
	}
}

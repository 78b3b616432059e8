package compiler

import (
	"encoding/json"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/compilefarm/compilefarm/pkg/farm"
)

func TestMovePointer(t *testing.T) {
	at := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	stored := func(tag string) farm.CatalogRef {
		return farm.CatalogRef{Digest: farm.DigestOf([]byte(tag)), GzipDigest: farm.DigestOf([]byte(tag + ".gz"))}
	}
	cat := func(seq uint64, content string) *farm.CatalogRef {
		r := stored(content)
		r.Seq, r.ContentDigest, r.CodeID = seq, farm.DigestOf([]byte(content)), "code-"+content
		return &r
	}
	job := func(slot farm.Slot, seq uint64, content string, store bool) compiled {
		c := compiled{Slot: slot, Seq: seq, CodeID: "code-new", Content: farm.DigestOf([]byte(content)), At: at,
			FactsDigest: farm.DigestOf([]byte("facts")), ExportsDigest: farm.DigestOf([]byte("exports " + content)),
			ExportTypes: []string{"Sshkey"}, Collects: []string{"Host"}, Queries: []farm.Digest{farm.DigestOf([]byte(`"nodes {}"`))}}
		if store {
			c.Stored = stored(content)
		}
		return c
	}
	tests := []struct {
		name      string
		node      farm.Node
		c         compiled
		wantErr   error
		check     func(t *testing.T, n *farm.Node, out moved)
		unchanged bool
	}{
		{name: "first catalog", node: farm.Node{}, c: job("", 1, "a", true), check: func(t *testing.T, n *farm.Node, out moved) {
			if n.Catalog == nil || n.Catalog.Seq != 1 || n.Catalog.CodeID != "code-new" || n.Catalog.UUID == "" || n.Compile.Result != farm.ResultOK {
				t.Fatalf("catalog %+v, compile %+v", n.Catalog, n.Compile)
			}
			if !slices.Equal(out.ExportsChanged, []string{"Sshkey"}) || !slices.Equal(n.Collects, []string{"Host"}) {
				t.Fatalf("exports changed %v, collects %v", out.ExportsChanged, n.Collects)
			}
			if !slices.Equal(n.Queries, []farm.Digest{farm.DigestOf([]byte(`"nodes {}"`))}) {
				t.Fatalf("queries %v", n.Queries)
			}
		}},
		{name: "same content still takes the compile's queries", node: farm.Node{Catalog: cat(3, "a")}, c: job("", 4, "a", false),
			unchanged: true, check: func(t *testing.T, n *farm.Node, out moved) {
				if len(n.Queries) != 1 {
					t.Fatalf("queries %v", n.Queries)
				}
			}},
		{name: "newer replaces older and keeps it in history", node: farm.Node{Catalog: cat(3, "a")}, c: job("", 5, "b", true),
			check: func(t *testing.T, n *farm.Node, out moved) {
				if n.Catalog.Seq != 5 || len(n.History) != 1 || n.History[0].Seq != 3 {
					t.Fatalf("catalog %+v, history %+v", n.Catalog, n.History)
				}
			}},
		{name: "older never replaces newer", node: farm.Node{Catalog: cat(7, "a")}, c: job("", 5, "b", true), wantErr: farm.ErrConflict},
		{name: "same seq is not newer", node: farm.Node{Catalog: cat(5, "a")}, c: job("", 5, "b", true), wantErr: farm.ErrConflict},
		{name: "same content: unchanged, keeps bytes and code_id", node: farm.Node{Catalog: cat(3, "a")}, c: job("", 4, "a", false),
			unchanged: true, check: func(t *testing.T, n *farm.Node, out moved) {
				if n.Catalog.Seq != 4 || n.Catalog.CodeID != "code-a" || n.Catalog.Digest != stored("a").Digest || n.Compile.Result != farm.ResultUnchanged {
					t.Fatalf("catalog %+v, compile %+v", n.Catalog, n.Compile)
				}
			}},
		{name: "new content without stored bytes", node: farm.Node{Catalog: cat(3, "a")}, c: job("", 4, "b", false), wantErr: errNeedStore},
		{name: "candidate slot leaves served catalog and exports alone", node: farm.Node{Catalog: cat(3, "a"), ExportTypes: []string{"Host"}},
			c: job(farm.SlotCandidate, 4, "b", true), check: func(t *testing.T, n *farm.Node, out moved) {
				if n.Candidate == nil || n.Candidate.Seq != 4 || n.Catalog.Seq != 3 || n.CandidateCompile == nil || n.Compile != nil {
					t.Fatalf("candidate %+v, catalog %+v", n.Candidate, n.Catalog)
				}
				if out.ExportsChanged != nil || !slices.Equal(n.ExportTypes, []string{"Host"}) || n.Queries != nil {
					t.Fatalf("candidate published exports or queries: %v, %v, %v", out.ExportsChanged, n.ExportTypes, n.Queries)
				}
			}},
		{name: "older candidate never replaces newer", node: farm.Node{Candidate: cat(9, "a")}, c: job(farm.SlotCandidate, 4, "b", true), wantErr: farm.ErrConflict},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := tt.node
			n.Certname = "web01.example.com"
			before := nodeString(t, n)
			out, err := movePointer(&n, tt.c)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("got %v, want %v", err, tt.wantErr)
				}
				if after := nodeString(t, n); after != before {
					t.Fatalf("a refused move changed the node:\n before %s\n after  %s", before, after)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if out.Unchanged != tt.unchanged {
				t.Fatalf("unchanged = %v, want %v", out.Unchanged, tt.unchanged)
			}
			tt.check(t, &n, out)
		})
	}
}

func nodeString(t *testing.T, n farm.Node) string {
	t.Helper()
	b, err := json.Marshal(n)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

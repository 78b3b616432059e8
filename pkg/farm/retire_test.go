package farm_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/compilefarm/compilefarm/pkg/farm"
	"github.com/compilefarm/compilefarm/pkg/memstore"
)

func dg(s string) farm.Digest { return farm.DigestOf([]byte(s)) }

func TestCatalogBlobs(t *testing.T) {
	n := farm.Node{
		Catalog:   &farm.CatalogRef{Digest: dg("c"), GzipDigest: dg("cz"), ReadsDigest: dg("reads")},
		Candidate: &farm.CatalogRef{Digest: dg("n"), GzipDigest: dg("nz")},
		History: []farm.CatalogRef{
			{Digest: dg("h1"), GzipDigest: dg("h1z")},
			{Digest: dg("c"), GzipDigest: dg("cz")}, // back to an older catalog
			{Digest: dg("h2")},                      // no gzip form
		},
		ExportsDigest: dg("exports"),
	}
	want := []farm.Digest{dg("c"), dg("cz"), dg("n"), dg("nz"), dg("h1"), dg("h1z"), dg("h2")}
	slices.Sort(want)
	if got := n.CatalogBlobs(); !slices.Equal(got, want) {
		t.Errorf("CatalogBlobs = %v, want %v (no read record, no exports, each once)", got, want)
	}
	if got := (&farm.Node{}).CatalogBlobs(); len(got) != 0 {
		t.Errorf("CatalogBlobs of a node without catalogs = %v", got)
	}
}

func TestDropped(t *testing.T) {
	ref := func(s string) farm.CatalogRef {
		return farm.CatalogRef{Digest: dg(s), GzipDigest: dg(s + "z"), ContentDigest: dg("content " + s)}
	}
	full := farm.Node{}
	for i := range farm.HistoryLen + 1 {
		full.SetCatalog(farm.CatalogRef{Digest: dg(fmt.Sprint(i)), GzipDigest: dg(fmt.Sprint(i, "z")), ContentDigest: dg(fmt.Sprint("content", i))})
	}
	for _, c := range []struct {
		name   string
		before farm.Node
		change func(n *farm.Node)
		want   []farm.Digest
	}{
		{"new catalog, history not full", farm.Node{Catalog: ptr(ref("a"))},
			func(n *farm.Node) { n.SetCatalog(ref("b")) }, nil},
		{"the oldest falls out of a full history", full,
			func(n *farm.Node) {
				n.SetCatalog(farm.CatalogRef{Digest: dg("new"), GzipDigest: dg("newz"), ContentDigest: dg("new content")})
			}, []farm.Digest{dg("0"), dg("0z")}},
		{"the oldest comes back as the catalog", full,
			func(n *farm.Node) {
				n.SetCatalog(farm.CatalogRef{Digest: dg("0"), GzipDigest: dg("0z"), ContentDigest: dg("content0")})
			}, nil},
		{"candidate dropped", farm.Node{Catalog: ptr(ref("a")), Candidate: ptr(ref("b"))},
			func(n *farm.Node) { n.DropCandidate() }, []farm.Digest{dg("b"), dg("bz")}},
		{"candidate promoted", farm.Node{Catalog: ptr(ref("a")), Candidate: ptr(ref("b"))},
			func(n *farm.Node) { n.SetCatalog(*n.Candidate); n.DropCandidate() }, nil},
		{"same content from other code replaces the catalog", farm.Node{Catalog: ptr(ref("a"))},
			func(n *farm.Node) {
				n.SetCatalog(farm.CatalogRef{Digest: dg("b"), GzipDigest: dg("bz"), ContentDigest: n.Catalog.ContentDigest})
			}, []farm.Digest{dg("a"), dg("az")}},
		{"candidate that is also in history dropped", farm.Node{Catalog: ptr(ref("a")), Candidate: ptr(ref("b")), History: []farm.CatalogRef{ref("b")}},
			func(n *farm.Node) { n.DropCandidate() }, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			n := c.before.Clone()
			before := n.CatalogBlobs()
			c.change(&n)
			got := farm.Dropped(before, &n)
			want := slices.Clone(c.want)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("Dropped = %v, want %v", got, want)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

// nodeGetter answers GetNode with node or err, and runs before first (a
// write racing with the retire).
type nodeGetter struct {
	node   farm.Node
	err    error
	before func()
}

func (g *nodeGetter) GetNode(ctx context.Context, certname string) (farm.Node, error) {
	if g.before != nil {
		g.before()
	}
	return g.node, g.err
}

// TestRetireCatalogs: dropped catalogs are retired unless the record read
// after the retire refers to them again; a record that cannot be read
// keeps them all.
func TestRetireCatalogs(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name      string
		getter    func(a, b farm.Digest) *nodeGetter
		retired   [2]bool // of a and b
		wantError bool
	}{
		{"retired", func(a, b farm.Digest) *nodeGetter {
			return &nodeGetter{node: farm.Node{Catalog: &farm.CatalogRef{Digest: dg("current")}}}
		}, [2]bool{true, true}, false},
		{"one referred to again meanwhile is kept", func(a, b farm.Digest) *nodeGetter {
			return &nodeGetter{node: farm.Node{Catalog: &farm.CatalogRef{Digest: a}}}
		}, [2]bool{false, true}, false},
		{"node gone", func(a, b farm.Digest) *nodeGetter {
			return &nodeGetter{err: fmt.Errorf("get node: %w", farm.ErrNotFound)}
		}, [2]bool{true, true}, false},
		{"node unreadable: all kept", func(a, b farm.Digest) *nodeGetter {
			return &nodeGetter{err: fmt.Errorf("get node: %w", farm.ErrTransient)}
		}, [2]bool{false, false}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := memstore.New()
			a, _ := s.Put(ctx, farm.SpaceCatalogs, []byte("a"))
			b, _ := s.Put(ctx, farm.SpaceCatalogs, []byte("b"))
			gone := dg("never stored")
			err := farm.RetireCatalogs(ctx, c.getter(a, b), s, "web01", []farm.Digest{a, b, gone})
			if (err != nil) != c.wantError {
				t.Fatalf("RetireCatalogs: %v, want error %v", err, c.wantError)
			}
			for i, d := range []farm.Digest{a, b} {
				got, err := s.Retired(ctx, farm.SpaceCatalogs, d)
				if err != nil {
					t.Fatal(err)
				}
				if got != c.retired[i] {
					t.Errorf("blob %d retired = %v, want %v", i, got, c.retired[i])
				}
			}
		})
	}
}

// failingRetirer fails Retire, having retired (a timeout after the store
// applied it).
type failingRetirer struct{ *memstore.Store }

func (f failingRetirer) Retire(ctx context.Context, space farm.Space, d farm.Digest) error {
	_ = f.Store.Retire(ctx, space, d)
	return fmt.Errorf("retire: %w", farm.ErrTransient)
}

// TestRetireCatalogsChecksFailedRetires: a Retire that failed may have
// taken effect, so its blob is checked (and kept when referred to) too.
func TestRetireCatalogsChecksFailedRetires(t *testing.T) {
	ctx := context.Background()
	s := memstore.New()
	a, _ := s.Put(ctx, farm.SpaceCatalogs, []byte("a"))
	err := farm.RetireCatalogs(ctx, &nodeGetter{node: farm.Node{Catalog: &farm.CatalogRef{Digest: a}}}, failingRetirer{s}, "web01", []farm.Digest{a})
	if !errors.Is(err, farm.ErrTransient) {
		t.Fatalf("RetireCatalogs: %v, want the retire's error", err)
	}
	if got, _ := s.Retired(ctx, farm.SpaceCatalogs, a); got {
		t.Error("a blob the node refers to stays retired after a failed Retire")
	}
}

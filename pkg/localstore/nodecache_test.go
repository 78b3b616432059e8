package localstore

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"

	"github.com/compilefarm/compilefarm/pkg/farm"
)

func TestNodeCache(t *testing.T) {
	record := func(seq uint64) []byte {
		v, err := json.Marshal(farm.Node{
			Certname: "a.example.com", RequestSeq: seq,
			Requested: &farm.CompileRequest{Seq: seq, Changes: []farm.FactChange{{Path: []string{"os", "release"}, Old: json.RawMessage(`"1"`)}}},
			Catalog:   &farm.CatalogRef{Seq: seq}, History: []farm.CatalogRef{{Seq: 1}},
		})
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	tests := []struct {
		name  string
		reads []uint64 // the record's RequestSeq at each read
	}{
		{"same record twice", []uint64{1, 1}},
		{"rewritten record", []uint64{1, 2}},
		{"rewritten back", []uint64{1, 2, 1, 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newNodeCache(10)
			for i, seq := range tt.reads {
				n, err := c.decode("a.example.com", record(seq))
				if err != nil {
					t.Fatal(err)
				}
				if n.RequestSeq != seq || n.Requested.Seq != seq || n.Catalog.Seq != seq ||
					!reflect.DeepEqual(n.Requested.Changes[0].Path, []string{"os", "release"}) || n.History[0].Seq != 1 {
					t.Fatalf("read %d: got %+v, want seq %d", i, n, seq)
				}
				// What a caller does to its node must not reach the next read.
				n.Requested.Seq, n.Catalog.Seq, n.History[0].Seq = 99, 99, 99
				n.Requested.Changes[0].Path[0] = "mutated"
			}
		})
	}
}

func TestNodeCachePutSkipsTheDecode(t *testing.T) {
	c := newNodeCache(10)
	v := []byte(`{"certname":"a.example.com","request_seq":3}`)
	// put says v encodes this node; a read of v must return it (the test
	// gives a deliberately different node to see where the answer came from).
	c.put("a.example.com", v, farm.Node{Certname: "a.example.com", RequestSeq: 4})
	n, err := c.decode("a.example.com", v)
	if err != nil || n.RequestSeq != 4 {
		t.Fatalf("read after put: %+v, %v; want the node put (seq 4)", n, err)
	}
	n, err = c.decode("a.example.com", []byte(`{"certname":"a.example.com","request_seq":5}`))
	if err != nil || n.RequestSeq != 5 {
		t.Fatalf("read of other bytes: %+v, %v; want them decoded (seq 5)", n, err)
	}
}

func TestNodeCacheBounded(t *testing.T) {
	c := newNodeCache(3)
	for i := range 10 {
		name := fmt.Sprintf("n%d.example.com", i)
		if _, err := c.decode(name, []byte(`{"certname":"`+name+`"}`)); err != nil {
			t.Fatal(err)
		}
		if len(c.m) > 3 {
			t.Fatalf("after %d nodes the cache holds %d, bound 3", i+1, len(c.m))
		}
	}
	if _, err := c.decode("bad.example.com", []byte(`{"certname":`)); err == nil {
		t.Fatal("an unreadable record decoded without error")
	}
	if _, ok := c.m["bad.example.com"]; ok {
		t.Fatal("an unreadable record was cached")
	}
}

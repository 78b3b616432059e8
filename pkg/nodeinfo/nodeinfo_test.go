package nodeinfo

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/compilefarm/compilefarm/pkg/farm"
)

func TestEncodeDecode(t *testing.T) {
	in := Info{TrustedExtensions: map[string]string{"pp_role": "web"},
		Classes:    map[string]any{"ntp": map[string]any{"servers": []any{"a"}}, "motd": nil},
		Parameters: map[string]any{"i": json.Number("1"), "f": json.Number("1.0"), "s": "x"}}
	b, d, err := in.Encode()
	if err != nil {
		t.Fatal(err)
	}
	back, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	b2, d2, err := back.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if d != d2 || string(b) != string(b2) {
		t.Errorf("Encode(Decode(x)) differs:\n%s\n%s", b, b2)
	}
	if !strings.Contains(string(b), `"f":1.0`) {
		t.Errorf("a Float parameter lost its kind: %s", b)
	}
	if b, d, err := (Info{}).Encode(); err != nil || b != nil || d != "" {
		t.Errorf("empty node information encodes as %q, %q, %v; want no document and the empty digest", b, d, err)
	}
	if _, err := Decode([]byte("not json")); !errors.Is(err, farm.ErrInvalid) {
		t.Errorf("Decode of a bad document: %v, want farm.ErrInvalid", err)
	}
}

func TestUsed(t *testing.T) {
	req := &farm.CompileRequest{Seq: 2, NodeInfo: "requested"}
	tests := []struct {
		name string
		cat  *farm.CatalogRef
		want farm.Digest
	}{
		{"no catalog yet", nil, "requested"},
		{"catalog of an older request", &farm.CatalogRef{Seq: 1, NodeInfo: "old"}, "requested"},
		{"catalog answering the request", &farm.CatalogRef{Seq: 2, NodeInfo: "at-compile"}, "at-compile"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Used(tt.cat, req); got != tt.want {
				t.Errorf("Used = %q, want %q", got, tt.want)
			}
		})
	}
}

package canonjson_test

import (
	"testing"

	"github.com/compilefarm/compilefarm/internal/canonjson"
)

func TestOf(t *testing.T) {
	tests := []struct{ in, want string }{
		{`{"b": 1, "a": [2, {"d": null, "c": "x"}]}`, `{"a":[2,{"c":"x","d":null}],"b":1}`},
		{` "text" `, `"text"`},
		{`1.0`, `1.0`}, // numbers as written
		{`1e3`, `1e3`},
		{`"<&>"`, `"\u003c\u0026\u003e"`}, // encoding/json's escaping, the same on both sides
		{`{"a":`, `{"a":`},                // not a value: as given
		{`1 2`, `1`},                      // the first value (callers hold one)
	}
	for _, tt := range tests {
		if got := string(canonjson.Of([]byte(tt.in))); got != tt.want {
			t.Errorf("Of(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
	for _, empty := range [][]byte{nil, {}} {
		if got := canonjson.Of(empty); got != nil {
			t.Errorf("Of(%q) = %q, want nil", empty, got)
		}
	}
}

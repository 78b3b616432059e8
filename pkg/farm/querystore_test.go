package farm_test

import (
	"testing"

	"github.com/compilefarm/compilefarm/pkg/farm"
)

func TestQueryText(t *testing.T) {
	tests := []struct{ query, want string }{
		{`"nodes { certname = \"a\" }"`, `nodes { certname = "a" }`},
		{`["from","nodes",["=","certname","a"]]`, `["from","nodes",["=","certname","a"]]`},
		{`not json`, `not json`},
	}
	for _, tt := range tests {
		if got := farm.QueryText([]byte(tt.query)); got != tt.want {
			t.Errorf("QueryText(%s) = %s, want %s", tt.query, got, tt.want)
		}
	}
}

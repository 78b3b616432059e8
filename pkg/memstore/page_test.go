package memstore

import (
	"slices"
	"testing"
)

func TestSortedPage(t *testing.T) {
	tests := []struct {
		keys     []string
		size     int
		want     []string
		wantNext string
	}{
		{nil, 3, nil, ""},
		{[]string{"b", "a"}, 3, []string{"a", "b"}, ""},
		{[]string{"c", "a", "b"}, 3, []string{"a", "b", "c"}, ""},
		{[]string{"d", "c", "a", "b"}, 3, []string{"a", "b", "c"}, "c"},
		{[]string{"b", "a"}, 1, []string{"a"}, "a"},
	}
	for _, tt := range tests {
		got, next := sortedPage(slices.Clone(tt.keys), tt.size)
		if !slices.Equal(got, tt.want) || next != tt.wantNext {
			t.Errorf("sortedPage(%q, %d) = %q, %q; want %q, %q", tt.keys, tt.size, got, next, tt.want, tt.wantNext)
		}
	}
}

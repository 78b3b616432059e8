package textwrap

import "testing"

func TestWrap(t *testing.T) {
	for _, tt := range []struct {
		text  string
		width int
		want  string
	}{
		{"", 10, ""},
		{"one two three", 100, "one two three"},
		{"one two three", 7, "one two\nthree"},
		{"one  two\nthree", 8, "one two\nthree"},
		{"a longerthanwidth b", 5, "a\nlongerthanwidth\nb"},
		{"exactly ten", 11, "exactly ten"},
	} {
		if got := Wrap(tt.text, tt.width); got != tt.want {
			t.Errorf("Wrap(%q, %d) = %q, want %q", tt.text, tt.width, got, tt.want)
		}
	}
}

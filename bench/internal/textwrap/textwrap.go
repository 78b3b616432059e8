// Package textwrap breaks the prose of the measurement reports
// (docs/benchmarks.md's sections) into lines of a given width.
package textwrap

import "strings"

// Wrap breaks text into lines of at most width bytes, at spaces (a word
// longer than width stays whole on its line); runs of spaces and newlines
// become one space or a line break.
func Wrap(text string, width int) string {
	var b strings.Builder
	n := 0
	for _, w := range strings.Fields(text) {
		if n > 0 && n+1+len(w) > width {
			b.WriteByte('\n')
			n = 0
		} else if n > 0 {
			b.WriteByte(' ')
			n++
		}
		b.WriteString(w)
		n += len(w)
	}
	return b.String()
}

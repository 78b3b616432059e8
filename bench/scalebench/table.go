package main

import (
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
)

// table is a table of text cells, written as Markdown or as aligned text.
type table struct {
	header []string
	// right marks the columns to align right (numbers); the others align
	// left.
	right []bool
	rows  [][]string
}

// newTable makes a table; a header ending in ">" is a right-aligned
// column (the ">" is not shown).
func newTable(header ...string) *table {
	t := &table{}
	for _, h := range header {
		name, right := strings.CutSuffix(h, ">")
		t.header = append(t.header, name)
		t.right = append(t.right, right)
	}
	return t
}

// add appends a row, padded with empty cells or cut to the header's width.
func (t *table) add(cells ...string) {
	row := make([]string, len(t.header))
	copy(row, cells)
	t.rows = append(t.rows, row)
}

// markdown writes the table in GitHub's Markdown, with "|" in cells
// escaped.
func (t *table) markdown(w io.Writer) error {
	esc := func(s string) string { return strings.ReplaceAll(s, "|", `\|`) }
	var b strings.Builder
	line := func(cells []string) {
		b.WriteString("|")
		for _, c := range cells {
			b.WriteString(" " + esc(c) + " |")
		}
		b.WriteString("\n")
	}
	line(t.header)
	b.WriteString("|")
	for _, r := range t.right {
		if r {
			b.WriteString("--:|")
		} else {
			b.WriteString(":--|")
		}
	}
	b.WriteString("\n")
	for _, r := range t.rows {
		line(r)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// text writes the table with its columns padded to line up, two spaces
// apart.
func (t *table) text(w io.Writer) error {
	width := make([]int, len(t.header))
	for _, r := range append([][]string{t.header}, t.rows...) {
		for i, c := range r {
			width[i] = max(width[i], utf8.RuneCountInString(c))
		}
	}
	var b strings.Builder
	for _, r := range append([][]string{t.header}, t.rows...) {
		var cells []string
		for i, c := range r {
			pad := strings.Repeat(" ", width[i]-utf8.RuneCountInString(c))
			if t.right[i] {
				cells = append(cells, pad+c)
			} else {
				cells = append(cells, c+pad)
			}
		}
		fmt.Fprintln(&b, strings.TrimRight(strings.Join(cells, "  "), " "))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/compilefarm/compilefarm/pkg/admin"
	"github.com/compilefarm/compilefarm/pkg/farm"
	"github.com/compilefarm/compilefarm/pkg/intake"
)

func runExplain(ctx context.Context, args []string) error {
	return explainCmd(ctx, os.Stdout, args)
}

// explainCmd is `broker explain NODE [--json]`, printing to out.
func explainCmd(ctx context.Context, out io.Writer, args []string) error {
	fs, op := operatorFlagSet("explain", "usage: broker explain NODE [--json] [--admin URL]\n"+
		"why the farm last compiled NODE (which fact changed, from what to what) and what its catalog reads of its facts", false)
	asJSON := fs.Bool("json", false, "print the explanation as JSON")
	node, err := nodeArg(fs, args)
	if err != nil {
		return err
	}
	return op.with(ctx, func(c *admin.Client) error {
		ex, err := c.Explain(ctx, node)
		if err != nil {
			return err
		}
		if *asJSON {
			return printJSON(out, ex)
		}
		printExplanation(out, ex, time.Now())
		return nil
	})
}

// printExplanation prints ex for an operator, times relative to now.
func printExplanation(w io.Writer, ex intake.Explanation, now time.Time) {
	line := func(label, format string, a ...any) {
		fmt.Fprintf(w, "%-12s %s\n", label, fmt.Sprintf(format, a...))
	}
	line("node", "%s", ex.Node)
	line("environment", "%s", orDash(ex.Environment))
	line("code_id", "%s", orDash(short(ex.CodeID)))
	if r := ex.Request; r == nil {
		line("request", "none queued")
	} else {
		state := ex.State
		if ex.Error != "" {
			msg, _, _ := strings.Cut(ex.Error, "\n")
			state += ": " + msg
		}
		line("request", "seq %d, %s, %s lane, at %s (%s ago): %s",
			r.Seq, r.Reason, r.Lane, r.At.UTC().Format(time.RFC3339), now.Sub(r.At).Round(time.Second), state)
		for _, c := range r.Changes {
			fmt.Fprintf(w, "  %s\n", changeLine(c))
		}
		if c := r.Cause; c != nil {
			if c.Input != "" {
				fmt.Fprintf(w, "  %s: %s -> %s\n", c.Input, causeValue(c.Input, c.Old), causeValue(c.Input, c.New))
			}
			if c.Note != "" {
				fmt.Fprintf(w, "  (%s)\n", c.Note)
			}
		}
	}
	switch s := ex.Reads; {
	case ex.CodeID == "":
		line("reads", "no catalog yet")
	case s == nil:
		line("reads", "none recorded: any change outside the volatile facts recompiles the catalog")
	default:
		line("reads", "%d reads of %d top-level facts (record %s)", s.Reads, len(s.Facts), short(string(s.Digest)))
		if s.Clock {
			fmt.Fprintf(w, "  reads the clock, so it is compiled again once older than --clock-max-age: %s\n", orDash(s.ClockWhy))
		}
		if s.AlwaysRecompile {
			fmt.Fprintf(w, "  always recompiles, at every fact upload: %s\n", orDash(s.Why))
		}
		var parts []string
		for _, f := range s.Facts {
			name := f.Fact
			if name == "" {
				name = "all facts"
			}
			parts = append(parts, fmt.Sprintf("%s (%d)", name, f.Reads))
		}
		for _, l := range wrap(parts, 76) {
			fmt.Fprintf(w, "  %s\n", l)
		}
		if len(s.Queries) > 0 {
			line("queries", "%d PuppetDB queries, run again every --puppetdb-query-refresh; a changed answer recompiles", len(s.Queries))
			for _, q := range s.Queries {
				fmt.Fprintf(w, "  %s\n", q)
			}
		}
	}
}

// changeLine shows a fact change as `facts.os.release.full: "12.10" ->
// "12.11"`, with its kind when it is not the value.
func changeLine(c farm.FactChange) string {
	name := factPath(c.Path)
	if c.Kind != "" && c.Kind != "value" {
		name += " (" + c.Kind + ")"
	}
	return fmt.Sprintf("%s: %s -> %s", name, observation(c.Old, c.OldMissing), observation(c.New, c.NewMissing))
}

func factPath(path []string) string {
	return strings.Join(append([]string{"facts"}, path...), ".")
}

func observation(v json.RawMessage, missing bool) string {
	if missing || len(v) == 0 {
		return "(absent)"
	}
	return string(v)
}

// causeValue shortens the digests a cause names.
func causeValue(input, v string) string {
	switch {
	case v == "":
		return "(none)"
	case input == farm.CauseEnvironment:
		return v
	}
	return short(v)
}

// wrap joins parts with ", " into lines of about width characters.
func wrap(parts []string, width int) []string {
	var lines []string
	cur := ""
	for i, p := range parts {
		if i < len(parts)-1 {
			p += ","
		}
		if cur != "" && len(cur)+1+len(p) > width {
			lines = append(lines, cur)
			cur = ""
		}
		if cur != "" {
			cur += " "
		}
		cur += p
	}
	if cur != "" {
		lines = append(lines, cur)
	}
	return lines
}

// reasonLabel is a request's reason with the facts whose change queued it,
// e.g. "facts-changed (os.release.full)", cut to max characters.
func reasonLabel(r *farm.CompileRequest, max int) string {
	if r == nil {
		return "-"
	}
	s := r.Reason
	if len(r.Changes) > 0 {
		paths := make([]string, len(r.Changes))
		for i, c := range r.Changes {
			paths[i] = strings.TrimPrefix(factPath(c.Path), "facts.")
		}
		s += " (" + strings.Join(paths, ", ") + ")"
	}
	if r := []rune(s); len(r) > max {
		s = string(r[:max-3]) + "..."
	}
	return s
}

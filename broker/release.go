package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/compilefarm/compilefarm/pkg/admin"
	"github.com/compilefarm/compilefarm/pkg/catalog"
	"github.com/compilefarm/compilefarm/pkg/farm"
	"github.com/compilefarm/compilefarm/pkg/pcp/jobs"
	"github.com/compilefarm/compilefarm/pkg/release"
)

func runRelease(ctx context.Context, args []string) error {
	fs, op := operatorFlagSet("release", `usage: broker release ENV --hold | --no-hold | --percent P | --nodes a,b | --all
       broker release status ENV
--hold keeps later code deploys from reaching nodes until released (their
catalogs are precompiled); --percent and --nodes release the environment's
code to a share of the nodes or to named ones; --all releases it to every
node and makes it the stable code. --run then runs Puppet on the released
nodes through the farm's PCP broker (as broker job run), follows the runs
and prints the release status: a canary release in one command.`, false)
	hold := fs.Bool("hold", false, "hold new code back until released")
	noHold := fs.Bool("no-hold", false, "stop holding: every node gets the environment's code")
	percent := fs.Int("percent", -1, "release to this percentage of the environment's nodes (0-100)")
	nodes := fs.String("nodes", "", "release to these nodes (comma separated)")
	all := fs.Bool("all", false, "release to every node")
	run := fs.Bool("run", false, "then run Puppet on the released nodes through the PCP broker (--nodes: those nodes; --percent: "+
		"every node the release has reached; --all, --no-hold: every node of ENV) and follow the runs")
	runConcurrency := fs.Int("run-concurrency", jobs.DefaultConcurrency, "with --run: nodes running Puppet at once")
	runTimeout := fs.Duration("run-timeout", jobs.DefaultTimeout, "with --run: how long one node's run may take")
	pos, c, done, err := op.connect(ctx, fs, args)
	if err != nil {
		return err
	}
	defer done()
	if len(pos) == 2 && pos[0] == "status" {
		st, err := c.ReleaseStatus(ctx, pos[1])
		if err != nil {
			return err
		}
		printReleaseStatus(os.Stdout, st)
		return nil
	}
	if len(pos) != 1 {
		fs.Usage()
		return fmt.Errorf("release: expected ENV and one of --hold, --no-hold, --percent, --nodes, --all, or status ENV")
	}
	var ch release.ReleaseChange
	set := 0
	if *hold {
		ch.Hold, set = hold, set+1
	}
	if *noHold {
		f := false
		ch.Hold, set = &f, set+1
	}
	if *percent >= 0 {
		ch.Percent, set = percent, set+1
	}
	if *nodes != "" {
		ch.Nodes, set = splitList(*nodes), set+1
	}
	if *all {
		ch.All, set = true, set+1
	}
	if set != 1 {
		fs.Usage()
		return fmt.Errorf("release: give exactly one of --hold, --no-hold, --percent, --nodes, --all")
	}
	if *run {
		if ch.Hold != nil && *ch.Hold {
			return fmt.Errorf("release --hold --run: --hold releases no node; --run goes with --percent, --nodes, --all or --no-hold")
		}
		if op.backend != "" {
			return errJobsInProcess
		}
		if _, err := jobRequest("", pos[0], false, *runConcurrency, *runTimeout); err != nil {
			return err
		}
	}
	res, err := c.Release(ctx, pos[0], ch)
	if err != nil {
		return err
	}
	printReleaseResult(os.Stdout, res)
	if !*run {
		return nil
	}
	return runReleased(ctx, c, ch, res, *runConcurrency, *runTimeout, os.Stdout)
}

// runReleased runs Puppet on the nodes a release reached, follows the
// runs, and prints the release status once they ended; an error when a
// node's run failed or it was unreachable.
func runReleased(ctx context.Context, c *admin.Client, ch release.ReleaseChange, res release.ReleaseResult,
	concurrency int, timeout time.Duration, out io.Writer) error {
	req, err := jobRequest("", res.Environment, false, concurrency, timeout)
	if err != nil {
		return err
	}
	req.Release = res.Environment + "@" + short(res.CodeID)
	switch {
	case len(ch.Nodes) > 0:
		req.Nodes, req.Environment = ch.Nodes, ""
	case ch.Percent != nil && res.Release != nil:
		// The release's share of the nodes: those its buckets reach,
		// named ones included, as the farm serves them.
		req.Environment = ""
		err := c.EachNode(ctx, res.Environment, func(n farm.Node) error {
			if res.Release.Released(n.Certname) {
				req.Nodes = append(req.Nodes, n.Certname)
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("list the released nodes of %s: %w", res.Environment, err)
		}
		if len(req.Nodes) == 0 {
			fmt.Fprintf(out, "no node of %s is released at %d%%: nothing to run\n", res.Environment, *ch.Percent)
			return nil
		}
	}
	who := fmt.Sprintf("%d released nodes", len(req.Nodes))
	if req.Environment != "" {
		who = "every node of " + req.Environment
	}
	fmt.Fprintf(out, "running Puppet on %s, %d at a time...\n", who, concurrency)
	runErr := startAndWatch(ctx, c, req, 2*time.Second, out)
	if ctx.Err() != nil {
		return runErr
	}
	st, err := c.ReleaseStatus(context.WithoutCancel(ctx), res.Environment)
	if err != nil {
		return errors.Join(runErr, err)
	}
	printReleaseStatus(out, st)
	return runErr
}

func printReleaseResult(w io.Writer, res release.ReleaseResult) {
	r := res.Release
	switch {
	case r == nil:
		fmt.Fprintf(w, "%s: not holding; every node gets code %s\n", res.Environment, short(res.CodeID))
	case r.Stable == res.CodeID:
		fmt.Fprintf(w, "%s: holding; code %s is stable on every node; the next deploy waits for a release\n", res.Environment, short(res.CodeID))
	default:
		fmt.Fprintf(w, "%s: code %s released to %d%% of nodes", res.Environment, short(res.CodeID), r.Percent)
		if len(r.Nodes) > 0 {
			fmt.Fprintf(w, " and %d named (%s)", len(r.Nodes), strings.Join(r.Nodes, ", "))
		}
		fmt.Fprintf(w, "; the others keep %s\n", short(r.Stable))
	}
	fmt.Fprintf(w, "%d nodes newly released: %d got their precompiled catalog at once, %d queued for compile\n",
		res.Released, res.Replan.Promoted, res.Replan.Queued)
	if len(res.Changes) > 0 {
		fmt.Fprintf(w, "what changes for them (resources, by type): %s\n", typeCounts(res.Changes))
	}
}

func typeCounts(m map[string]int) string {
	types := make([]string, 0, len(m))
	for t := range m {
		types = append(types, t)
	}
	sort.Strings(types)
	parts := make([]string, len(types))
	for i, t := range types {
		parts[i] = fmt.Sprintf("%s %d", t, m[t])
	}
	return strings.Join(parts, ", ")
}

func printReleaseStatus(w io.Writer, st release.ReleaseStatus) {
	hold := "not holding"
	if r := st.Release; r != nil && r.Hold {
		hold = fmt.Sprintf("holding (released to %d%%, %d named)", r.Percent, len(r.Nodes))
	}
	fmt.Fprintf(w, "%s: %d nodes, %s\n", st.Environment, st.Nodes, hold)
	fmt.Fprintf(w, "%-8s %-14s %8s %8s %8s %8s %8s\n", "ROLE", "CODE_ID", "TARGETED", "COMPILED", "RELEASED", "APPLIED", "FAILED")
	for _, c := range st.Codes {
		released := fmt.Sprint(c.Released)
		if c.Role != "new" {
			released = "-"
		}
		fmt.Fprintf(w, "%-8s %-14s %8d %8d %8s %8d %8d\n", c.Role, short(c.CodeID), c.Targeted, c.Compiled, released, c.Applied, c.Failed)
	}
	for _, c := range st.Codes {
		for _, f := range c.Failures {
			fmt.Fprintf(w, "failed (%s): %s\n", short(c.CodeID), f)
		}
	}
}

func runDiff(ctx context.Context, args []string) error {
	fs, op := operatorFlagSet("diff", "usage: broker diff NODE [--from CODE_ID] [--to CODE_ID] [--json]", false)
	from := fs.String("from", "", "code_id (or a prefix) of the older catalog (default: the one before --to)")
	to := fs.String("to", "", "code_id (or a prefix) of the newer catalog (default: the precompiled candidate, else the current catalog)")
	asJSON := fs.Bool("json", false, "print the difference as JSON")
	node, err := nodeArg(fs, args)
	if err != nil {
		return err
	}
	return op.with(ctx, func(c *admin.Client) error {
		d, err := c.Diff(ctx, node, *from, *to)
		if err != nil {
			return err
		}
		if *asJSON {
			return printJSON(os.Stdout, d)
		}
		printDiff(os.Stdout, node, d)
		return nil
	})
}

func printDiff(w io.Writer, node string, d catalog.Diff) {
	fmt.Fprintf(w, "%s: %s -> %s: %d resources differ\n", node, short(d.From), short(d.To), len(d.Resources))
	for _, r := range d.Resources {
		switch r.Change {
		case catalog.Added:
			fmt.Fprintf(w, "+ %s\n", r.Ref)
		case catalog.Removed:
			fmt.Fprintf(w, "- %s\n", r.Ref)
		default:
			fmt.Fprintf(w, "~ %s\n", r.Ref)
			names := make([]string, 0, len(r.Params))
			for p := range r.Params {
				names = append(names, p)
			}
			sort.Strings(names)
			for _, p := range names {
				v := r.Params[p]
				fmt.Fprintf(w, "    %s: %s -> %s\n", p, v[0], v[1])
			}
		}
	}
}

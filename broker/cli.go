package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/compilefarm/compilefarm/pkg/admin"
	"github.com/compilefarm/compilefarm/pkg/farm"
	"github.com/compilefarm/compilefarm/pkg/release"
)

const defaultAdmin = "http://" + defaultAdminListen

// parseInterspersed parses flags that may come before or after positional
// arguments (`code deploy production --from DIR`).
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

// nodeArg parses args for a verb that takes one NODE and flags (in any
// order), printing the usage when the NODE is missing or doubled.
func nodeArg(fs *flag.FlagSet, args []string) (string, error) {
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return "", err
	}
	if len(pos) != 1 {
		fs.Usage()
		return "", fmt.Errorf("%s: expected one NODE", fs.Name())
	}
	return pos[0], nil
}

// printJSON writes v to out as indented JSON (an operator command's
// --json).
func printJSON(out io.Writer, v any) error {
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func runCA(ctx context.Context, args []string) error {
	if len(args) > 0 && args[0] == "init" {
		return runCAInit(ctx, args[1:])
	}
	fs, op := operatorFlagSet("ca", "usage: broker ca list | sign NAME [--allow-authorization-extensions] | revoke NAME [--admin URL | --backend aws ...]\n"+
		"       broker ca generate NAME --operator [--out DIR] [--admin URL | --backend aws ...]\n"+
		"       broker ca init --ca-table TABLE (--ca-key-kms KEY | --ca-key-secret ID | --ca-key-file FILE) [--import-key FILE]", false)
	allowAuth := fs.Bool("allow-authorization-extensions", false, "sign: sign a request for Puppet's authorization extensions, "+
		"pp_cli_auth (an operator certificate) included; the CA refuses them otherwise")
	operator := fs.Bool("operator", false, "generate: an operator certificate (pp_cli_auth), for the front door's operator API")
	out := fs.String("out", ".", "generate: directory for NAME.key.pem, NAME.cert.pem and ca.pem")
	pos, c, done, err := op.connect(ctx, fs, args)
	if err != nil {
		return err
	}
	defer done()
	switch {
	case len(pos) == 1 && pos[0] == "list":
		certs, err := c.Certs(ctx)
		if err != nil {
			return err
		}
		tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "NAME\tSTATE\tSERIAL\tEXPIRES\tFINGERPRINT (SHA256)")
		for _, s := range certs {
			exp := "-"
			if !s.NotAfter.IsZero() {
				exp = s.NotAfter.UTC().Format("2006-01-02")
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", s.Certname, s.State, orDash(s.Serial), exp, s.Fingerprint)
		}
		return tw.Flush()
	case len(pos) == 2 && pos[0] == "generate":
		if !*operator {
			return fmt.Errorf("ca generate makes operator certificates only: add --operator (agents request their own certificates)")
		}
		return generateOperator(ctx, c, pos[1], *out, os.Stdout)
	case len(pos) == 2 && pos[0] == "sign":
		if err := c.Sign(ctx, pos[1], farm.SignOptions{AllowAuthorizationExtensions: *allowAuth}); err != nil {
			return err
		}
		fmt.Printf("signed certificate for %s\n", pos[1])
		return nil
	case len(pos) == 2 && pos[0] == "revoke":
		if err := c.Revoke(ctx, pos[1]); err != nil {
			return err
		}
		fmt.Printf("revoked certificate for %s; the front door refuses it from now on\n", pos[1])
		return nil
	}
	fs.Usage()
	return fmt.Errorf("ca: expected list, sign NAME, revoke NAME or generate NAME --operator")
}

func runCode(ctx context.Context, args []string) error {
	fs, op := operatorFlagSet("code", "usage: broker code deploy ENV [--from DIR] [--detach] | deploy --all [--detach] | status ENV  [--admin URL | --backend aws ...]", true)
	from := fs.String("from", "", "directory holding the environment's code (default: ENV under the broker's --environments)")
	all := fs.Bool("all", false, "deploy every environment under the broker's --environments, as after a change in its --basemodulepath (global modules): "+
		"the environments that use the change get new code and recompiles, the others stay as they are")
	detach := fs.Bool("detach", false, "return once the recompiles are queued instead of following them")
	pos, c, done, err := op.connect(ctx, fs, args)
	if err != nil {
		return err
	}
	defer done()
	switch {
	case len(pos) == 2 && pos[0] == "status":
		st, err := c.DeployStatus(ctx, pos[1])
		if err != nil {
			return err
		}
		fmt.Println(statusLine(st, 0, time.Since(st.DeployedAt)))
		return nil
	case len(pos) >= 1 && pos[0] == "deploy" && op.backend == "aws" && op.environments == "" && *from == "":
		return errNoCode
	case len(pos) == 1 && pos[0] == "deploy" && *all:
		if *from != "" {
			return fmt.Errorf("code deploy --all reads every environment from the broker's --environments; --from names one environment's directory (code deploy ENV --from DIR)")
		}
		return deployAll(ctx, c, *detach)
	case len(pos) == 2 && pos[0] == "deploy" && !*all:
	default:
		fs.Usage()
		return fmt.Errorf("code: expected deploy ENV, deploy --all or status ENV")
	}
	fmt.Printf("deploying %s: snapshotting code and queueing recompiles...\n", pos[1])
	res, err := c.Deploy(ctx, pos[1], *from)
	if err != nil {
		return err
	}
	if !printDeployed(os.Stdout, res) {
		return nil
	}
	if *detach {
		fmt.Printf("follow it with: broker code status %s\n", res.Environment)
		return nil
	}
	return followDeploy(ctx, c, res.Environment, os.Stdout)
}

// printDeployed prints what a deploy did to an environment and reports
// whether it has recompiles to follow.
func printDeployed(out io.Writer, res release.DeployResult) bool {
	if !res.Changed && res.Queued == 0 {
		fmt.Fprintf(out, "%s: code unchanged (code_id %s, %d files); nothing queued\n", res.Environment, short(res.CodeID), res.Files)
		return false
	}
	fmt.Fprintf(out, "%s: code_id %s -> %s (%d files); %d nodes queued for recompile on the bulk lane\n",
		res.Environment, orDash(short(res.Previous)), short(res.CodeID), res.Files, res.Queued)
	return true
}

// deployAll deploys every environment (code deploy --all) and follows the
// recompiles of the changed ones, one environment after the other.
func deployAll(ctx context.Context, c *admin.Client, detach bool) error {
	fmt.Println("deploying every environment: snapshotting code (with the global modules they use) and queueing recompiles...")
	results, err := c.DeployAll(ctx)
	if err != nil {
		return err
	}
	var follow []string
	for _, res := range results {
		if printDeployed(os.Stdout, res) {
			follow = append(follow, res.Environment)
		}
	}
	switch {
	case len(follow) == 0:
		fmt.Printf("no environment changed (%d deployed); nothing queued\n", len(results))
		return nil
	case detach:
		fmt.Printf("follow them with: broker code status ENV, for %s\n", strings.Join(follow, ", "))
		return nil
	}
	for i, env := range follow {
		if err := followDeploy(ctx, c, env, os.Stdout); err != nil {
			return err
		}
		if ctx.Err() != nil {
			if rest := follow[i+1:]; len(rest) > 0 {
				fmt.Printf("these deploys go on too: broker code status ENV, for %s\n", strings.Join(rest, ", "))
			}
			return nil
		}
	}
	return nil
}

// followDeploy prints a deploy's progress (when it changes, at least every
// 10s) until no compile for the code is waiting or ctx ends (detach).
func followDeploy(ctx context.Context, c *admin.Client, env string, out io.Writer) error {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var (
		last   string
		lastAt time.Time
		start  time.Time
		done0  int
	)
	for {
		st, err := c.DeployStatus(context.WithoutCancel(ctx), env)
		if err != nil {
			return err
		}
		if start.IsZero() {
			// The rate counts from the first look: compiles finished before
			// it are not this command's to time.
			start, done0 = time.Now(), st.Compiled+st.Unchanged+st.Failed
		}
		line := statusLine(st, done0, time.Since(start))
		if counts := countsOf(st); counts != last || time.Since(lastAt) >= 10*time.Second || st.Done() {
			fmt.Fprintln(out, line)
			last, lastAt = counts, time.Now()
		}
		if st.Done() {
			if st.Failed > 0 {
				fmt.Fprintf(out, "%d nodes failed to compile with the new code: see `broker nodes`\n", st.Failed)
			}
			return nil
		}
		select {
		case <-ctx.Done():
			fmt.Fprintf(out, "detached; the deploy goes on: broker code status %s\n", env)
			return nil
		case <-tick.C:
		}
	}
}

func countsOf(st release.DeployStatus) string {
	return fmt.Sprint(st.Queued, st.Compiled, st.Unchanged, st.Failed, st.Other)
}

// statusLine is one progress line: counts, the rate of compiles finished
// since done0 were, over elapsed, and the ETA at that rate.
func statusLine(st release.DeployStatus, done0 int, elapsed time.Duration) string {
	done := st.Compiled + st.Unchanged + st.Failed
	waiting := st.Queued + st.Other
	rate := 0.0
	if elapsed > 0 {
		rate = float64(done-done0) / elapsed.Seconds()
	}
	eta := "-"
	switch {
	case waiting == 0:
		eta = "done"
	case rate > 0:
		eta = time.Duration(float64(waiting) / rate * float64(time.Second)).Round(time.Second).String()
	}
	return fmt.Sprintf("%s %s  %d/%d done: compiled %d, unchanged %d, failed %d; queued %d  (%.1f/s, ETA %s)",
		st.Environment, short(st.CodeID), done, st.Nodes, st.Compiled, st.Unchanged, st.Failed, waiting, rate, eta)
}

func runNodes(ctx context.Context, args []string) error {
	fs, op := operatorFlagSet("nodes", "", false)
	env := fs.String("environment", "", "list only this environment's nodes (default: every environment)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	c, done, err := op.client(ctx)
	if err != nil {
		return err
	}
	defer done()
	now := time.Now()
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	header := "NODE\tENVIRONMENT\tCATALOG AGE\tCODE_ID\tREASON\tLAST COMPILE\tDURATION\tLAST REPORT"
	fmt.Fprintln(tw, header)
	var failures, classifierFailures []string
	rows := 0
	err = c.EachNode(ctx, *env, func(n farm.Node) error {
		// Print as the records arrive: a block of rows at a time (columns
		// line up within a block), so 100,000 nodes start printing at once.
		if rows++; rows%500 == 0 {
			if err := tw.Flush(); err != nil {
				return err
			}
		}
		if f := n.ClassifierFailure; f != nil {
			classifierFailures = append(classifierFailures, fmt.Sprintf("%s (%s ago): %s", n.Certname, now.Sub(f.At).Round(time.Second), f.Error))
		}
		age, codeID := "-", "-"
		if n.Catalog != nil {
			age = now.Sub(n.Catalog.CompiledAt).Round(time.Second).String()
			codeID = short(n.Catalog.CodeID)
		}
		compile, dur := "-", "-"
		if n.Pending() {
			compile = "pending"
		} else if n.Compile != nil {
			compile = n.Compile.Result
			if n.Compile.Duration > 0 {
				dur = n.Compile.Duration.Round(time.Millisecond).String()
			}
			if n.Compile.Result == farm.ResultFailed {
				failures = append(failures, fmt.Sprintf("%s: %s", n.Certname, n.Compile.Error))
			}
		}
		report := "-"
		if n.Report != nil {
			report = fmt.Sprintf("%s (%s ago)", n.Report.Status, now.Sub(n.Report.At).Round(time.Second))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", n.Certname, orDash(n.Environment), age, codeID,
			reasonLabel(n.Requested, 40), compile, dur, report)
		return nil
	})
	if ferr := tw.Flush(); err == nil {
		err = ferr
	}
	if err != nil {
		return err
	}
	for _, list := range []struct {
		title string
		lines []string
	}{
		{"compile errors", failures},
		{"external node classifier errors (the check-in failed; the node keeps its catalog)", classifierFailures},
	} {
		if len(list.lines) == 0 {
			continue
		}
		fmt.Printf("\n%s:\n", list.title)
		for _, f := range list.lines {
			fmt.Println("  " + strings.ReplaceAll(f, "\n", "\n    "))
		}
	}
	return nil
}

func short(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

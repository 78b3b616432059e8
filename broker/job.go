package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/compilefarm/compilefarm/pkg/admin"
	"github.com/compilefarm/compilefarm/pkg/farm"
	"github.com/compilefarm/compilefarm/pkg/pcp/jobs"
)

const jobUsage = `usage: broker job run --nodes a,b | --environment ENV [--noop] [--concurrency N] [--timeout D]
       broker job show ID
       broker job list [--limit N] [--after NEXT]
run has each node's pxp-agent run Puppet (pxp-module-puppet) through the
farm's PCP broker, at most N nodes at a time, and follows the job until
every node has finished, failed or was unreachable; it exits non-zero when
a node failed or was unreachable. Ctrl-C detaches: the job goes on.`

// errJobsInProcess: the operator API built in this process (--backend aws)
// holds no PCP connections.
var errJobsInProcess = errors.New("jobs run on a fleet task's PCP broker, which --backend aws (the operator API in this process) does not hold: " +
	"use --admin https://HOST:8140 --cert FILE --key FILE --ca-cert FILE with an operator certificate (broker ca generate NAME --operator)")

func runJob(ctx context.Context, args []string) error {
	return jobCommand(ctx, args, os.Stdout)
}

// jobCommand runs `broker job ...`, printing to out.
func jobCommand(ctx context.Context, args []string, out io.Writer) error {
	fs, op := operatorFlagSet("job", jobUsage, false)
	nodes := fs.String("nodes", "", "run: these nodes (comma separated)")
	env := fs.String("environment", "", "run: every node of this environment")
	noop := fs.Bool("noop", false, "run: puppet agent --noop (report what would change, change nothing)")
	concurrency := fs.Int("concurrency", jobs.DefaultConcurrency, "run: nodes running Puppet at once")
	timeout := fs.Duration("timeout", jobs.DefaultTimeout, "run: how long one node's run may take")
	poll := fs.Duration("poll", 2*time.Second, "run: how often to look at the job's progress")
	limit := fs.Int("limit", 20, "list: jobs per page")
	after := fs.String("after", "", "list: the page after this one (the NEXT a list printed)")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		fs.Usage()
		return fmt.Errorf("job: expected run, show ID or list")
	}
	if op.backend != "" {
		return errJobsInProcess
	}
	switch {
	case pos[0] == "run" && len(pos) == 1:
		req, err := jobRequest(*nodes, *env, *noop, *concurrency, *timeout)
		if err != nil {
			return err
		}
		return op.with(ctx, func(c *admin.Client) error { return startAndWatch(ctx, c, req, *poll, out) })
	case pos[0] == "show" && len(pos) == 2:
		return op.with(ctx, func(c *admin.Client) error { return showJob(ctx, c, pos[1], out) })
	case pos[0] == "list" && len(pos) == 1:
		return op.with(ctx, func(c *admin.Client) error { return listJobs(ctx, c, *after, *limit, out) })
	}
	fs.Usage()
	return fmt.Errorf("job: expected run, show ID or list")
}

// jobRequest checks run's flags as far as this side can.
func jobRequest(nodes, env string, noop bool, concurrency int, timeout time.Duration) (admin.JobRequest, error) {
	req := admin.JobRequest{Nodes: splitList(nodes), Environment: env, Noop: noop, Concurrency: &concurrency}
	switch {
	case len(req.Nodes) == 0 && env == "":
		return req, fmt.Errorf("job run: give --nodes a,b or --environment ENV")
	case len(req.Nodes) > 0 && env != "":
		return req, fmt.Errorf("job run: give --nodes or --environment, not both")
	case concurrency < 1:
		return req, fmt.Errorf("job run: --concurrency %d: give at least 1", concurrency)
	case timeout <= 0:
		return req, fmt.Errorf("job run: --timeout %v: give a positive duration such as 30m", timeout)
	}
	req.Timeout = timeout.String()
	return req, nil
}

// startAndWatch starts a job and follows it to its end; an error when a
// node failed or was unreachable.
func startAndWatch(ctx context.Context, c *admin.Client, req admin.JobRequest, poll time.Duration, out io.Writer) error {
	job, err := c.StartJob(ctx, req)
	if err != nil {
		return fmt.Errorf("start job: %w", err)
	}
	noop := ""
	if job.Noop {
		noop = " (noop)"
	}
	fmt.Fprintf(out, "job %s started: %d nodes%s, %d at a time, %v per run\n", job.ID, job.Total, noop, job.Concurrency, job.Timeout)
	job, err = watchJob(ctx, c, job.ID, poll, out)
	if err != nil || job.State == farm.JobRunning {
		return err
	}
	return jobResult(job)
}

// jobResult is nil for a job whose nodes all finished.
func jobResult(job farm.RunJob) error {
	if job.State == farm.JobFinished {
		return nil
	}
	bad := job.Counts[farm.JobNodeFailed] + job.Counts[farm.JobNodeUnreachable]
	return fmt.Errorf("job %s %s: %d of %d nodes failed or were unreachable (broker job show %s)", job.ID, job.State, bad, job.Total, job.ID)
}

// watchJob prints the job's progress (when its counts change, at least
// every 30s) and a line per node that ends, until the job ends or ctx
// does (detach: the job goes on).
func watchJob(ctx context.Context, c *admin.Client, id string, poll time.Duration, out io.Writer) (farm.RunJob, error) {
	tick := time.NewTicker(poll)
	defer tick.Stop()
	reported := map[string]bool{} // nodes whose end is printed
	var last string
	var lastAt time.Time
	for {
		d, err := c.Job(context.WithoutCancel(ctx), id, "")
		if err != nil {
			return farm.RunJob{}, err
		}
		job := d.Job
		line := progressLine(job)
		if line != last {
			// Counts moved: print the nodes that ended since.
			if _, err := c.EachJobNode(context.WithoutCancel(ctx), id, func(n farm.RunJobNode) error {
				if !reported[n.Node] && final(n.State) {
					reported[n.Node] = true
					fmt.Fprintln(out, nodeLine(n))
				}
				return nil
			}); err != nil {
				return job, err
			}
		}
		if line != last || time.Since(lastAt) >= 30*time.Second || job.State != farm.JobRunning {
			fmt.Fprintln(out, line)
			last, lastAt = line, time.Now()
		}
		if job.State != farm.JobRunning {
			return job, nil
		}
		select {
		case <-ctx.Done():
			fmt.Fprintf(out, "detached; the job goes on: broker job show %s\n", id)
			return job, nil
		case <-tick.C:
		}
	}
}

// final reports whether a node's state is an end.
func final(state string) bool {
	return state != farm.JobNodeQueued && state != farm.JobNodeRunning
}

// nodeStates are a job's node states in the order lines show them.
var nodeStates = []string{farm.JobNodeQueued, farm.JobNodeRunning, farm.JobNodeFinished, farm.JobNodeFailed, farm.JobNodeUnreachable}

// progressLine: job ID running: 3 nodes — 1 running, 2 finished.
func progressLine(job farm.RunJob) string {
	return fmt.Sprintf("job %s %s: %d nodes — %s", job.ID, job.State, job.Total, countsText(job.Counts))
}

func countsText(counts map[string]int) string {
	var parts []string
	for _, s := range nodeStates {
		if n := counts[s]; n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, s))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// nodeLine: one node's end.
func nodeLine(n farm.RunJobNode) string {
	s := fmt.Sprintf("  %s %s", n.Node, n.State)
	if n.ExitCode != nil {
		s += fmt.Sprintf(", exit %d", *n.ExitCode)
	}
	if n.Status != "" {
		s += ", " + n.Status
	}
	if n.Error != "" {
		s += ": " + oneLine(n.Error)
	}
	return s
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

func showJob(ctx context.Context, c *admin.Client, id string, out io.Writer) error {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	header, linked := false, false
	job, err := c.EachJobNode(ctx, id, func(n farm.RunJobNode) error {
		if !header {
			header = true
			fmt.Fprintln(tw, "NODE\tSTATE\tEXIT\tSTATUS\tREPORT\tERROR")
		}
		exit := "-"
		if n.ExitCode != nil {
			exit = fmt.Sprint(*n.ExitCode)
		}
		// The link to the run's stored report (broker report prints it);
		// the run's id when the farm kept only a summary of the report.
		report := n.ReportURL
		linked = linked || report != ""
		if report == "" && n.TransactionUUID != "" {
			report = "transaction " + n.TransactionUUID
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", n.Node, n.State, exit, orDash(n.Status), orDash(report), orDash(oneLine(n.Error)))
		return nil
	})
	if err != nil {
		return err
	}
	fmt.Fprintln(out, jobSummary(job))
	if err := tw.Flush(); err != nil {
		return err
	}
	if linked {
		fmt.Fprintf(out, "a run's report: broker report %sDIGEST (with the same --admin flags)\n", admin.ReportsPath)
	}
	return nil
}

// jobSummary is show's first line: what the job is and where it stands.
func jobSummary(job farm.RunJob) string {
	what := "nodes"
	if job.Environment != "" {
		what = "environment " + job.Environment
	}
	if job.Release != "" {
		what += ", release " + job.Release
	}
	if job.Noop {
		what += ", noop"
	}
	return fmt.Sprintf("job %s %s: %s; started %s by %s on %s, %d at a time, %v per run; %d nodes — %s",
		job.ID, job.State, what, job.Created.UTC().Format(time.RFC3339), orDash(job.Owner), orDash(job.Runner),
		job.Concurrency, job.Timeout, job.Total, countsText(job.Counts))
}

func listJobs(ctx context.Context, c *admin.Client, after string, limit int, out io.Writer) error {
	page, err := c.Jobs(ctx, after, limit)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATE\tCREATED\tNODES\tPROGRESS\tOWNER\tWHAT")
	for _, j := range page.Jobs {
		what := "nodes"
		switch {
		case j.Release != "":
			what = "release " + j.Release
		case j.Environment != "":
			what = "environment " + j.Environment
		}
		if j.Noop {
			what += " (noop)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\n", j.ID, j.State, j.Created.UTC().Format(time.RFC3339), j.Total,
			countsText(j.Counts), orDash(j.Owner), what)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if page.Next != "" {
		fmt.Fprintf(out, "more: broker job list --after %q\n", page.Next)
	}
	return nil
}

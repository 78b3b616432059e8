package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/compilefarm/compilefarm/pkg/admin"
	"github.com/compilefarm/compilefarm/pkg/farm"
)

const reportUsage = `usage: broker report DIGEST | /admin/v1/reports/DIGEST [--admin URL ...]
prints an agent report the farm stored (its JSON, as the agent sent it):
the REPORT column of broker job show names one. The farm keeps a run's
full report when it is worth keeping (a node's first, a failure, a change,
and one every --full-report-every of unchanged runs) and a summary of the
others.`

func runReport(ctx context.Context, args []string) error {
	return reportCommand(ctx, args, os.Stdout)
}

// reportCommand runs `broker report ...`, printing the report to out.
func reportCommand(ctx context.Context, args []string, out io.Writer) error {
	fs, op := operatorFlagSet("report", reportUsage, false)
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		fs.Usage()
		return fmt.Errorf("report: expected one DIGEST (or the /admin/v1/reports/DIGEST broker job show prints)")
	}
	d, err := reportDigest(pos[0])
	if err != nil {
		return err
	}
	return op.with(ctx, func(c *admin.Client) error { return printReport(ctx, c, d, out) })
}

// printReport prints the stored report d to out, ending in a newline.
func printReport(ctx context.Context, c *admin.Client, d farm.Digest, out io.Writer) error {
	body, err := c.Report(ctx, d)
	if err != nil {
		return err
	}
	if !bytes.HasSuffix(body, []byte("\n")) {
		body = append(body, '\n')
	}
	_, err = out.Write(body)
	return err
}

// reportDigest reads a report's digest from arg: the digest, or a link to
// the report as broker job show prints it (/admin/v1/reports/DIGEST, also
// under the front door's prefix or as a whole URL).
func reportDigest(arg string) (farm.Digest, error) {
	d := arg
	if i := strings.LastIndex(arg, admin.ReportsPath); i >= 0 {
		d = arg[i+len(admin.ReportsPath):]
	}
	if err := farm.ValidateAddress(farm.SpaceReports, farm.Digest(d)); err != nil {
		return "", fmt.Errorf("report %q: give the report's digest (64 lowercase hex digits) or the %sDIGEST broker job show prints: %w",
			arg, admin.ReportsPath, err)
	}
	return farm.Digest(d), nil
}

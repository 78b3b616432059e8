// Command broker is compilefarm's one binary. `broker dev` runs the whole farm
// in one process (front door, CA, queue, compile workers, storage) on the
// embedded drivers; the operator verbs (ca, code, nodes, explain) talk to a
// running broker's operator API.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
)

const usage = `usage: broker <command> [flags]

commands:
  dev                         run the whole farm in one process (embedded default)
  serve --backend aws         the fleet's front door on S3, DynamoDB and SQS (compiles run in the compile Lambda)
  ca list|sign NAME|revoke NAME   manage certificates of a running broker
  code deploy ENV [--from DIR]    snapshot an environment's code, queue recompiles, show progress
  code deploy --all           the same for every environment (after a change in the global --basemodulepath)
  code status ENV             how far the environment's nodes are with its current code
  release ENV --hold|--no-hold|--percent P|--nodes a,b|--all
                              staged release of an environment's code (ARM-11)
  release status ENV          per code_id: nodes compiled, released, applied, failed
  release ENV ... --run [--run-concurrency N]
                              then run Puppet on the released nodes through the PCP broker and follow the runs
  job run --nodes a,b | --environment ENV [--noop] [--concurrency N] [--timeout D]
                              run Puppet on nodes now through the PCP broker (pxp-agent), follow it, exit 1 if a node failed
  job show ID | job list      a job's per-node results (exit code, status, report, error); the jobs, newest first
  report DIGEST               print a stored agent report (JSON): the REPORT job show printed
  diff NODE [--from ID] [--to ID]  resource-level difference between two catalogs of a node
  nodes                       list nodes: environment, catalog age, code_id, why last compiled, last compile and report
  explain NODE [--json]       why the farm last compiled NODE (which fact changed, old -> new) and what its catalog reads
  version                     print the version

Run 'broker <command> -h' for a command's flags.
`

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	if os.Getenv("GOGC") == "" {
		// The front door allocates per request (bodies, TLS records) over a
		// small live heap; the default GOGC=100 collects ~50 times a second
		// under load. 400 measured about a quarter less CPU per request.
		debug.SetGCPercent(400)
	}
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch cmd, args := os.Args[1], os.Args[2:]; cmd {
	case "dev":
		err = runDev(ctx, args)
	case "serve":
		err = runServe(ctx, args)
	case "ca":
		err = runCA(ctx, args)
	case "code":
		err = runCode(ctx, args)
	case "nodes":
		err = runNodes(ctx, args)
	case "release":
		err = runRelease(ctx, args)
	case "job":
		err = runJob(ctx, args)
	case "report":
		err = runReport(ctx, args)
	case "diff":
		err = runDiff(ctx, args)
	case "explain":
		err = runExplain(ctx, args)
	case "version", "--version":
		fmt.Println("broker", version)
	case "help", "-h", "--help":
		fmt.Print(usage)
	default:
		fmt.Fprintf(os.Stderr, "broker: unknown command %q\n\n%s", cmd, usage)
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "broker:", err)
		os.Exit(1)
	}
}

package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"time"

	"github.com/compilefarm/compilefarm/bench/internal/brokermetrics"
	"github.com/compilefarm/compilefarm/internal/procgroup"
)

// broker is the `broker dev` pdbbench measures, a child in a process
// group of its own (its Ruby compile workers with it).
type broker struct {
	group   *procgroup.Group
	pid     int
	args    []string
	logPath string
	addr    string // the front door's host:port
	metrics string // its /metrics URL
	admin   string // its operator API
}

// upLine is what broker dev logs once it listens.
var upLine = regexp.MustCompile(`compilefarm dev is up.* front_door=https://(\S+) metrics=(http://\S+/metrics) admin=(http://\S+)`)

// startBroker starts bin dev with args (on free loopback ports), logging
// to logPath, and waits up to 3 minutes for it to be up.
func startBroker(ctx context.Context, bin, logPath string, args []string) (*broker, error) {
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logf.Close() // the child has its own descriptor
	full := append([]string{"dev", "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0",
		"--admin-listen", "127.0.0.1:0", "--pcp-listen", "127.0.0.1:0"}, args...)
	cmd := exec.Command(bin, full...)
	cmd.Stdout, cmd.Stderr = logf, logf
	g, err := procgroup.Start(cmd, 0)
	if err != nil {
		return nil, err
	}
	b := &broker{group: g, pid: cmd.Process.Pid, args: full, logPath: logPath}
	deadline := time.Now().Add(3 * time.Minute)
	for {
		log, _ := os.ReadFile(logPath)
		if m := upLine.FindSubmatch(log); m != nil {
			b.addr, b.metrics, b.admin = string(m[1]), string(m[2]), string(m[3])
			return b, nil
		}
		select {
		case <-g.Done():
			return nil, fmt.Errorf("the broker exited before it was up:\n%s", procgroup.Tail(string(log), 20))
		case <-ctx.Done():
			b.stop()
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			b.stop()
			return nil, fmt.Errorf("the broker was not up in 3 minutes:\n%s", procgroup.Tail(string(log), 20))
		}
	}
}

// stop ends the broker and its workers (SIGTERM, SIGKILL after 20 s).
func (b *broker) stop() { b.group.Stop(20 * time.Second) }

// logTail is the end of the broker's log.
func (b *broker) logTail(n int) string {
	log, _ := os.ReadFile(b.logPath)
	return procgroup.Tail(string(log), n)
}

// scrape reads the broker's metrics; an exited broker is an error that
// says so.
func (b *broker) scrape(ctx context.Context) (brokermetrics.Samples, error) {
	select {
	case <-b.group.Done():
		return nil, fmt.Errorf("the broker exited:\n%s", b.logTail(20))
	default:
	}
	return brokermetrics.Scrape(ctx, b.metrics)
}

// Metric names pdbbench reads (pkg/metrics: puppetdb.go, queryrefresh.go).
const (
	mBacklog      = "compilefarm_puppetdb_outbox_backlog"
	mDeadLetters  = "compilefarm_puppetdb_dead_letters"
	mRoundsCount  = "compilefarm_puppetdb_query_refresh_seconds_count"
	mRoundsSum    = "compilefarm_puppetdb_query_refresh_seconds_sum"
	mLastRuns     = "compilefarm_puppetdb_query_refresh_last_runs"
	mQueries      = "compilefarm_puppetdb_queries"
	mDeliverySum  = "compilefarm_puppetdb_delivery_seconds_sum"
	mDeliveryN    = "compilefarm_puppetdb_delivery_seconds_count"
	mNodesQueued  = "compilefarm_puppetdb_query_nodes_queued_total"
	commandPrefix = "compilefarm_puppetdb_commands_total{"
	queryRunsName = "compilefarm_puppetdb_query_runs_total{"
)

// The commands, as the metrics' command label spells them.
var commandKinds = []string{"store_report", "replace_facts", "replace_catalog"}

// command is one sample of compilefarm_puppetdb_commands_total.
func command(s brokermetrics.Samples, kind, result string) float64 {
	return s[fmt.Sprintf(`compilefarm_puppetdb_commands_total{command=%q,result=%q}`, kind, result)]
}

// commandsBetween are the commands of each kind with result between two
// scrapes.
func commandsBetween(before, after brokermetrics.Samples, result string) map[string]float64 {
	out := map[string]float64{}
	for _, k := range commandKinds {
		out[k] = command(after, k, result) - command(before, k, result)
	}
	return out
}

// allCommands sums the commands of every kind with result.
func allCommands(s brokermetrics.Samples, result string) float64 {
	var n float64
	for k, v := range s {
		if strings.HasPrefix(k, commandPrefix) && strings.Contains(k, fmt.Sprintf("result=%q", result)) {
			n += v
		}
	}
	return n
}

// queryRuns sums the refresher's query runs of every outcome.
func queryRuns(s brokermetrics.Samples) float64 {
	var n float64
	for k, v := range s {
		if strings.HasPrefix(k, queryRunsName) {
			n += v
		}
	}
	return n
}

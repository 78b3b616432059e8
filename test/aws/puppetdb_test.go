package aws

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/compilefarm/compilefarm/internal/puppetdbtest"
	"github.com/compilefarm/compilefarm/pkg/sqsqueue"
	"github.com/compilefarm/compilefarm/test/e2e"
)

// TestServeFeedsPuppetDB: a fleet task (broker serve on the emulators)
// feeds the shared PuppetDB through the stack's outbox, an SQS FIFO queue
// (the emulator): a real agent's first and unchanged runs reach PuppetDB
// (facts, the catalog applied, both reports), and the queue drains.
func TestServeFeedsPuppetDB(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: real brokers, PuppetDB and a puppet agent; skipped with -short")
	}
	p := puppetdbtest.Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	a := e2e.StartAWS(t, ctx)
	outbox, err := sqsqueue.EnsureOutboxQueues(ctx, a.SQS, "farm-puppetdb")
	if err != nil {
		t.Fatal(err)
	}
	// The fleet's CA is its own (in DynamoDB): this PuppetDB does not
	// trust it, so the task reaches it over plain HTTP on loopback.
	doors, _ := a.StartFleet(t, ctx, e2e.CopyExampleEnvs(t), []string{"--certname", "door1.example.test",
		"--puppetdb", p.URL, "--puppetdb-outbox-queue", outbox.QueueURL, "--puppetdb-dead-letter-queue", outbox.DeadLetterURL,
		"--queries-table", e2e.QueriesTable, "--puppetdb-facts-every", "-1s"})
	door := doors[0]
	agent := e2e.NewAgent(t, puppetdbtest.Certname(t, "serve"))
	for i, want := range []int{2, 0} {
		if code, out := agent.Run(t, door); code != want {
			t.Fatalf("run %d: exit %d, want %d\n%s", i+1, code, want, out)
		}
	}
	q := fmt.Sprintf(`["=","certname",%q]`, agent.Certname)
	p.Eventually(t, "factsets", q, func(rows []map[string]any) bool { return len(rows) == 1 })
	p.Eventually(t, "catalogs", q, func(rows []map[string]any) bool { return len(rows) == 1 })
	p.Eventually(t, "reports", q, func(rows []map[string]any) bool { return len(rows) == 2 })
	e2e.WaitFor(t, "the outbox queue to drain", time.Minute, func() bool {
		return door.Metric(`compilefarm_puppetdb_commands_total{command="store_report",result="delivered"}`) == 2
	})
	for _, c := range []string{"replace_facts", "replace_catalog"} {
		if got := door.Metric(fmt.Sprintf(`compilefarm_puppetdb_commands_total{command=%q,result="delivered"}`, c)); got != 1 {
			t.Errorf("%s delivered %v times, want once", c, got)
		}
	}
}

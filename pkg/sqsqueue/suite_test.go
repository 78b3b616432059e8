package sqsqueue_test

import (
	"testing"
	"time"

	"github.com/compilefarm/compilefarm/pkg/farm"
	"github.com/compilefarm/compilefarm/pkg/farm/farmtest"
	"github.com/compilefarm/compilefarm/pkg/sqsqueue"
)

// suiteVisibility is the visibility timeout the contract suite runs with
// (it asks for 2 to 5 seconds).
const suiteVisibility = 2 * time.Second

func newSuiteQueue(t *testing.T) farm.Queue {
	urls := freshQueues(t, 100)
	opts := urls.Options()
	opts.VisibilityTimeout = suiteVisibility
	return sqsqueue.New(client(t), opts)
}

// TestQueueContract runs farm.Queue's contract suite against SQS with the
// promises SQS makes: no collapsing, no per-node exclusion, a retried
// message hidden (in flight) until its delay passes, and no oldest-message
// age (a CloudWatch metric, not a queue attribute).
func TestQueueContract(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the SQS emulator; skipped with -short")
	}
	needSQS(t)
	farmtest.TestQueue(t, newSuiteQueue, farmtest.QueueCaps{RetriedCountsAsInFlight: true, NoOldestAge: true})
}

package sqsqueue_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/compilefarm/compilefarm/internal/emulator"
	"github.com/compilefarm/compilefarm/pkg/sqsqueue"
)

// fauxqs is the SQS emulator every test here talks to, started once by
// TestMain.
var fauxqs *emulator.Process

func TestMain(m *testing.M) { emulator.Main(m, emulator.SQS(&fauxqs)) }

// needSQS skips the test under -short, where TestMain starts no emulator.
func needSQS(t *testing.T) {
	t.Helper()
	if testing.Short() { // also for a test that forgot its own guard
		t.Skip("needs the SQS emulator; skipped with -short")
	}
}

func newClient(t *testing.T, endpoint string, attempts int) *sqs.Client {
	t.Helper()
	return sqs.New(sqs.Options{
		Region:           "us-east-1",
		BaseEndpoint:     aws.String(endpoint),
		Credentials:      credentials.NewStaticCredentialsProvider("test", "test", ""),
		RetryMaxAttempts: attempts,
	})
}

func client(t *testing.T) *sqs.Client {
	t.Helper()
	needSQS(t)
	return newClient(t, fauxqs.URL, 0)
}

var queueCounter atomic.Int64

var unsafeName = regexp.MustCompile(`[^A-Za-z0-9]+`)

// freshQueues makes a new set of queues for the test: the test's name (made
// safe) and a counter, so runs never share a queue.
func freshQueues(t *testing.T, maxReceiveCount int) sqsqueue.QueueURLs {
	t.Helper()
	name := unsafeName.ReplaceAllString(t.Name(), "-")
	if len(name) > 40 {
		name = name[len(name)-40:]
	}
	prefix := fmt.Sprintf("q%d-%s", queueCounter.Add(1), name)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	urls, err := sqsqueue.EnsureQueues(ctx, client(t), prefix, maxReceiveCount)
	if err != nil {
		t.Fatalf("ensure queues %s: %v", prefix, err)
	}
	return urls
}

// inspected is what fauxqs's GET /_fauxqs/queues/<name> reports.
type inspected struct {
	Name       string            `json:"name"`
	Attributes map[string]string `json:"attributes"`
	Messages   struct {
		Ready    []inspectedMessage `json:"ready"`
		Delayed  []inspectedMessage `json:"delayed"`
		Inflight []struct {
			Message inspectedMessage `json:"message"`
		} `json:"inflight"`
	} `json:"messages"`
}

type inspectedMessage struct {
	MessageID               string `json:"messageId"`
	Body                    string `json:"body"`
	ApproximateReceiveCount int    `json:"approximateReceiveCount"`
}

func inspectQueue(t *testing.T, name string) inspected {
	t.Helper()
	resp, err := http.Get(fauxqs.URL + "/_fauxqs/queues/" + name)
	if err != nil {
		t.Fatalf("inspect queue %s: %v", name, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("inspect queue %s: %s", name, resp.Status)
	}
	var in inspected
	if err := json.NewDecoder(resp.Body).Decode(&in); err != nil {
		t.Fatalf("inspect queue %s: %v", name, err)
	}
	return in
}

package sqsqueue_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/compilefarm/compilefarm/pkg/farm"
	"github.com/compilefarm/compilefarm/pkg/farm/farmtest"
	"github.com/compilefarm/compilefarm/pkg/sqsqueue"
)

// newSuiteInbox returns an Inbox whose queues no other test shares.
func newSuiteInbox(t *testing.T) farm.Inbox {
	prefix := fmt.Sprintf("i%d-", queueCounter.Add(1))
	in := sqsqueue.NewInbox(client(t), sqsqueue.InboxOptions{Prefix: prefix})
	return in
}

func TestInboxContract(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the SQS emulator; skipped with -short")
	}
	needSQS(t)
	farmtest.TestInbox(t, newSuiteInbox)
}

func TestInboxQueueName(t *testing.T) {
	const prefix = "compilefarm-prod-pcp-"
	long := strings.Repeat("0123456789abcdef", 5)
	for _, tc := range []struct {
		task, want string
	}{
		{"3f2a9c1e5b7d4e6f8a0b1c2d3e4f5a6b", prefix + "3f2a9c1e5b7d4e6f8a0b1c2d3e4f5a6b"},
		{"task_a-1", prefix + "task_a-1"},
		{"a.b", prefix + "a_b-"},
		{"a/b", prefix + "a_b-"},
		{long, prefix + long[:80-len(prefix)-17] + "-"},
	} {
		got := sqsqueue.InboxQueueName(prefix, tc.task)
		if !strings.HasPrefix(got, tc.want) || len(got) > 80 {
			t.Errorf("InboxQueueName(%q) = %q (%d), want %q…, at most 80", tc.task, got, len(got), tc.want)
		}
		if got != tc.want && len(got) != len(tc.want)+16 {
			t.Errorf("InboxQueueName(%q) = %q: want a 16-digit hash after %q", tc.task, got, tc.want)
		}
	}
	if a, b := sqsqueue.InboxQueueName(prefix, "a.b"), sqsqueue.InboxQueueName(prefix, "a/b"); a == b {
		t.Errorf("tasks a.b and a/b share queue %s", a)
	}
	if a, b := sqsqueue.InboxQueueName(prefix, long+"x"), sqsqueue.InboxQueueName(prefix, long+"y"); a == b {
		t.Errorf("long tasks share queue %s", a)
	}
}

func TestInboxInvalidPrefix(t *testing.T) {
	for _, prefix := range []string{"", "bad prefix", strings.Repeat("p", 61)} {
		in := sqsqueue.NewInbox(nil, sqsqueue.InboxOptions{Prefix: prefix})
		if err := in.Open(context.Background(), "task-a"); !errors.Is(err, farm.ErrInvalid) {
			t.Errorf("open with prefix %q: %v, want ErrInvalid", prefix, err)
		}
	}
}

// TestInboxQueueAttributes: an inbox queue keeps messages a minute (PCP
// messages expire in seconds) and holds a received one ten seconds.
func TestInboxQueueAttributes(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the SQS emulator; skipped with -short")
	}
	needSQS(t)
	prefix := fmt.Sprintf("i%d-", queueCounter.Add(1))
	in := sqsqueue.NewInbox(client(t), sqsqueue.InboxOptions{Prefix: prefix})
	if err := in.Open(context.Background(), "task-a"); err != nil {
		t.Fatal(err)
	}
	q := inspectQueue(t, prefix+"task-a")
	if q.Attributes["MessageRetentionPeriod"] != "60" || q.Attributes["VisibilityTimeout"] != "10" {
		t.Errorf("inbox queue attributes: %v", q.Attributes)
	}
	if err := in.Post(context.Background(), "task-a", []byte{0, 1, 2}); err != nil {
		t.Fatal(err)
	}
	q = inspectQueue(t, prefix+"task-a")
	if len(q.Messages.Ready) != 1 || q.Messages.Ready[0].Body != "AAEC" {
		t.Errorf("queued message: %+v, want one with body AAEC (base64)", q.Messages)
	}
}

// TestInboxAcrossTasks: two tasks' Inboxes (one process each in the
// fleet) share the queues by name; a poster's cached URL of a queue the
// owner closed meanwhile gives farm.ErrNotFound.
func TestInboxAcrossTasks(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the SQS emulator; skipped with -short")
	}
	needSQS(t)
	ctx := context.Background()
	prefix := fmt.Sprintf("i%d-", queueCounter.Add(1))
	owner := sqsqueue.NewInbox(client(t), sqsqueue.InboxOptions{Prefix: prefix})
	poster := sqsqueue.NewInbox(client(t), sqsqueue.InboxOptions{Prefix: prefix})
	if err := poster.Post(ctx, "task-a", []byte("early")); !errors.Is(err, farm.ErrNotFound) {
		t.Fatalf("post before the owner opened: %v, want ErrNotFound", err)
	}
	if err := owner.Open(ctx, "task-a"); err != nil {
		t.Fatal(err)
	}
	if err := poster.Post(ctx, "task-a", []byte("hello")); err != nil {
		t.Fatalf("post after the owner opened: %v", err)
	}
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	got, err := owner.Receive(rctx, "task-a")
	if err != nil || len(got) != 1 || string(got[0]) != "hello" {
		t.Fatalf("owner received %q, %v", got, err)
	}
	if err := owner.Close(ctx, "task-a"); err != nil {
		t.Fatal(err)
	}
	if err := poster.Post(ctx, "task-a", []byte("late")); !errors.Is(err, farm.ErrNotFound) {
		t.Fatalf("post with a cached URL after the owner closed: %v, want ErrNotFound", err)
	}
}

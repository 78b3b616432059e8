package farmtest

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/compilefarm/compilefarm/pkg/farm"
)

// TestInbox checks that a farm.Inbox keeps its contract. newInbox returns
// a fresh inbox for each subtest, one in which no task's inbox exists yet
// (drivers backed by a shared service give each subtest its own names).
func TestInbox(t *testing.T, newInbox func(t *testing.T) farm.Inbox) {
	t.Helper()
	tests := []struct {
		name string
		run  func(t *testing.T, in farm.Inbox)
	}{
		{"PostReceive", inboxBasic},
		{"MessagesAreBytes", inboxBytes},
		{"MessageSizes", inboxSizes},
		{"BatchesOfAtMostTen", inboxBatches},
		{"UnopenedIsNotFound", inboxUnopened},
		{"OpenIsIdempotent", inboxOpenTwice},
		{"ReceiveBlocksUntilPost", inboxBlocks},
		{"ReceiveHonoursContext", inboxCancel},
		{"TasksAreSeparate", inboxSeparate},
		{"CloseDropsInbox", inboxClose},
		{"ConcurrentPosters", inboxConcurrent},
		{"InvalidTask", inboxInvalidTask},
		{"EndedContextChangesNothing", inboxEndedContext},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.run(t, newInbox(t)) })
	}
}

func openInbox(t *testing.T, in farm.Inbox, tasks ...string) {
	t.Helper()
	for _, task := range tasks {
		must(t, "open inbox "+task, in.Open(ctxFor(t, waitLong), task))
	}
}

func post(t *testing.T, in farm.Inbox, task string, msgs ...[]byte) {
	t.Helper()
	for _, m := range msgs {
		must(t, "post to "+task, in.Post(ctxFor(t, waitLong), task, m))
	}
}

// receiveAll receives from task until n messages have arrived, checking
// every batch holds 1 to 10; it fails on a message received twice (the
// suite's messages are distinct) and returns them sorted.
func receiveAll(t *testing.T, in farm.Inbox, task string, n int) [][]byte {
	t.Helper()
	ctx := ctxFor(t, waitLong)
	var got [][]byte
	for len(got) < n {
		batch, err := in.Receive(ctx, task)
		must(t, fmt.Sprintf("receive from %s (%d of %d so far)", task, len(got), n), err)
		if len(batch) == 0 || len(batch) > 10 {
			t.Fatalf("receive from %s: batch of %d messages, want 1 to 10", task, len(batch))
		}
		for _, m := range batch {
			if slices.ContainsFunc(got, func(g []byte) bool { return bytes.Equal(g, m) }) {
				t.Fatalf("receive from %s: message %.40q delivered twice", task, m)
			}
			got = append(got, m)
		}
	}
	if len(got) > n {
		t.Fatalf("receive from %s: %d messages, want %d", task, len(got), n)
	}
	slices.SortFunc(got, bytes.Compare)
	return got
}

// receiveNone checks that task has nothing to receive within waitShort.
func receiveNone(t *testing.T, in farm.Inbox, task string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitShort)
	defer cancel()
	batch, err := in.Receive(ctx, task)
	if err == nil {
		t.Fatalf("receive from %s: got %d messages (first %.40q), want none", task, len(batch), batch[0])
	}
	wantErrIs(t, "receive from an empty inbox "+task, err, context.DeadlineExceeded)
}

func wantMessages(t *testing.T, what string, got [][]byte, want ...[]byte) {
	t.Helper()
	want = slices.Clone(want)
	slices.SortFunc(want, bytes.Compare)
	if !slices.EqualFunc(got, want, bytes.Equal) {
		t.Fatalf("%s: got %d messages %.60q, want %d %.60q", what, len(got), got, len(want), want)
	}
}

func msgs(prefix string, n int) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		out[i] = fmt.Appendf(nil, `{"id":"%s-%03d"}`, prefix, i)
	}
	return out
}

func inboxBasic(t *testing.T, in farm.Inbox) {
	openInbox(t, in, "task-a")
	want := msgs("basic", 3)
	post(t, in, "task-a", want...)
	wantMessages(t, "received", receiveAll(t, in, "task-a", 3), want...)
	receiveNone(t, in, "task-a")
	// The inbox keeps working after it was emptied.
	post(t, in, "task-a", []byte("again"))
	wantMessages(t, "received after emptying", receiveAll(t, in, "task-a", 1), []byte("again"))
}

func inboxBytes(t *testing.T, in farm.Inbox) {
	openInbox(t, in, "task-a")
	all := make([]byte, 256)
	for i := range all {
		all[i] = byte(i)
	}
	want := [][]byte{slices.Clone(all), {0}, []byte("\xff\xfe not UTF-8 \x00"), []byte("a\r\nb")}
	post(t, in, "task-a", all)
	post(t, in, "task-a", want[1:]...)
	all[0] = 'x' // the driver holds no reference to the caller's slice
	wantMessages(t, "received", receiveAll(t, in, "task-a", len(want)), want...)
}

func inboxSizes(t *testing.T, in farm.Inbox) {
	ctx := ctxFor(t, waitLong)
	openInbox(t, in, "task-a")
	biggest := bytes.Repeat([]byte{0xa5}, farm.MaxInboxMessage)
	post(t, in, "task-a", biggest)
	wantErrIs(t, "post a message over MaxInboxMessage", in.Post(ctx, "task-a", make([]byte, farm.MaxInboxMessage+1)), farm.ErrInvalid)
	wantErrIs(t, "post an empty message", in.Post(ctx, "task-a", nil), farm.ErrInvalid)
	wantMessages(t, "received", receiveAll(t, in, "task-a", 1), biggest)
	receiveNone(t, in, "task-a")
}

func inboxBatches(t *testing.T, in farm.Inbox) {
	openInbox(t, in, "task-a")
	want := msgs("batch", 25)
	post(t, in, "task-a", want...)
	wantMessages(t, "received", receiveAll(t, in, "task-a", 25), want...) // checks the batch sizes
	receiveNone(t, in, "task-a")
}

func inboxUnopened(t *testing.T, in farm.Inbox) {
	ctx := ctxFor(t, waitLong)
	openInbox(t, in, "task-a")
	wantErrIs(t, "post to an unopened inbox", in.Post(ctx, "task-b", []byte("x")), farm.ErrNotFound)
	_, err := in.Receive(ctx, "task-b")
	wantErrIs(t, "receive from an unopened inbox", err, farm.ErrNotFound)
	must(t, "close an unopened inbox", in.Close(ctx, "task-b"))
	receiveNone(t, in, "task-a")
}

func inboxOpenTwice(t *testing.T, in farm.Inbox) {
	openInbox(t, in, "task-a")
	post(t, in, "task-a", []byte("kept"))
	openInbox(t, in, "task-a")
	wantMessages(t, "received after a second open", receiveAll(t, in, "task-a", 1), []byte("kept"))
}

func inboxBlocks(t *testing.T, in farm.Inbox) {
	openInbox(t, in, "task-a")
	type result struct {
		msgs [][]byte
		err  error
	}
	done := make(chan result, 1)
	go func() {
		m, err := in.Receive(ctxFor(t, waitLong), "task-a")
		done <- result{m, err}
	}()
	select {
	case r := <-done:
		t.Fatalf("receive from an empty inbox returned %d messages, %v", len(r.msgs), r.err)
	case <-time.After(waitShort):
	}
	post(t, in, "task-a", []byte("wake"))
	select {
	case r := <-done:
		must(t, "blocked receive", r.err)
		wantMessages(t, "received by a blocked receive", r.msgs, []byte("wake"))
	case <-time.After(waitLong):
		t.Fatal("a receive blocked on an empty inbox never got the message posted later")
	}
}

func inboxCancel(t *testing.T, in farm.Inbox) {
	openInbox(t, in, "task-a")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := in.Receive(ctx, "task-a")
	wantErrIs(t, "receive with a cancelled context", err, context.Canceled)

	ctx, cancel = context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := in.Receive(ctx, "task-a")
		done <- err
	}()
	time.Sleep(50 * time.Millisecond)
	cancel()
	select {
	case err := <-done:
		wantErrIs(t, "receive cancelled while blocked", err, context.Canceled)
	case <-time.After(waitLong):
		t.Fatal("receive did not return after its context was cancelled")
	}
	receiveNone(t, in, "task-a") // a deadline
	// A cancelled receive took nothing.
	post(t, in, "task-a", []byte("after"))
	wantMessages(t, "received after cancelled receives", receiveAll(t, in, "task-a", 1), []byte("after"))
}

func inboxSeparate(t *testing.T, in farm.Inbox) {
	openInbox(t, in, "task-a", "task-b")
	post(t, in, "task-a", []byte("for a"))
	receiveNone(t, in, "task-b")
	post(t, in, "task-b", []byte("for b"))
	wantMessages(t, "received by a", receiveAll(t, in, "task-a", 1), []byte("for a"))
	wantMessages(t, "received by b", receiveAll(t, in, "task-b", 1), []byte("for b"))
}

func inboxClose(t *testing.T, in farm.Inbox) {
	ctx := ctxFor(t, waitLong)
	openInbox(t, in, "task-a", "task-b")
	post(t, in, "task-a", msgs("dropped", 3)...)
	post(t, in, "task-b", []byte("kept"))
	must(t, "close", in.Close(ctx, "task-a"))
	wantErrIs(t, "post to a closed inbox", in.Post(ctx, "task-a", []byte("late")), farm.ErrNotFound)
	_, err := in.Receive(ctx, "task-a")
	wantErrIs(t, "receive from a closed inbox", err, farm.ErrNotFound)
	must(t, "close again", in.Close(ctx, "task-a"))
	// Other inboxes are untouched.
	wantMessages(t, "received by b", receiveAll(t, in, "task-b", 1), []byte("kept"))
}

func inboxConcurrent(t *testing.T, in farm.Inbox) {
	openInbox(t, in, "task-a")
	const posters, each = 5, 12
	var want [][]byte
	var wg sync.WaitGroup
	errs := make(chan error, posters)
	for p := range posters {
		m := msgs(fmt.Sprintf("poster%d", p), each)
		want = append(want, m...)
		wg.Go(func() {
			for _, b := range m {
				if err := in.Post(ctxFor(t, waitLong), "task-a", b); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	// Receive while they post.
	got := receiveAll(t, in, "task-a", posters*each)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("concurrent post: %v", err)
	}
	wantMessages(t, "received", got, want...)
	receiveNone(t, in, "task-a")
}

func inboxInvalidTask(t *testing.T, in farm.Inbox) {
	ctx := ctxFor(t, waitLong)
	for _, task := range []string{"", string(make([]byte, 257))} {
		what := fmt.Sprintf("task of %d bytes", len(task))
		wantErrIs(t, "open "+what, in.Open(ctx, task), farm.ErrInvalid)
		wantErrIs(t, "post to "+what, in.Post(ctx, task, []byte("x")), farm.ErrInvalid)
		_, err := in.Receive(ctx, task)
		wantErrIs(t, "receive from "+what, err, farm.ErrInvalid)
		wantErrIs(t, "close "+what, in.Close(ctx, task), farm.ErrInvalid)
	}
	// Names a backend must rewrite still name distinct inboxes.
	long := "arn:aws:ecs:us-east-1:123456789012:task/compilefarm-dev-fleet/" + string(bytes.Repeat([]byte("0123456789abcdef"), 8))
	tasks := []string{"a.b", "a_b", "a/b", long, long + "x"}
	openInbox(t, in, tasks...)
	for _, task := range tasks {
		post(t, in, task, []byte("for "+task))
	}
	for _, task := range tasks {
		got := receiveAll(t, in, task, 1)
		wantMessages(t, "received by "+task, got, []byte("for "+task))
	}
}

// inboxEndedContext: a call whose context has ended returns its error, and
// Open, Post and Close change nothing.
func inboxEndedContext(t *testing.T, in farm.Inbox) {
	ended, cancel := context.WithCancel(ctxFor(t, waitLong))
	cancel()
	wantErrIs(t, "open with an ended context", in.Open(ended, "ended-a"), context.Canceled)
	wantErrIs(t, "post to an unopened inbox after an open with an ended context", in.Post(ctxFor(t, waitLong), "ended-a", []byte("x")), farm.ErrNotFound)
	openInbox(t, in, "ended-b")
	wantErrIs(t, "post with an ended context", in.Post(ended, "ended-b", []byte("lost")), context.Canceled)
	wantErrIs(t, "close with an ended context", in.Close(ended, "ended-b"), context.Canceled)
	_, err := in.Receive(ended, "ended-b")
	wantErrIs(t, "receive with an ended context", err, context.Canceled)
	post(t, in, "ended-b", []byte("kept"))
	wantMessages(t, "received after calls with an ended context", receiveAll(t, in, "ended-b", 1), []byte("kept"))
}

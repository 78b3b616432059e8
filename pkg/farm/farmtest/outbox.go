package farmtest

import (
	"bytes"
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/compilefarm/compilefarm/pkg/farm"
)

// OutboxCaps says which optional promises of farm.Outbox a driver makes.
type OutboxCaps struct {
	// NoOldestAge: Stats always reports an OldestAge of 0 (on SQS the age
	// of the oldest message is a CloudWatch metric, not a queue attribute).
	NoOldestAge bool
	// ListsDeadLetters: the driver has the DeadLetters method
	// farm.OutboxDeadLetter describes.
	ListsDeadLetters bool
	// Reopen, when set, closes the storage behind o and returns an Outbox
	// on that storage opened again, as a restarted process would: the
	// suite checks that what was sent and not finished survives, in order,
	// retried messages still waiting out their delay and dead letters
	// still counted.
	Reopen func(t *testing.T, o farm.Outbox) farm.Outbox
}

// outboxDeadLetters is the listing of OutboxCaps.ListsDeadLetters.
type outboxDeadLetters interface {
	DeadLetters(ctx context.Context, max int) ([]farm.OutboxDeadLetter, error)
}

// TestOutbox checks that a farm.Outbox keeps its contract. newOutbox
// returns a fresh, empty outbox for each subtest; it should set a short
// visibility timeout, about 2 to 5 seconds: the subtests on unfinished
// deliveries wait for it, and it must be well above the quarter second
// the suite watches for deliveries that must not happen.
func TestOutbox(t *testing.T, newOutbox func(t *testing.T) farm.Outbox, caps OutboxCaps) {
	t.Helper()
	type test struct {
		name string
		run  func(t *testing.T, o farm.Outbox)
	}
	tests := []test{
		{"SendReceiveAck", outboxBasic},
		{"BodiesAreBytes", outboxBodies},
		{"InvalidStoresNothing", outboxInvalid},
		{"GroupOrderOneAtATime", outboxOrderOneAtATime},
		{"GroupOrderInBatches", outboxOrderInBatches},
		{"InFlightHoldsItsGroup", outboxInFlightHolds},
		{"BatchHoldsItsGroup", outboxBatchHolds},
		{"RetryKeepsItsPlace", outboxRetryKeepsPlace},
		{"RetryWaitsOutItsDelay", outboxRetryDelay},
		{"GroupsDoNotHoldEachOther", outboxGroupsIndependent},
		{"UnfinishedComesBack", outboxVisibilityTimeout},
		{"DeadLetterSetsAside", func(t *testing.T, o farm.Outbox) { outboxDeadLetter(t, o, caps) }},
		{"FinishedIsNotFound", outboxFinishedNotFound},
		{"Stats", func(t *testing.T, o farm.Outbox) { outboxStats(t, o, caps) }},
		{"ReceiveWaitsAndWakes", outboxWakes},
		{"ReceiveHonoursContext", outboxCancel},
		{"EndedContextChangesNothing", outboxEndedContext},
		{"ConcurrentReceivers", outboxConcurrent},
	}
	if caps.ListsDeadLetters {
		tests = append(tests, test{"DeadLettersListed", outboxDeadLettersListed})
	}
	if caps.Reopen != nil {
		tests = append(tests, test{"SurvivesReopen", func(t *testing.T, o farm.Outbox) { outboxReopen(t, o, caps) }})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.run(t, newOutbox(t)) })
	}
}

// outboxMsg returns message n of group: a JSON body naming both, so a
// delivery says which message it is (outboxLabel).
func outboxMsg(group string, n int) farm.OutboxMessage {
	return farm.OutboxMessage{Group: group, Body: fmt.Appendf(nil, `{"group":%q,"n":%d}`, group, n)}
}

// outboxLabel names a delivery of an outboxMsg message: "a#2".
func outboxLabel(d farm.OutboxDelivery) string {
	for n := 1; n < 1000; n++ {
		if bytes.Equal(d.Body, outboxMsg(d.Group, n).Body) {
			return fmt.Sprintf("%s#%d", d.Group, n)
		}
	}
	return fmt.Sprintf("%s:%.40q", d.Group, d.Body)
}

func outboxLabels(ds []farm.OutboxDelivery) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = outboxLabel(d)
	}
	return out
}

func outboxSend(t *testing.T, o farm.Outbox, msgs ...farm.OutboxMessage) {
	t.Helper()
	must(t, fmt.Sprintf("send %d messages", len(msgs)), o.Send(ctxFor(t, waitLong), msgs...))
}

// outboxReceiveCall calls Receive and fails the test, instead of hanging
// it, when Receive outlives both wait and ctx by far.
func outboxReceiveCall(ctx context.Context, t *testing.T, o farm.Outbox, max int, wait time.Duration) ([]farm.OutboxDelivery, error) {
	t.Helper()
	type result struct {
		ds  []farm.OutboxDelivery
		err error
	}
	done := make(chan result, 1)
	go func() {
		ds, err := o.Receive(ctx, max, wait)
		done <- result{ds, err}
	}()
	select {
	case r := <-done:
		if r.err == nil {
			checkOutboxBatch(t, r.ds, max)
		}
		return r.ds, r.err
	case <-time.After(wait + waitLong + 10*time.Second):
		t.Fatalf("Receive(%d, %v) has not returned after %v", max, wait, wait+waitLong+10*time.Second)
		return nil, nil
	}
}

// checkOutboxBatch checks what one Receive returned: at most max
// deliveries, each with its own ID and at least one attempt.
func checkOutboxBatch(t *testing.T, ds []farm.OutboxDelivery, max int) {
	t.Helper()
	if len(ds) > max {
		t.Fatalf("Receive(%d) returned %d deliveries: %v", max, len(ds), outboxLabels(ds))
	}
	ids := map[string]bool{}
	for _, d := range ds {
		if d.ID == "" || ids[d.ID] {
			t.Fatalf("Receive returned delivery %s with ID %q, empty or not unique in %v", outboxLabel(d), d.ID, outboxLabels(ds))
		}
		ids[d.ID] = true
		if d.Attempts < 1 {
			t.Fatalf("delivery %s has Attempts %d, want at least 1", outboxLabel(d), d.Attempts)
		}
	}
}

// outboxReceive waits (generously) for deliveries, asking for up to max.
// A Receive may end its wait early (SQS's is in whole seconds), so it
// asks again until something comes.
func outboxReceive(t *testing.T, o farm.Outbox, max int) []farm.OutboxDelivery {
	t.Helper()
	ctx := ctxFor(t, waitLong)
	for {
		ds, err := outboxReceiveCall(ctx, t, o, max, waitLong)
		if ctx.Err() != nil {
			t.Fatalf("nothing received within %v (last Receive: %v)", waitLong, err)
		}
		must(t, "receive", err)
		if len(ds) > 0 {
			return ds
		}
	}
}

// outboxReceiveOne waits for one delivery.
func outboxReceiveOne(t *testing.T, o farm.Outbox) farm.OutboxDelivery {
	t.Helper()
	return outboxReceive(t, o, 1)[0]
}

// outboxReceiveN receives, up to 10 at a time, until it has n deliveries;
// it acks none.
func outboxReceiveN(t *testing.T, o farm.Outbox, n int) []farm.OutboxDelivery {
	t.Helper()
	var got []farm.OutboxDelivery
	for len(got) < n {
		got = append(got, outboxReceive(t, o, min(n-len(got), 10))...)
	}
	return got
}

// outboxReceiveNothing checks that Receive, waiting waitShort, returns
// nothing.
func outboxReceiveNothing(t *testing.T, o farm.Outbox, why string) {
	t.Helper()
	ds, err := outboxReceiveCall(ctxFor(t, waitLong), t, o, 10, waitShort)
	must(t, why+": receive", err)
	if len(ds) > 0 {
		t.Fatalf("%s: received %v (attempts %d), want nothing", why, outboxLabels(ds), ds[0].Attempts)
	}
}

// wantOutbox checks that d delivers m, on attempt attempts.
func wantOutbox(t *testing.T, what string, d farm.OutboxDelivery, m farm.OutboxMessage, attempts int) {
	t.Helper()
	if d.Group != m.Group || !bytes.Equal(d.Body, m.Body) {
		t.Fatalf("%s: got %s, want %s", what, outboxLabel(d), outboxLabel(farm.OutboxDelivery{OutboxMessage: m}))
	}
	if d.Attempts != attempts {
		t.Fatalf("%s: %s has Attempts %d, want %d", what, outboxLabel(d), d.Attempts, attempts)
	}
}

func outboxAck(t *testing.T, o farm.Outbox, ds ...farm.OutboxDelivery) {
	t.Helper()
	for _, d := range ds {
		must(t, "ack "+outboxLabel(d), o.Ack(ctxFor(t, waitLong), d.ID))
	}
}

func outboxStatsNow(t *testing.T, o farm.Outbox) farm.OutboxStats {
	t.Helper()
	st, err := o.Stats(ctxFor(t, waitLong))
	must(t, "stats", err)
	return st
}

// wantOutboxStats checks the counts, and that an empty backlog has no age.
func wantOutboxStats(t *testing.T, o farm.Outbox, what string, backlog, dead int) farm.OutboxStats {
	t.Helper()
	st := outboxStatsNow(t, o)
	if st.Backlog != backlog || st.DeadLetters != dead {
		t.Fatalf("%s: backlog %d, dead letters %d; want %d, %d", what, st.Backlog, st.DeadLetters, backlog, dead)
	}
	if backlog == 0 && st.OldestAge != 0 {
		t.Fatalf("%s: the backlog is empty but OldestAge is %v", what, st.OldestAge)
	}
	return st
}

// wantTimeBetween checks that tm lies between from and to, with a second
// of slack each side (backends keep milliseconds, clocks differ).
func wantTimeBetween(t *testing.T, what string, tm, from, to time.Time) {
	t.Helper()
	if tm.Before(from.Add(-time.Second)) || tm.After(to.Add(time.Second)) {
		t.Fatalf("%s is %v, want between %v and %v", what, tm, from, to)
	}
}

func outboxBasic(t *testing.T, o farm.Outbox) {
	wantOutboxStats(t, o, "empty outbox", 0, 0)
	var m farm.OutboxMessage
	fillAll(&m) // every field, including any added later
	before := time.Now()
	outboxSend(t, o, m)
	after := time.Now()
	wantOutboxStats(t, o, "after send", 1, 0)
	d := outboxReceiveOne(t, o)
	if !reflect.DeepEqual(d.OutboxMessage, m) {
		t.Fatalf("delivered message %+v, want %+v", d.OutboxMessage, m)
	}
	if d.Attempts != 1 {
		t.Fatalf("first delivery has Attempts %d, want 1", d.Attempts)
	}
	wantTimeBetween(t, "SentAt", d.SentAt, before, after)
	wantOutboxStats(t, o, "while in flight", 1, 0)
	outboxAck(t, o, d)
	wantOutboxStats(t, o, "after ack", 0, 0)
	outboxReceiveNothing(t, o, "after ack")
}

// outboxBodies: bodies are bytes, kept whole: every byte value, the
// largest body, text that is not ASCII; two equal messages are two
// messages; the outbox keeps its own copies.
func outboxBodies(t *testing.T, o farm.Outbox) {
	all := make([]byte, 256)
	for i := range all {
		all[i] = byte(i)
	}
	largest := []byte(`{"padding":"` + strings.Repeat("0123456789abcdef", farm.MaxOutboxBody/16))
	largest = append(largest[:farm.MaxOutboxBody-2], '"', '}')
	want := map[string][]byte{
		"bytes":   slices.Clone(all),
		"largest": largest,
		"binary":  []byte("\xff\xfe not UTF-8 \x00\x01"),
		"text":    []byte(`{"é":"日本\u2028 \ud83d\ude00"}` + "\t\r\n"),
	}
	outboxSend(t, o, farm.OutboxMessage{Group: "bytes", Body: all})
	all[0] = 'x' // the outbox holds no reference to the caller's slice
	outboxSend(t, o,
		farm.OutboxMessage{Group: "largest", Body: largest},
		farm.OutboxMessage{Group: "binary", Body: want["binary"]},
		farm.OutboxMessage{Group: "text", Body: want["text"]},
		farm.OutboxMessage{Group: "twice", Body: []byte("same")},
		farm.OutboxMessage{Group: "twice", Body: []byte("same")},
	)
	wantOutboxStats(t, o, "after sending 6", 6, 0)
	twice, retried := 0, false
	for done := 0; done < 6; {
		for _, d := range outboxReceive(t, o, 10) {
			switch {
			case d.Group == "twice":
				if string(d.Body) != "same" {
					t.Fatalf("group twice delivered %q", d.Body)
				}
				twice++
			case !bytes.Equal(d.Body, want[d.Group]):
				t.Fatalf("group %s delivered %d bytes %.40q, want %d bytes %.40q", d.Group, len(d.Body), d.Body, len(want[d.Group]), want[d.Group])
			case d.Group == "bytes" && !retried:
				// Changing a delivered body changes nothing kept.
				d.Body[1] = 'y'
				must(t, "retry", o.Retry(ctxFor(t, waitLong), d.ID, 0))
				retried = true
				continue
			}
			outboxAck(t, o, d)
			done++
		}
	}
	if twice != 2 {
		t.Fatalf("two equal messages of group twice delivered %d times, want 2", twice)
	}
	wantOutboxStats(t, o, "after acking all", 0, 0)
}

// outboxInvalid: a Send with one invalid message stores none of them;
// Receive of fewer than one message is invalid.
func outboxInvalid(t *testing.T, o farm.Outbox) {
	ctx := ctxFor(t, waitLong)
	ok := outboxMsg("ok", 1)
	for _, tc := range []struct {
		name string
		msg  farm.OutboxMessage
	}{
		{"no group", farm.OutboxMessage{Body: []byte("x")}},
		{"a group over 128 bytes", farm.OutboxMessage{Group: strings.Repeat("g", 129), Body: []byte("x")}},
		{"no body", farm.OutboxMessage{Group: "g"}},
		{"a body over MaxOutboxBody", farm.OutboxMessage{Group: "g", Body: bytes.Repeat([]byte("x"), farm.MaxOutboxBody+1)}},
	} {
		wantErrIs(t, "send a message with "+tc.name, o.Send(ctx, ok, tc.msg), farm.ErrInvalid)
	}
	wantOutboxStats(t, o, "after refused sends", 0, 0)
	outboxReceiveNothing(t, o, "after refused sends")
	_, err := o.Receive(ctx, 0, 0)
	wantErrIs(t, "receive 0 messages", err, farm.ErrInvalid)
	// The longest group is valid.
	long := outboxMsg(strings.Repeat("g", 128), 1)
	outboxSend(t, o, long)
	d := outboxReceiveOne(t, o)
	wantOutbox(t, "message of the longest group", d, long, 1)
	outboxAck(t, o, d)
}

// outboxOrderOneAtATime: a group's messages come in the order sent,
// whether sent alone or together, among other groups' messages.
func outboxOrderOneAtATime(t *testing.T, o farm.Outbox) {
	outboxSend(t, o, outboxMsg("a", 1))
	outboxSend(t, o, outboxMsg("b", 1), outboxMsg("a", 2))
	outboxSend(t, o, outboxMsg("a", 3), outboxMsg("a", 4), outboxMsg("b", 2))
	outboxSend(t, o, outboxMsg("b", 3))
	got := map[string][]string{}
	for range 7 {
		d := outboxReceiveOne(t, o)
		got[d.Group] = append(got[d.Group], outboxLabel(d))
		outboxAck(t, o, d)
	}
	want := map[string][]string{"a": {"a#1", "a#2", "a#3", "a#4"}, "b": {"b#1", "b#2", "b#3"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("delivered in the order %v, want %v", got, want)
	}
	outboxReceiveNothing(t, o, "all acked")
}

// outboxOrderInBatches: Receive of up to 10 keeps each group's order
// within a batch and across batches.
func outboxOrderInBatches(t *testing.T, o farm.Outbox) {
	var msgs []farm.OutboxMessage
	for n := 1; n <= 6; n++ {
		msgs = append(msgs, outboxMsg("a", n), outboxMsg("b", n), outboxMsg("c", n))
	}
	outboxSend(t, o, msgs...)
	got := map[string][]string{}
	for seen := 0; seen < len(msgs); {
		ds := outboxReceive(t, o, 10)
		for _, d := range ds {
			got[d.Group] = append(got[d.Group], outboxLabel(d))
		}
		outboxAck(t, o, ds...) // in the order received
		seen += len(ds)
	}
	for _, g := range []string{"a", "b", "c"} {
		want := []string{g + "#1", g + "#2", g + "#3", g + "#4", g + "#5", g + "#6"}
		if !slices.Equal(got[g], want) {
			t.Fatalf("group %s delivered in the order %v, want %v", g, got[g], want)
		}
	}
	wantOutboxStats(t, o, "after acking all", 0, 0)
}

// outboxInFlightHolds: while a group's message is in flight, its later
// messages are held back; other groups are not.
func outboxInFlightHolds(t *testing.T, o farm.Outbox) {
	outboxSend(t, o, outboxMsg("a", 1), outboxMsg("a", 2), outboxMsg("b", 1))
	var a1, b1 farm.OutboxDelivery
	for a1.ID == "" || b1.ID == "" {
		d := outboxReceiveOne(t, o)
		switch outboxLabel(d) {
		case "a#1":
			a1 = d
		case "b#1":
			b1 = d
		default:
			t.Fatalf("received %s while a#1 or b#1 was outstanding", outboxLabel(d))
		}
	}
	outboxReceiveNothing(t, o, "a#1 is in flight")
	outboxAck(t, o, b1)
	outboxReceiveNothing(t, o, "a#1 is still in flight after b#1's ack")
	outboxAck(t, o, a1)
	d := outboxReceiveOne(t, o)
	wantOutbox(t, "after a#1's ack", d, outboxMsg("a", 2), 1)
	outboxAck(t, o, d)
	wantOutboxStats(t, o, "after acking all", 0, 0)
}

// outboxBatchHolds: when one Receive hands out several messages of a
// group, the group is held while any of them is in flight, and a retried
// one holds back those after it.
func outboxBatchHolds(t *testing.T, o farm.Outbox) {
	outboxSend(t, o, outboxMsg("a", 1), outboxMsg("a", 2), outboxMsg("a", 3))
	ds := outboxReceive(t, o, 2)
	if len(ds) == 1 { // this driver hands out a group's messages one at a time
		wantOutbox(t, "first delivery", ds[0], outboxMsg("a", 1), 1)
		return
	}
	if got := outboxLabels(ds); !slices.Equal(got, []string{"a#1", "a#2"}) {
		t.Fatalf("Receive(2) returned %v, want a#1 and a#2", got)
	}
	outboxAck(t, o, ds[0])
	outboxReceiveNothing(t, o, "a#2 is still in flight")
	must(t, "retry a#2", o.Retry(ctxFor(t, waitLong), ds[1].ID, 0))
	ds = outboxReceive(t, o, 2)
	if got := outboxLabels(ds); !slices.Equal(got, []string{"a#2", "a#3"}) || ds[0].Attempts != 2 {
		t.Fatalf("after a#2's retry, Receive(2) returned %v (a#2 on attempt %d), want a#2 on attempt 2 and a#3", got, ds[0].Attempts)
	}
	ctx := ctxFor(t, waitLong)
	must(t, "retry a#2 at once", o.Retry(ctx, ds[0].ID, 0))
	must(t, "retry a#3 in 10 minutes", o.Retry(ctx, ds[1].ID, 10*time.Minute))
	ds = outboxReceive(t, o, 10)
	if got := outboxLabels(ds); !slices.Equal(got, []string{"a#2"}) {
		t.Fatalf("with a#3 waiting 10 minutes, Receive returned %v, want a#2 alone", got)
	}
	outboxAck(t, o, ds[0])
	outboxReceiveNothing(t, o, "a#3 waits 10 minutes")
}

// outboxRetryKeepsPlace: a retried message is its group's first again.
func outboxRetryKeepsPlace(t *testing.T, o farm.Outbox) {
	outboxSend(t, o, outboxMsg("a", 1), outboxMsg("a", 2))
	d1 := outboxReceiveOne(t, o)
	wantOutbox(t, "first delivery", d1, outboxMsg("a", 1), 1)
	must(t, "retry", o.Retry(ctxFor(t, waitLong), d1.ID, 0))
	d2 := outboxReceiveOne(t, o)
	wantOutbox(t, "after retry", d2, outboxMsg("a", 1), 2)
	if d2.ID == d1.ID {
		t.Fatalf("the retried delivery reuses ID %q", d1.ID)
	}
	if !d2.SentAt.Equal(d1.SentAt) {
		t.Fatalf("the retried delivery has SentAt %v, the first %v", d2.SentAt, d1.SentAt)
	}
	outboxReceiveNothing(t, o, "a#1 is in flight again")
	outboxAck(t, o, d2)
	d3 := outboxReceiveOne(t, o)
	wantOutbox(t, "after a#1's ack", d3, outboxMsg("a", 2), 1)
	outboxAck(t, o, d3)
}

// outboxRetryDelay: a retried message comes back no sooner than asked,
// its group waiting for it.
func outboxRetryDelay(t *testing.T, o farm.Outbox) {
	outboxSend(t, o, outboxMsg("a", 1), outboxMsg("a", 2))
	d1 := outboxReceiveOne(t, o)
	const delay = 600 * time.Millisecond
	retried := time.Now()
	must(t, "retry", o.Retry(ctxFor(t, waitLong), d1.ID, delay))
	wantOutboxStats(t, o, "while a#1 waits out its delay", 2, 0)
	outboxReceiveNothing(t, o, "a#1 waits out its delay and a#2 waits for it")
	d2 := outboxReceiveOne(t, o)
	if waited := time.Since(retried); waited < delay {
		t.Fatalf("the message retried after %v came back after %v", delay, waited)
	}
	wantOutbox(t, "after the delay", d2, outboxMsg("a", 1), 2)
	outboxAck(t, o, d2)
	d3 := outboxReceiveOne(t, o)
	wantOutbox(t, "after a#1's ack", d3, outboxMsg("a", 2), 1)
	outboxAck(t, o, d3)
}

// outboxGroupsIndependent: a group whose first message is in flight,
// waiting out a long Retry, or dead-lettered holds back no other group.
func outboxGroupsIndependent(t *testing.T, o farm.Outbox) {
	outboxSend(t, o,
		outboxMsg("flying", 1), outboxMsg("flying", 2),
		outboxMsg("later", 1), outboxMsg("later", 2),
		outboxMsg("dead", 1), outboxMsg("dead", 2),
		outboxMsg("free", 1),
	)
	heads := map[string]farm.OutboxDelivery{}
	for range 4 {
		d := outboxReceiveOne(t, o)
		if _, dup := heads[d.Group]; dup || outboxLabel(d) != d.Group+"#1" {
			t.Fatalf("received %s after %v, want each group's first message once", outboxLabel(d), slices.Sorted(mapKeys(heads)))
		}
		heads[d.Group] = d
	}
	ctx := ctxFor(t, waitLong)
	must(t, "retry later#1 in 10 minutes", o.Retry(ctx, heads["later"].ID, 10*time.Minute))
	must(t, "dead-letter dead#1", o.DeadLetter(ctx, heads["dead"].ID, "refused"))
	outboxAck(t, o, heads["free"])
	d := outboxReceiveOne(t, o)
	wantOutbox(t, "with flying#1 in flight and later#1 waiting", d, outboxMsg("dead", 2), 1)
	outboxAck(t, o, d)
	outboxReceiveNothing(t, o, "flying#1 is in flight and later#1 waits 10 minutes")
	outboxAck(t, o, heads["flying"])
	d = outboxReceiveOne(t, o)
	wantOutbox(t, "after flying#1's ack", d, outboxMsg("flying", 2), 1)
	outboxAck(t, o, d)
	wantOutboxStats(t, o, "later#1 and later#2 left", 2, 1)
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// outboxVisibilityTimeout: a delivery left unfinished comes back after
// the driver's visibility timeout, still its group's first; its old ID is
// then finished.
func outboxVisibilityTimeout(t *testing.T, o farm.Outbox) {
	outboxSend(t, o, outboxMsg("a", 1), outboxMsg("a", 2))
	d1 := outboxReceiveOne(t, o) // and never finished
	d2 := outboxReceiveOne(t, o) // after the visibility timeout
	wantOutbox(t, "after the visibility timeout", d2, outboxMsg("a", 1), 2)
	if d2.ID == d1.ID {
		t.Fatalf("the redelivery reuses ID %q", d1.ID)
	}
	ctx := ctxFor(t, waitLong)
	wantErrIs(t, "ack the timed-out delivery", o.Ack(ctx, d1.ID), farm.ErrNotFound)
	wantErrIs(t, "retry the timed-out delivery", o.Retry(ctx, d1.ID, 0), farm.ErrNotFound)
	wantErrIs(t, "dead-letter the timed-out delivery", o.DeadLetter(ctx, d1.ID, "late"), farm.ErrNotFound)
	wantOutboxStats(t, o, "after calls with the timed-out ID", 2, 0)
	outboxReceiveNothing(t, o, "the redelivery is in flight")
	outboxAck(t, o, d2)
	d3 := outboxReceiveOne(t, o)
	wantOutbox(t, "after a#1's ack", d3, outboxMsg("a", 2), 1)
	outboxAck(t, o, d3)
}

// outboxDeadLetter: a dead-lettered message leaves the backlog for the
// dead letters, and its group goes on.
func outboxDeadLetter(t *testing.T, o farm.Outbox, caps OutboxCaps) {
	outboxSend(t, o, outboxMsg("a", 1), outboxMsg("a", 2))
	before := time.Now()
	d1 := outboxReceiveOne(t, o)
	must(t, "dead-letter", o.DeadLetter(ctxFor(t, waitLong), d1.ID, "PuppetDB answered 400: command is invalid"))
	after := time.Now()
	wantOutboxStats(t, o, "after dead-lettering a#1", 1, 1)
	d2 := outboxReceiveOne(t, o)
	wantOutbox(t, "after a#1 was set aside", d2, outboxMsg("a", 2), 1)
	outboxAck(t, o, d2)
	wantOutboxStats(t, o, "after acking a#2", 0, 1)
	wantErrIs(t, "ack a dead-lettered delivery", o.Ack(ctxFor(t, waitLong), d1.ID), farm.ErrNotFound)
	if !caps.ListsDeadLetters {
		return
	}
	dead := listDeadLetters(t, o, 10)
	if len(dead) != 1 {
		t.Fatalf("%d dead letters listed, want 1", len(dead))
	}
	wantDeadLetter(t, dead[0], d1, "PuppetDB answered 400: command is invalid", before, after)
}

func listDeadLetters(t *testing.T, o farm.Outbox, max int) []farm.OutboxDeadLetter {
	t.Helper()
	l, ok := o.(outboxDeadLetters)
	if !ok {
		t.Fatalf("%T has no DeadLetters method, though its caps say it lists dead letters", o)
	}
	dead, err := l.DeadLetters(ctxFor(t, waitLong), max)
	must(t, "list dead letters", err)
	return dead
}

// wantDeadLetter checks that dl is delivery d set aside between from and
// to with reason.
func wantDeadLetter(t *testing.T, dl farm.OutboxDeadLetter, d farm.OutboxDelivery, reason string, from, to time.Time) {
	t.Helper()
	if dl.Group != d.Group || !bytes.Equal(dl.Body, d.Body) {
		t.Fatalf("dead letter of group %s, body %.40q; want %s", dl.Group, dl.Body, outboxLabel(d))
	}
	if want := farm.OutboxReason(reason); dl.Reason != want {
		t.Fatalf("dead letter %s has reason %.60q, want %.60q", outboxLabel(d), dl.Reason, want)
	}
	if !dl.SentAt.Equal(d.SentAt) || dl.Attempts != d.Attempts {
		t.Fatalf("dead letter %s was sent at %v after %d attempts, want %v and %d", outboxLabel(d), dl.SentAt, dl.Attempts, d.SentAt, d.Attempts)
	}
	wantTimeBetween(t, "dead letter's At", dl.At, from, to)
}

// outboxDeadLettersListed: DeadLetters lists what was set aside, in that
// order, with the reason as farm.OutboxReason keeps it; it returns copies.
func outboxDeadLettersListed(t *testing.T, o farm.Outbox) {
	ctx := ctxFor(t, waitLong)
	dl := listDeadLetters(t, o, 10)
	if len(dl) != 0 {
		t.Fatalf("an empty outbox lists %d dead letters", len(dl))
	}
	_, err := o.(outboxDeadLetters).DeadLetters(ctx, 0)
	wantErrIs(t, "list 0 dead letters", err, farm.ErrInvalid)
	bin := farm.OutboxMessage{Group: "bin", Body: []byte("\x00\xff binary")}
	outboxSend(t, o, bin, outboxMsg("b", 1), outboxMsg("c", 1))
	ds := outboxReceiveN(t, o, 3)
	slices.SortFunc(ds, func(x, y farm.OutboxDelivery) int { return strings.Compare(x.Group, y.Group) })
	long := "line 1\nline 2\x00" + strings.Repeat("ü", farm.MaxOutboxReason)
	reasons := []string{long, "", "refused"}
	before := time.Now()
	for i, d := range ds[:2] {
		must(t, "dead-letter "+outboxLabel(d), o.DeadLetter(ctx, d.ID, reasons[i]))
		time.Sleep(10 * time.Millisecond) // distinct At
	}
	after := time.Now()
	outboxAck(t, o, ds[2])
	dl = listDeadLetters(t, o, 10)
	if len(dl) != 2 {
		t.Fatalf("%d dead letters listed, want 2", len(dl))
	}
	for i := range dl {
		wantDeadLetter(t, dl[i], ds[i], reasons[i], before, after)
	}
	if !dl[0].At.Before(dl[1].At) {
		t.Fatalf("dead letters listed at %v then %v, want in the order set aside", dl[0].At, dl[1].At)
	}
	dl[0].Body[0] = 'x'
	first := listDeadLetters(t, o, 1)
	if len(first) != 1 || !bytes.Equal(first[0].Body, ds[0].Body) {
		t.Fatalf("DeadLetters(1) listed %d dead letters %+v; want 1, %s unchanged", len(first), first, outboxLabel(ds[0]))
	}
}

// outboxFinishedNotFound: Ack, Retry and DeadLetter of a finished or
// unknown delivery are ErrNotFound and change nothing.
func outboxFinishedNotFound(t *testing.T, o farm.Outbox) {
	ctx := ctxFor(t, waitLong)
	outboxSend(t, o, outboxMsg("a", 1))
	acked := outboxReceiveOne(t, o)
	outboxAck(t, o, acked)
	outboxSend(t, o, outboxMsg("b", 1))
	retried := outboxReceiveOne(t, o)
	must(t, "retry b#1 in 10 minutes", o.Retry(ctx, retried.ID, 10*time.Minute))
	outboxSend(t, o, outboxMsg("c", 1))
	dead := outboxReceiveOne(t, o)
	must(t, "dead-letter c#1", o.DeadLetter(ctx, dead.ID, "refused"))
	for what, id := range map[string]string{"acked": acked.ID, "retried": retried.ID, "dead-lettered": dead.ID, "unknown": "no-such-delivery", "empty": ""} {
		wantErrIs(t, "ack an "+what+" delivery", o.Ack(ctx, id), farm.ErrNotFound)
		wantErrIs(t, "retry an "+what+" delivery", o.Retry(ctx, id, 0), farm.ErrNotFound)
		wantErrIs(t, "dead-letter an "+what+" delivery", o.DeadLetter(ctx, id, "again"), farm.ErrNotFound)
	}
	wantOutboxStats(t, o, "after calls with finished IDs", 1, 1)
	outboxReceiveNothing(t, o, "b#1 waits 10 minutes")
}

func outboxStats(t *testing.T, o farm.Outbox, caps OutboxCaps) {
	wantOutboxStats(t, o, "empty outbox", 0, 0)
	before := time.Now()
	outboxSend(t, o, outboxMsg("a", 1))
	const pause = 200 * time.Millisecond
	time.Sleep(pause) // a#1 is the oldest by this much at least
	outboxSend(t, o, outboxMsg("b", 1), outboxMsg("c", 1))
	wantAge := func(st farm.OutboxStats, what string) {
		t.Helper()
		if caps.NoOldestAge {
			if st.OldestAge != 0 {
				t.Fatalf("%s: OldestAge %v from a driver that reports none", what, st.OldestAge)
			}
			return
		}
		if most := time.Since(before) + time.Second; st.OldestAge < pause || st.OldestAge > most {
			t.Fatalf("%s: OldestAge %v, want between %v and %v (a#1's age)", what, st.OldestAge, pause, most)
		}
	}
	wantAge(wantOutboxStats(t, o, "three waiting", 3, 0), "three waiting")
	ds := outboxReceiveN(t, o, 3)
	wantAge(wantOutboxStats(t, o, "three in flight", 3, 0), "three in flight")
	slices.SortFunc(ds, func(x, y farm.OutboxDelivery) int { return strings.Compare(x.Group, y.Group) })
	ctx := ctxFor(t, waitLong)
	must(t, "retry a#1 in 10 minutes", o.Retry(ctx, ds[0].ID, 10*time.Minute))
	must(t, "dead-letter b#1", o.DeadLetter(ctx, ds[1].ID, "refused"))
	outboxAck(t, o, ds[2])
	wantAge(wantOutboxStats(t, o, "a#1 retried, b#1 set aside, c#1 acked", 1, 1), "a#1 retried")
}

// outboxWakes: Receive without a wait returns at once; a waiting Receive
// gets a message sent while it waits.
func outboxWakes(t *testing.T, o farm.Outbox) {
	ds, err := outboxReceiveCall(ctxFor(t, waitLong), t, o, 1, 0)
	must(t, "receive without waiting", err)
	if len(ds) != 0 {
		t.Fatalf("an empty outbox delivered %v", outboxLabels(ds))
	}
	got := make(chan farm.OutboxDelivery, 1)
	errc := make(chan error, 1)
	ctx := ctxFor(t, waitLong)
	go func() {
		for ctx.Err() == nil {
			ds, err := o.Receive(ctx, 1, waitLong)
			if err != nil {
				errc <- err
				return
			}
			if len(ds) > 0 {
				got <- ds[0]
				return
			}
		}
	}()
	time.Sleep(100 * time.Millisecond) // let the receiver wait
	outboxSend(t, o, outboxMsg("wake", 1))
	select {
	case d := <-got:
		wantOutbox(t, "received by a waiting Receive", d, outboxMsg("wake", 1), 1)
		outboxAck(t, o, d)
	case err := <-errc:
		t.Fatalf("waiting receive: %v", err)
	case <-time.After(waitLong):
		t.Fatal("a Receive waiting on an empty outbox never got the message sent later")
	}
}

// outboxCancel: a Receive whose ctx ends returns its error and loses
// nothing.
func outboxCancel(t *testing.T, o farm.Outbox) {
	t.Run("AlreadyCancelled", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, err := outboxReceiveCall(ctx, t, o, 1, waitLong)
		wantErrIs(t, "receive with a cancelled context", err, context.Canceled)
	})
	t.Run("CancelledWhileWaiting", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			_, err := o.Receive(ctx, 1, waitLong)
			done <- err
		}()
		time.Sleep(50 * time.Millisecond)
		cancel()
		select {
		case err := <-done:
			wantErrIs(t, "receive cancelled while waiting", err, context.Canceled)
		case <-time.After(waitLong):
			t.Fatal("Receive did not return after its context was cancelled")
		}
	})
	t.Run("DeadlineBeforeWait", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), waitShort)
		defer cancel()
		_, err := outboxReceiveCall(ctx, t, o, 1, waitLong)
		wantErrIs(t, "receive whose deadline comes before its wait ends", err, context.DeadlineExceeded)
	})
	t.Run("NothingLost", func(t *testing.T) {
		outboxSend(t, o, outboxMsg("after-cancel", 1))
		d := outboxReceiveOne(t, o)
		if outboxLabel(d) != "after-cancel#1" {
			t.Fatalf("received %s, want after-cancel#1", outboxLabel(d))
		}
		outboxAck(t, o, d)
		wantOutboxStats(t, o, "after ack", 0, 0)
	})
}

// outboxEndedContext: a call whose ctx has ended returns its error and
// changes nothing.
func outboxEndedContext(t *testing.T, o farm.Outbox) {
	outboxSend(t, o, outboxMsg("a", 1))
	d := outboxReceiveOne(t, o)
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	wantErrIs(t, "send with an ended context", o.Send(ended, outboxMsg("b", 1)), context.Canceled)
	wantErrIs(t, "ack with an ended context", o.Ack(ended, d.ID), context.Canceled)
	wantErrIs(t, "retry with an ended context", o.Retry(ended, d.ID, 0), context.Canceled)
	wantErrIs(t, "dead-letter with an ended context", o.DeadLetter(ended, d.ID, "x"), context.Canceled)
	_, err := o.Stats(ended)
	wantErrIs(t, "stats with an ended context", err, context.Canceled)
	wantOutboxStats(t, o, "after calls with an ended context", 1, 0)
	outboxReceiveNothing(t, o, "a#1 is still in flight and b#1 was not sent")
	outboxAck(t, o, d)
	wantOutboxStats(t, o, "after ack", 0, 0)
}

// outboxConcurrent: receivers working at once never hold one group
// together, and each group is delivered once, in order.
func outboxConcurrent(t *testing.T, o farm.Outbox) {
	const groups, each, receivers = 6, 8, 4
	for n := 1; n <= each; n++ {
		var round []farm.OutboxMessage
		for g := range groups {
			round = append(round, outboxMsg(fmt.Sprintf("g%d", g), n))
		}
		outboxSend(t, o, round...)
	}
	ctx := ctxFor(t, 4*waitLong)
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	var (
		mu     sync.Mutex
		holder = map[string]int{}      // group → the receiver holding it
		got    = map[string][]string{} // group → labels, in delivery order
		total  int
	)
	errc := make(chan error, receivers)
	fail := func(err error) { // the first error of each receiver is enough
		select {
		case errc <- err:
		default:
		}
	}
	var wg sync.WaitGroup
	for r := range receivers {
		wg.Go(func() {
			for {
				ds, err := o.Receive(rctx, 1+r%3, time.Second)
				if err != nil {
					if rctx.Err() == nil {
						fail(fmt.Errorf("receiver %d: receive: %w", r, err))
					}
					return
				}
				mu.Lock()
				left := map[string]int{} // deliveries of each group in this batch not yet acked
				for _, d := range ds {
					if h, held := holder[d.Group]; held && h != r {
						fail(fmt.Errorf("receiver %d got %s while receiver %d holds its group", r, outboxLabel(d), h))
					}
					holder[d.Group] = r
					left[d.Group]++
					got[d.Group] = append(got[d.Group], outboxLabel(d))
				}
				total += len(ds)
				if total >= groups*each {
					stop()
				}
				mu.Unlock()
				time.Sleep(2 * time.Millisecond) // hold the groups a moment
				for _, d := range ds {
					mu.Lock()
					if left[d.Group]--; left[d.Group] == 0 {
						delete(holder, d.Group) // before the ack: once acked, another may take the group
					}
					mu.Unlock()
					if err := o.Ack(ctx, d.ID); err != nil {
						fail(fmt.Errorf("receiver %d: ack %s: %w", r, outboxLabel(d), err))
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	for g := range groups {
		group := fmt.Sprintf("g%d", g)
		var want []string
		for n := 1; n <= each; n++ {
			want = append(want, fmt.Sprintf("%s#%d", group, n))
		}
		if !slices.Equal(got[group], want) {
			t.Fatalf("group %s delivered as %v, want %v", group, got[group], want)
		}
	}
	wantOutboxStats(t, o, "after acking all", 0, 0)
}

// outboxReopen: after a restart, every unfinished message is there in its
// group's order (in-flight ones received again), retried ones still wait
// out their delay, finished ones are gone and dead letters still counted.
func outboxReopen(t *testing.T, o farm.Outbox, caps OutboxCaps) {
	outboxSend(t, o,
		outboxMsg("acked", 1), outboxMsg("acked", 2), outboxMsg("acked", 3),
		outboxMsg("later", 1),
		outboxMsg("dead", 1), outboxMsg("dead", 2),
		outboxMsg("flying", 1),
	)
	heads := map[string]farm.OutboxDelivery{}
	for range 4 {
		d := outboxReceiveOne(t, o)
		heads[d.Group] = d
	}
	ctx := ctxFor(t, waitLong)
	outboxAck(t, o, heads["acked"])
	must(t, "retry later#1 in 10 minutes", o.Retry(ctx, heads["later"].ID, 10*time.Minute))
	must(t, "dead-letter dead#1", o.DeadLetter(ctx, heads["dead"].ID, "refused"))
	// flying#1 stays in flight.
	o = caps.Reopen(t, o)
	wantOutboxStats(t, o, "after reopening", 5, 1)
	got := map[string]farm.OutboxDelivery{}
	for range 3 { // one at a time: acked#3 waits for acked#2
		d := outboxReceiveOne(t, o)
		got[outboxLabel(d)] = d
	}
	for label, attempts := range map[string]int{"acked#2": 1, "dead#2": 1, "flying#1": 2} {
		d, ok := got[label]
		if !ok {
			t.Fatalf("after reopening, received %v; want acked#2, dead#2 and flying#1", slices.Sorted(mapKeys(got)))
		}
		if d.Attempts != attempts {
			t.Fatalf("after reopening, %s has Attempts %d, want %d", label, d.Attempts, attempts)
		}
		outboxAck(t, o, d)
	}
	d := outboxReceiveOne(t, o)
	wantOutbox(t, "after acking acked#2", d, outboxMsg("acked", 3), 1)
	outboxAck(t, o, d)
	outboxReceiveNothing(t, o, "later#1 waits out its 10 minutes across the restart")
	wantOutboxStats(t, o, "later#1 left", 1, 1)
	if caps.ListsDeadLetters {
		dl := listDeadLetters(t, o, 10)
		if len(dl) != 1 || outboxLabel(farm.OutboxDelivery{OutboxMessage: dl[0].OutboxMessage}) != "dead#1" || dl[0].Reason != "refused" {
			t.Fatalf("after reopening, dead letters %+v, want dead#1 refused", dl)
		}
	}
}

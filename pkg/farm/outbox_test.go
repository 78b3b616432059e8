package farm

import (
	"context"
	"strings"
	"testing"
	"time"
)

func TestOutboxChecks(t *testing.T) {
	ctx := context.Background()
	ok := OutboxMessage{Group: "web01.example.com", Body: []byte(`{"command":"replace facts"}`)}
	runChecks(t, []checkCase{
		{"send", CheckOutboxSend(ctx, []OutboxMessage{ok, ok}), nil, ""},
		{"send nothing", CheckOutboxSend(ctx, nil), nil, ""},
		{"send, ended", CheckOutboxSend(ended(), []OutboxMessage{ok}), context.Canceled, "send 1 outbox messages: context canceled"},
		{"send, no group", CheckOutboxSend(ctx, []OutboxMessage{ok, {Body: []byte("x")}}), ErrInvalid, `send outbox message 2 of 2: outbox message group "" must be 1 to 128 bytes: invalid`},
		{"send, long group", CheckOutboxSend(ctx, []OutboxMessage{{Group: strings.Repeat("g", 129), Body: []byte("x")}}), ErrInvalid, ""},
		{"send, longest group", CheckOutboxSend(ctx, []OutboxMessage{{Group: strings.Repeat("g", 128), Body: []byte("x")}}), nil, ""},
		{"send, empty body", CheckOutboxSend(ctx, []OutboxMessage{{Group: "g"}}), ErrInvalid, "send outbox message 1 of 1: outbox message for g is empty: invalid"},
		{"send, largest body", CheckOutboxSend(ctx, []OutboxMessage{{Group: "g", Body: make([]byte, MaxOutboxBody)}}), nil, ""},
		{"send, body too large", CheckOutboxSend(ctx, []OutboxMessage{{Group: "g", Body: make([]byte, MaxOutboxBody+1)}}), ErrInvalid, ""},
		{"receive", CheckOutboxReceive(ctx, 1), nil, ""},
		{"receive, ended", CheckOutboxReceive(ended(), 10), context.Canceled, "receive outbox messages: context canceled"},
		{"receive, none asked", CheckOutboxReceive(ctx, 0), ErrInvalid, "receive 0 outbox messages: ask for at least 1: invalid"},
		{"ack", CheckOutboxAck(ctx, "d1"), nil, ""},
		{"ack, ended", CheckOutboxAck(ended(), "d1"), context.Canceled, "ack outbox delivery d1: context canceled"},
		{"ack, no ID", CheckOutboxAck(ctx, ""), ErrNotFound, "ack outbox delivery: no delivery ID: not found"},
		{"retry", CheckOutboxRetry(ctx, "d1", time.Minute), nil, ""},
		{"retry, negative delay", CheckOutboxRetry(ctx, "d1", -time.Minute), nil, ""},
		{"retry, ended", CheckOutboxRetry(ended(), "d1", 0), context.Canceled, ""},
		{"retry, no ID", CheckOutboxRetry(ctx, "", 0), ErrNotFound, ""},
		{"dead-letter", CheckOutboxDeadLetter(ctx, "d1", ""), nil, ""},
		{"dead-letter, ended", CheckOutboxDeadLetter(ended(), "d1", "refused"), context.Canceled, "dead-letter outbox delivery d1: context canceled"},
		{"dead-letter, no ID", CheckOutboxDeadLetter(ctx, "", "refused"), ErrNotFound, ""},
		{"stats", CheckOutboxStats(ctx), nil, ""},
		{"stats, ended", CheckOutboxStats(ended()), context.Canceled, "outbox stats: context canceled"},
		{"dead letters", CheckOutboxDeadLetters(ctx, 1), nil, ""},
		{"dead letters, ended", CheckOutboxDeadLetters(ended(), 1), context.Canceled, ""},
		{"dead letters, none asked", CheckOutboxDeadLetters(ctx, 0), ErrInvalid, ""},
	})
}

func TestOutboxReason(t *testing.T) {
	long := strings.Repeat("é", MaxOutboxReason) // 2 bytes each
	for _, tc := range []struct {
		name, in, want string
	}{
		{"plain", "PuppetDB answered 400: bad command", "PuppetDB answered 400: bad command"},
		{"empty", "", ""},
		{"lines kept", "a\tb\r\nc", "a\tb\r\nc"},
		{"control characters", "a\x00b\x1bc", "a\uFFFDb\uFFFDc"},
		{"invalid UTF-8", "a\xffb", "a\uFFFDb"},
		{"noncharacters", "a\uFFFEb\uFFFF", "a\uFFFDb\uFFFD"},
		{"cut at a character", "x" + long, "x" + long[:MaxOutboxReason-2]},
		{"longest kept", long[:MaxOutboxReason], long[:MaxOutboxReason]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := OutboxReason(tc.in)
			if got != tc.want {
				t.Fatalf("OutboxReason(%.40q) = %.40q (%d bytes), want %.40q (%d bytes)", tc.in, got, len(got), tc.want, len(tc.want))
			}
			if len(got) > MaxOutboxReason {
				t.Fatalf("OutboxReason kept %d bytes, over %d", len(got), MaxOutboxReason)
			}
		})
	}
}

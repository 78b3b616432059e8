package broker

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/compilefarm/compilefarm/internal/pcpclients"
	"github.com/compilefarm/compilefarm/pkg/farm"
	"github.com/compilefarm/compilefarm/pkg/memstore"
	"github.com/compilefarm/compilefarm/pkg/pcp/message"
)

// countingStore counts the calls a broker makes to a presence store (each
// one a DynamoDB request with pkg/dynamostate), by method and URI. While
// frozen it writes nothing (a task that stopped without shutting down).
type countingStore struct {
	farm.PresenceStore

	mu     sync.Mutex
	calls  map[string]int // "Set pcp://...", "Lookup pcp://...", "Clear ...", "Query <type>"
	frozen bool
}

func newCounting(s farm.PresenceStore) *countingStore {
	return &countingStore{PresenceStore: s, calls: map[string]int{}}
}

func (c *countingStore) count(key string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls[key]++
	return c.frozen
}

func (c *countingStore) SetPresence(ctx context.Context, p farm.Presence) error {
	if c.count("Set " + p.URI) {
		return nil
	}
	return c.PresenceStore.SetPresence(ctx, p)
}

func (c *countingStore) ClearPresence(ctx context.Context, uri, task string) error {
	if c.count("Clear " + uri) {
		return nil
	}
	return c.PresenceStore.ClearPresence(ctx, uri, task)
}

func (c *countingStore) LookupPresence(ctx context.Context, uri string) (farm.Presence, error) {
	c.count("Lookup " + uri)
	return c.PresenceStore.LookupPresence(ctx, uri)
}

func (c *countingStore) QueryPresence(ctx context.Context, q farm.PresenceQuery) (farm.PresencePage, error) {
	c.count("Query " + q.ClientType)
	return c.PresenceStore.QueryPresence(ctx, q)
}

func (c *countingStore) freeze() {
	c.mu.Lock()
	c.frozen = true
	c.mu.Unlock()
}

// n returns how many calls were counted whose key has prefix (a method,
// or a method and URI) and, when suffix is set, that suffix.
func (c *countingStore) n(prefix, suffix string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	total := 0
	for k, v := range c.calls {
		if strings.HasPrefix(k, prefix) && strings.HasSuffix(k, suffix) {
			total += v
		}
	}
	return total
}

// of returns how many calls of key ("Set pcp://n/agent") were counted.
func (c *countingStore) of(key string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls[key]
}

// clientWrites is the number of SetPresence calls for client records (not
// heartbeats).
func (c *countingStore) clientWrites() int {
	return c.n("Set ", "") - c.n("Set ", "/"+TaskClientType)
}

// newStoreBroker returns a broker on store (through a counting wrapper)
// without Run: no heartbeat, no sweep; tests drive refreshDue and
// taskAliveAt themselves.
func newStoreBroker(t *testing.T, name string, store *memstore.Store, o Options) (*Broker, *countingStore) {
	t.Helper()
	cs := newCounting(store)
	o.Name, o.Presence, o.Inbox, o.Log = name, cs, store, testLog()
	b, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	return b, cs
}

// heartbeatOf writes task's heartbeat record, expiring at expires.
func heartbeatOf(t *testing.T, store farm.PresenceStore, task string, expires time.Time) {
	t.Helper()
	if err := store.SetPresence(context.Background(), farm.Presence{URI: taskURI(task), Task: task, Expires: expires}); err != nil {
		t.Fatal(err)
	}
}

// TestSteadyStateStoreCalls: clients that stay connected cost one write
// and one read each (at association), whatever the number of heartbeat
// periods that pass; the task's heartbeat is the only recurring write.
func TestSteadyStateStoreCalls(t *testing.T) {
	t.Parallel()
	const clients = 20
	store := memstore.New()
	cs := newCounting(store)
	tb := startBroker(t, pcpclients.NewPKI(t), Options{Name: "task-a", Presence: cs, Inbox: store,
		TaskTTL: 60 * time.Millisecond, ClientTTL: time.Hour})
	for i := range clients {
		if i%2 == 0 {
			v1Client(t, tb, fmt.Sprintf("steady%d", i), "agent")
		} else {
			v2Client(t, tb, fmt.Sprintf("steady%d", i), "agent")
		}
	}
	waitFor(t, "the clients' records", func() bool { return cs.clientWrites() == clients })
	beats := cs.of("Set " + taskURI("task-a"))
	// 15 more heartbeats: 5 TaskTTLs, each of which would have refreshed
	// every client under the old scheme.
	waitFor(t, "15 heartbeats", func() bool { return cs.of("Set "+taskURI("task-a")) >= beats+15 })
	if got := cs.clientWrites(); got != clients {
		t.Errorf("%d client record writes for %d clients, want one each", got, clients)
	}
	if got := cs.n("Lookup ", ""); got != clients {
		t.Errorf("%d lookups, want one per association", got)
	}
	if got := cs.n("Clear ", ""); got != 0 {
		t.Errorf("%d clears while every client stays, want none", got)
	}
}

// TestClientRefreshSpreadAndRare simulates a day of refresh checks (every
// minute, as with the default ClientTTL of 24 h) over clients registered
// together: each record is refreshed 3 times (a lookup and a write each,
// after those of the association),
// the first refreshes are spread over hours, and one check refreshes at
// most refreshBatch records.
func TestClientRefreshSpreadAndRare(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		clients int
		check   time.Duration // how often refreshDue runs
		span    time.Duration // simulated time
		// want
		refreshes    int // per client
		maxPerCheck  int
		minFirstSpan time.Duration // between the earliest and latest first refresh
	}{
		{"a day, few clients", 30, time.Minute, 25 * time.Hour, 3, 10, time.Hour},
		{"a burst over the batch", refreshBatch + 100, 9 * time.Hour, 9 * time.Hour, 1, refreshBatch, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b, cs := newStoreBroker(t, "task-r", memstore.New(), Options{})
			heartbeatOf(t, cs.PresenceStore, "task-r", time.Now().Add(48*time.Hour))
			t0 := time.Now()
			for i := range tt.clients {
				attach(t, b, fmt.Sprintf("c%d", i))
			}
			if got := cs.clientWrites(); got != tt.clients {
				t.Fatalf("%d writes at association, want %d", got, tt.clients)
			}
			ctx := context.Background()
			first := map[string]time.Duration{}
			var checks []time.Duration
			for at := tt.check; at <= tt.span; at += tt.check {
				checks = append(checks, at)
			}
			checks = append(checks, tt.span) // the burst's rest
			for _, at := range checks {
				before := cs.clientWrites()
				b.refreshDue(ctx, t0.Add(at))
				n := cs.clientWrites() - before
				if n > tt.maxPerCheck {
					t.Fatalf("%d refreshes in the check at %v, want at most %d", n, at, tt.maxPerCheck)
				}
				cs.mu.Lock()
				for k, v := range cs.calls {
					if uri, ok := strings.CutPrefix(k, "Set "); ok && v == 2 {
						if _, seen := first[uri]; !seen {
							first[uri] = at
						}
					}
				}
				cs.mu.Unlock()
			}
			for i := range tt.clients {
				uri := fmt.Sprintf("pcp://task-r/c%d", i)
				if got := cs.of("Set " + uri); got != 1+tt.refreshes {
					t.Errorf("%s written %d times, want 1 + %d refreshes", uri, got, tt.refreshes)
				}
				if got := cs.of("Lookup " + uri); got != 1+tt.refreshes {
					t.Errorf("%s read %d times, want 1 + %d refreshes", uri, got, tt.refreshes)
				}
			}
			lo, hi := tt.span, time.Duration(0)
			for _, at := range first {
				lo, hi = min(lo, at), max(hi, at)
			}
			if len(first) != tt.clients || hi-lo < tt.minFirstSpan {
				t.Errorf("%d clients' first refreshes between %v and %v, want all of them over at least %v", len(first), lo, hi, tt.minFirstSpan)
			}
			if lo < b.o.ClientTTL/6 {
				t.Errorf("a first refresh %v after association, before a sixth of ClientTTL", lo)
			}
		})
	}
}

// TestDeadTaskRecords: a client record counts only while the heartbeat of
// the task it names is unexpired: otherwise the client is not connected
// (Connected, a message to it, a wildcard, an inventory).
func TestDeadTaskRecords(t *testing.T) {
	t.Parallel()
	store := memstore.New()
	tb := startBroker(t, pcpclients.NewPKI(t), Options{Name: "task-a", Presence: store, Inbox: store})
	l, in := attach(t, tb.Broker, "ctl")
	ctx := context.Background()
	tests := []struct {
		name      string
		heartbeat time.Duration // from now; 0: none
		connected bool
	}{
		{"live task", time.Minute, true},
		{"expired heartbeat", -time.Second, false},
		{"no heartbeat", 0, false},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			task, typ := fmt.Sprintf("task-d%d", i), fmt.Sprintf("type%d", i)
			uri := "pcp://node/" + typ
			if tt.heartbeat != 0 {
				heartbeatOf(t, store, task, time.Now().Add(tt.heartbeat))
			}
			if err := store.Open(ctx, task); err != nil {
				t.Fatal(err)
			}
			if err := store.SetPresence(ctx, farm.Presence{URI: uri, Task: task, Expires: time.Now().Add(time.Hour)}); err != nil {
				t.Fatal(err)
			}
			if ok, err := tb.Connected(ctx, uri); err != nil || ok != tt.connected {
				t.Errorf("Connected %v %v, want %v", ok, err, tt.connected)
			}
			relayed := tb.Stats().MessagesRelayed
			if err := l.Send(ctx, &message.Message{MessageType: rpcRequest, Targets: []string{uri}, Data: []byte(`{}`)}); err != nil {
				t.Fatal(err)
			}
			if tt.connected {
				waitFor(t, "the relay", func() bool { return tb.Stats().MessagesRelayed == relayed+1 })
			} else if m := in.next(t); m.MessageType != msgError || !strings.Contains(string(m.Data), "not connected: "+uri) {
				t.Errorf("got %s %s, want not connected", m.MessageType, m.Data)
			}
			want := []string{}
			if tt.connected {
				want = []string{uri}
			}
			if got := tb.matching(pattern{cn: "*", typ: typ}); len(got) != len(want) || (len(want) == 1 && got[0].uri != uri) {
				t.Errorf("wildcard found %+v, want %v", got, want)
			}
			if got := inventoryOf(t, l, in, "pcp://*/"+typ, uri); !sameSet(got, want) {
				t.Errorf("inventory %v, want %v", got, want)
			}
		})
	}
}

// inventoryOf asks the broker for the URIs matching queries through l.
func inventoryOf(t *testing.T, l *Local, in inbox, queries ...string) []string {
	t.Helper()
	data, _ := json.Marshal(map[string]any{"query": queries})
	if err := l.Send(context.Background(), &message.Message{MessageType: msgInventoryRequest, Targets: []string{ServerURI}, Data: data}); err != nil {
		t.Fatal(err)
	}
	for range 10 {
		m := in.next(t)
		if m.MessageType != msgInventoryResponse {
			continue
		}
		var d struct {
			URIs []string `json:"uris"`
		}
		jsonData(t, m, &d)
		return d.URIs
	}
	t.Fatal("no inventory_response")
	return nil
}

// TestStoppedTask: a task that stops writing (frozen: its process hung or
// was killed, nothing cleared) loses its clients for the other tasks once
// its heartbeat expires; while it runs they are reachable.
func TestStoppedTask(t *testing.T) {
	t.Parallel()
	pki := pcpclients.NewPKI(t)
	store := memstore.New()
	bStore := newCounting(store)
	a := startBroker(t, pki, Options{Name: "task-a", Presence: store, Inbox: store, TaskTTL: 150 * time.Millisecond})
	b := startBroker(t, pki, Options{Name: "task-b", Presence: bStore, Inbox: store, TaskTTL: 150 * time.Millisecond})
	agent := v1Client(t, b, "frozen", "agent")
	ctx := context.Background()
	waitFor(t, "the agent seen from task a", func() bool { ok, _ := a.Connected(ctx, agent.uri); return ok })
	bStore.freeze()
	waitFor(t, "task b's clients gone", func() bool { ok, _ := a.Connected(ctx, agent.uri); return !ok })
	if _, err := store.LookupPresence(ctx, agent.uri); err != nil {
		t.Fatalf("the client record should still be there, only ignored: %v", err)
	}
	if ok, _ := b.Connected(ctx, agent.uri); !ok {
		t.Fatal("task b no longer sees its own client")
	}
}

// TestLivenessCache: a task's heartbeat is read once per liveFor however
// many ask, a failed read is not believed later, and the cache is
// bounded.
func TestLivenessCache(t *testing.T) {
	t.Parallel()
	store := memstore.New()
	b, cs := newStoreBroker(t, "task-a", store, Options{})
	ctx := context.Background()
	t0 := time.Now()
	heartbeatOf(t, store, "task-x", t0.Add(time.Hour))
	live := b.liveFor()
	if live != 5*time.Second {
		t.Fatalf("liveFor %v with the default TaskTTL", live)
	}

	steps := []struct {
		name    string
		task    string
		at      time.Duration
		setup   func()
		alive   bool
		lookups int // of task's heartbeat, in total
	}{
		{"first ask", "task-x", 0, nil, true, 1},
		{"cached", "task-x", time.Second, nil, true, 1},
		{"still cached", "task-x", live - time.Nanosecond, nil, true, 1},
		{"expired entry", "task-x", live, nil, true, 2},
		{"unknown task", "task-y", 0, nil, false, 1},
		{"its heartbeat appears: dead still cached", "task-y", time.Second, func() { heartbeatOf(t, store, "task-y", t0.Add(time.Hour)) }, false, 1},
		{"then seen", "task-y", live, nil, true, 2},
		{"this task, never read", "task-a", 0, nil, true, 0},
	}
	for _, s := range steps {
		if s.setup != nil {
			s.setup()
		}
		if got := b.taskAliveAt(ctx, s.task, t0.Add(s.at)); got != s.alive {
			t.Errorf("%s: alive %v, want %v", s.name, got, s.alive)
		}
		if got := cs.of("Lookup " + taskURI(s.task)); got != s.lookups {
			t.Errorf("%s: %d lookups of %s, want %d", s.name, got, s.task, s.lookups)
		}
	}

	// A burst of concurrent askers reads once.
	heartbeatOf(t, store, "task-z", t0.Add(time.Hour))
	var wg sync.WaitGroup
	for range 100 {
		wg.Add(1)
		go func() { defer wg.Done(); b.taskAliveAt(ctx, "task-z", t0) }()
	}
	wg.Wait()
	if got := cs.of("Lookup " + taskURI("task-z")); got != 1 {
		t.Errorf("%d lookups for a burst, want 1", got)
	}

	// Bounded: many tasks (a fleet replaced many times) never grow it past
	// maxLive.
	for i := range maxLive + 200 {
		b.taskAliveAt(ctx, fmt.Sprintf("old-%d", i), t0.Add(time.Duration(i)*time.Millisecond))
	}
	b.liveMu.Lock()
	n := len(b.live)
	b.liveMu.Unlock()
	if n > maxLive {
		t.Errorf("%d tasks cached, want at most %d", n, maxLive)
	}
}

// TestLivenessCacheWhileRouting: messages to many agents of one other task
// read that task's heartbeat at most once per liveFor.
func TestLivenessCacheWhileRouting(t *testing.T) {
	t.Parallel()
	store := memstore.New()
	cs := newCounting(store)
	tb := startBroker(t, pcpclients.NewPKI(t), Options{Name: "task-a", Presence: cs, Inbox: store})
	ctx := context.Background()
	heartbeatOf(t, store, "task-x", time.Now().Add(time.Hour))
	if err := store.Open(ctx, "task-x"); err != nil {
		t.Fatal(err)
	}
	const agents = 50
	var targets []string
	for i := range agents {
		uri := fmt.Sprintf("pcp://burst%d/agent", i)
		targets = append(targets, uri)
		if err := store.SetPresence(ctx, farm.Presence{URI: uri, Task: "task-x", Expires: time.Now().Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
	}
	l, _ := attach(t, tb.Broker, "ctl")
	start := time.Now()
	for _, uri := range targets {
		if err := l.Send(ctx, &message.Message{MessageType: rpcRequest, Targets: []string{uri}, Data: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "the relays", func() bool { return tb.Stats().MessagesRelayed == agents })
	elapsed := time.Since(start)
	allowed := 1 + int(elapsed/tb.liveFor())
	if got := cs.of("Lookup " + taskURI("task-x")); got > allowed {
		t.Errorf("%d heartbeat reads for %d messages in %v, want at most %d", got, agents, elapsed, allowed)
	}
	if got := cs.n("Lookup pcp://burst", ""); got != agents {
		t.Errorf("%d record reads for %d messages, want one each", got, agents)
	}
}

// TestTaskTypeReserved: nobody can be pcp://<task>/compilefarm-task, and a
// message to a heartbeat's URI is not delivered, even though a record of a
// live task holds it.
func TestTaskTypeReserved(t *testing.T) {
	t.Parallel()
	store := memstore.New()
	tb := startBroker(t, pcpclients.NewPKI(t), Options{Name: "task-a", Presence: store, Inbox: store})
	ctx := context.Background()
	if _, err := tb.Attach(ctx, TaskClientType, func(*message.Message) {}); err == nil {
		t.Fatal("Attach of the type compilefarm-task accepted")
	}
	heartbeatOf(t, store, "task-x", time.Now().Add(time.Hour))
	if err := store.Open(ctx, "task-x"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "task-a's heartbeat", func() bool { _, err := store.LookupPresence(ctx, taskURI("task-a")); return err == nil })
	l, in := attach(t, tb.Broker, "ctl")
	for _, uri := range []string{taskURI("task-a"), taskURI("task-x")} {
		t.Run(uri, func(t *testing.T) {
			if ok, err := tb.Connected(ctx, uri); ok || err != nil {
				t.Errorf("Connected %v %v", ok, err)
			}
			if err := l.Send(ctx, &message.Message{MessageType: rpcRequest, Targets: []string{uri}, Data: []byte(`{}`)}); err != nil {
				t.Fatal(err)
			}
			if m := in.next(t); m.MessageType != msgError || !strings.Contains(string(m.Data), "not connected") {
				t.Errorf("got %s %s", m.MessageType, m.Data)
			}
		})
	}
	if got := inventoryOf(t, l, in, "pcp://*/"+TaskClientType); len(got) != 0 {
		t.Errorf("inventory of tasks: %v", got)
	}
	if tb.Stats().MessagesRelayed != 0 {
		t.Error("a message was relayed to a heartbeat's URI")
	}
}

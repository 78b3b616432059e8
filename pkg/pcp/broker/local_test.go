package broker

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/compilefarm/compilefarm/internal/pcpclients"
	"github.com/compilefarm/compilefarm/pkg/farm"
	"github.com/compilefarm/compilefarm/pkg/memstore"
	"github.com/compilefarm/compilefarm/pkg/pcp/message"
)

// inbox collects what a Local receives.
type inbox chan *message.Message

func (in inbox) next(t testing.TB) *message.Message {
	t.Helper()
	select {
	case m := <-in:
		return m
	case <-time.After(5 * time.Second):
		t.Fatal("the local client received nothing in 5s")
		return nil
	}
}

func attach(t testing.TB, b *Broker, typ string) (*Local, inbox) {
	t.Helper()
	in := make(inbox, 100)
	l, err := b.Attach(context.Background(), typ, func(m *message.Message) { in <- m })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	return l, in
}

// TestLocal: an in-process controller sends to websocket agents of both
// versions and gets their answers and the broker's errors.
func TestLocal(t *testing.T) {
	t.Parallel()
	tb := startBroker(t, pcpclients.NewPKI(t), Options{Name: "task-a"})
	l, in := attach(t, tb.Broker, "jobs")
	if l.URI() != "pcp://task-a/jobs" {
		t.Fatalf("URI %s", l.URI())
	}
	ctx := context.Background()
	if ok, _ := tb.Connected(ctx, l.URI()); !ok {
		t.Fatal("the local client is not connected")
	}
	for _, agent := range []*wsClient{v1Client(t, tb, "la1", "agent"), v2Client(t, tb, "la2", "agent")} {
		waitFor(t, "registration", func() bool { return tb.local(agent.uri) != nil })
		if err := l.Send(ctx, &message.Message{MessageType: rpcRequest, Targets: []string{agent.uri}, Sender: "pcp://forged/x", Data: []byte(`{"module":"echo"}`)}); err != nil {
			t.Fatal(err)
		}
		req := agent.read()
		if req.Sender != l.URI() || req.ID == "" {
			t.Fatalf("agent got %+v", req)
		}
		agent.sendMsg(&message.Message{ID: newID(), MessageType: "http://puppetlabs.com/rpc_blocking_response", Sender: agent.uri,
			Targets: []string{l.URI()}, InReplyTo: req.ID, Data: []byte(`{"results":{}}`)})
		if m := in.next(t); m.Sender != agent.uri || m.InReplyTo != req.ID {
			t.Fatalf("local got %+v", m)
		}
	}
	if err := l.Send(ctx, &message.Message{MessageType: rpcRequest, Targets: []string{"pcp://nobody/agent"}, Data: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	if m := in.next(t); m.MessageType != msgError || !strings.Contains(string(m.Data), "not connected") {
		t.Fatalf("local got %s %s", m.MessageType, m.Data)
	}
	if err := l.Send(ctx, &message.Message{MessageType: rpcRequest}); err == nil {
		t.Fatal("a message without targets was sent")
	}

	// (a delivery is counted once queued, so perhaps after it was received)
	waitFor(t, "the routed count", func() bool { return tb.Stats().MessagesRouted >= 4 })
	st := tb.Stats()
	if st.Associated != 3 || st.Connections != 2 || st.V1 != 1 || st.V2 != 1 || st.MessagesRouted < 4 || st.Undeliverable != 1 {
		t.Errorf("stats %+v", st)
	}
	reg := prometheus.NewPedanticRegistry()
	for _, c := range tb.Collectors() {
		if err := reg.Register(c); err != nil {
			t.Fatal(err)
		}
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, f := range families {
		names[f.GetName()] = true
	}
	for _, n := range []string{"compilefarm_pcp_connections", "compilefarm_pcp_messages_routed_total", "compilefarm_pcp_associated_clients"} {
		if !names[n] {
			t.Errorf("metric %s missing from %v", n, names)
		}
	}
	if b, _ := json.Marshal(st); !strings.Contains(string(b), `"messages_routed"`) {
		t.Errorf("stats JSON %s", b)
	}

	l.Close()
	if ok, _ := tb.Connected(ctx, l.URI()); ok {
		t.Fatal("still connected after Close")
	}
	if err := l.Send(ctx, &message.Message{MessageType: rpcRequest, Targets: []string{"pcp://x/agent"}}); err != ErrLocalClosed {
		t.Fatalf("Send after Close: %v", err)
	}
}

// TestMultiTask: two tasks sharing a presence store and inboxes (memstore)
// deliver to each other's clients: a request from a controller on one task
// reaches an agent on the other, its answer comes back, wildcards and
// inventory see both, and a task that is gone gives "not connected".
func TestMultiTask(t *testing.T) {
	t.Parallel()
	pki := pcpclients.NewPKI(t)
	store := memstore.New()
	a := startBroker(t, pki, Options{Name: "task-a", Presence: store, Inbox: store})
	b := startBroker(t, pki, Options{Name: "task-b", Presence: store, Inbox: store})
	ctx := context.Background()

	agent := v1Client(t, a, "m1", "agent")     // on task a
	agent2 := v2Client(t, b, "m2", "agent")    // on task b
	ctl := v1Client(t, b, "ctl", "controller") // on task b
	l, in := attach(t, b.Broker, "jobs")       // on task b
	waitFor(t, "presence", func() bool {
		ok1, _ := b.Connected(ctx, agent.uri)
		ok2, _ := a.Connected(ctx, agent2.uri)
		return ok1 && ok2
	})

	// Controller on b → agent on a → answer back to b.
	id := newID()
	ctl.sendMsg(&message.Message{ID: id, MessageType: rpcRequest, Sender: ctl.uri, Targets: []string{agent.uri}, Data: []byte(`{"n":1}`)})
	req := agent.read()
	if req.ID != id || req.Sender != ctl.uri || string(req.Data) != `{"n":1}` {
		t.Fatalf("agent got %+v", req)
	}
	agent.sendMsg(&message.Message{ID: newID(), MessageType: "http://puppetlabs.com/rpc_blocking_response", Sender: agent.uri,
		Targets: []string{ctl.uri}, InReplyTo: id, Data: []byte(`{}`)})
	if m := ctl.read(); m.InReplyTo != id || m.Sender != agent.uri {
		t.Fatalf("ctl got %+v", m)
	}

	// The local client on b reaches both agents with a wildcard, with a
	// destination report.
	if err := l.Send(ctx, &message.Message{MessageType: rpcRequest, Targets: []string{"pcp://*/agent"}, DestinationReport: true, Data: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	rep := in.next(t)
	var d struct {
		Targets []string `json:"targets"`
	}
	jsonData(t, rep, &d)
	if rep.MessageType != msgDestinationReport || !sameSet(d.Targets, []string{agent.uri, agent2.uri}) {
		t.Fatalf("report %s %s", rep.MessageType, rep.Data)
	}
	agent.read()
	agent2.read()

	// Inventory on a sees the agent on b.
	q := newID()
	agent.sendMsg(&message.Message{ID: q, MessageType: msgInventoryRequest, Sender: agent.uri, Targets: []string{ServerURI}, Data: []byte(`{"query":["pcp://*/agent"]}`)})
	inv := agent.readType(msgInventoryResponse)
	var u struct {
		URIs []string `json:"uris"`
	}
	jsonData(t, inv, &u)
	if !sameSet(u.URIs, []string{agent.uri, agent2.uri}) {
		t.Fatalf("inventory %v", u.URIs)
	}

	waitFor(t, "b's relayed count", func() bool { return b.Stats().MessagesRelayed >= 2 })
	if st := a.Stats(); st.MessagesFromInbox < 2 {
		t.Errorf("a received %d from its inbox", st.MessagesFromInbox)
	}

	// The agent disconnects from a: its presence is cleared.
	_ = agent.ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(time.Second))
	waitFor(t, "presence cleared", func() bool {
		ok, _ := b.Connected(ctx, agent.uri)
		return !ok
	})
	if err := l.Send(ctx, &message.Message{MessageType: rpcRequest, Targets: []string{agent.uri}, Data: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	if m := in.next(t); m.MessageType != msgError || !strings.Contains(string(m.Data), "not connected") {
		t.Fatalf("local got %s %s", m.MessageType, m.Data)
	}
}

// TestMultiTaskGoneTask: a presence record that names a task that ended
// without clearing it gives "not connected": its heartbeat is gone, or
// (not yet expired) its inbox is closed.
func TestMultiTaskGoneTask(t *testing.T) {
	t.Parallel()
	store := memstore.New()
	tb := startBroker(t, pcpclients.NewPKI(t), Options{Name: "task-a", Presence: store, Inbox: store})
	ctx := context.Background()
	ctl := v1Client(t, tb, "ctl", "controller")
	for _, tt := range []struct {
		name, task string
		heartbeat  bool
	}{
		{"no heartbeat", "task-gone", false},
		{"heartbeat but no inbox", "task-closed", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			uri := "pcp://ghost-" + tt.task + "/agent"
			if tt.heartbeat {
				if err := store.SetPresence(ctx, presence(taskURI(tt.task), tt.task)); err != nil {
					t.Fatal(err)
				}
			}
			if err := store.SetPresence(ctx, presence(uri, tt.task)); err != nil {
				t.Fatal(err)
			}
			ctl.sendMsg(&message.Message{ID: newID(), MessageType: rpcRequest, Sender: ctl.uri, Targets: []string{uri}, Data: []byte(`{}`)})
			if m := ctl.read(); m.MessageType != msgError || !strings.Contains(string(m.Data), "not connected: "+uri) {
				t.Fatalf("got %s %s", m.MessageType, m.Data)
			}
		})
	}
}

// TestShutdown: when Run's context ends every connection is closed with
// 1001 and the task's presence records are cleared.
func TestShutdown(t *testing.T) {
	t.Parallel()
	pki := pcpclients.NewPKI(t)
	store := memstore.New()
	b, err := New(Options{Name: "task-s", Presence: store, Inbox: store, Log: testLog()})
	if err != nil {
		t.Fatal(err)
	}
	tb := serveOnly(t, pki, b)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()
	c := v1Client(t, tb, "s1", "agent")
	if ok, _ := b.Connected(context.Background(), c.uri); !ok {
		t.Fatal("not connected")
	}
	cancel()
	if ce := c.expectClose(5 * time.Second); ce.Code != CloseGoingAway {
		t.Fatalf("closed with %d %q", ce.Code, ce.Text)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := store.LookupPresence(context.Background(), c.uri); err == nil {
		t.Fatal("presence kept after shutdown")
	}
	if _, resp, err := tryDial(t, tb, pki.ClientTLS(t, identity(t, pki, "s2")), "/pcp/"); err == nil || resp == nil || resp.StatusCode != 503 {
		t.Fatalf("connection after shutdown: %v %v", err, resp)
	}
}

// TestSupersededAcrossTasks: a client that associates with another task
// while this one still holds an older connection (a reconnection through
// the load balancer) keeps its newer presence record, and the older
// connection is closed with 4000: at once when the new task tells the old
// one, else at the record's next refresh. A record of a dead task is taken
// back at the refresh instead.
func TestSupersededAcrossTasks(t *testing.T) {
	t.Parallel()
	pki := pcpclients.NewPKI(t)
	tests := []struct {
		name      string
		clientTTL time.Duration // of task a
		// elsewhere makes the newer association, with the store task a
		// uses, and returns the task it names.
		elsewhere  func(t *testing.T, store *memstore.Store, uri string) string
		superseded bool
	}{
		{"told by the new task", 0, func(t *testing.T, store *memstore.Store, uri string) string {
			b := startBroker(t, pki, Options{Name: "task-b", Presence: store, Inbox: store})
			v1Client(t, b, strings.TrimSuffix(strings.TrimPrefix(uri, "pcp://"), "/agent"), "agent")
			return "task-b"
		}, true},
		{"at the next refresh", 300 * time.Millisecond, func(t *testing.T, store *memstore.Store, uri string) string {
			writePresence(t, store, presence(taskURI("task-c"), "task-c"))
			writePresence(t, store, presence(uri, "task-c"))
			return "task-c"
		}, true},
		{"a dead task's record", 300 * time.Millisecond, func(t *testing.T, store *memstore.Store, uri string) string {
			writePresence(t, store, presence(uri, "task-dead"))
			return "task-a"
		}, false},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			store := memstore.New()
			a := startBroker(t, pki, Options{Name: "task-a", Presence: store, Inbox: store, ClientTTL: tt.clientTTL})
			cn := fmt.Sprintf("moved%d", i)
			uri := "pcp://" + cn + "/agent"
			old := v1Client(t, a, cn, "agent")
			want := tt.elsewhere(t, store, uri)
			if tt.superseded {
				if ce := old.expectClose(5 * time.Second); ce.Code != CloseSuperseded {
					t.Fatalf("the older connection closed with %d %q", ce.Code, ce.Text)
				}
				time.Sleep(300 * time.Millisecond) // a few refreshes of task a
			}
			waitFor(t, "the record of "+want, func() bool {
				p, err := store.LookupPresence(context.Background(), uri)
				return err == nil && p.Task == want
			})
			if !tt.superseded && a.local(uri) == nil {
				t.Fatal("the connection was closed")
			}
		})
	}
}

func writePresence(t *testing.T, store *memstore.Store, p farm.Presence) {
	t.Helper()
	if err := store.SetPresence(context.Background(), p); err != nil {
		t.Fatal(err)
	}
}

// TestInboxDuplicates: a message an inbox delivers twice (allowed after a
// crash) reaches its target once.
func TestInboxDuplicates(t *testing.T) {
	t.Parallel()
	store := memstore.New()
	tb := startBroker(t, pcpclients.NewPKI(t), Options{Name: "task-a", Presence: store, Inbox: store})
	agent := v1Client(t, tb, "dup", "agent")
	m := &message.Message{ID: newID(), MessageType: rpcRequest, Sender: "pcp://ctl/controller", Targets: []string{agent.uri},
		Expires: time.Now().Add(time.Minute), Data: []byte(`{}`)}
	enc, err := message.EncodeV1(m)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := json.Marshal(relayed{Target: agent.uri, From: "task-b", Msg: enc})
	waitFor(t, "task-a's inbox", func() bool { return store.Post(context.Background(), "task-a", body) == nil })
	if err := store.Post(context.Background(), "task-a", body); err != nil {
		t.Fatal(err)
	}
	if got := agent.read(); got.ID != m.ID {
		t.Fatalf("got %+v", got)
	}
	if got, err := agent.tryRead(300 * time.Millisecond); err == nil {
		t.Fatalf("a second copy: %+v", got)
	}
}

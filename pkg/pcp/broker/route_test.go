package broker

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/compilefarm/compilefarm/internal/pcpclients"
	"github.com/compilefarm/compilefarm/pkg/pcp/message"
)

const rpcRequest = "http://puppetlabs.com/rpc_blocking_request"

// TestRouteBetweenVersions sends between v1 and v2 clients both ways:
// v1 gets the in-reply-to spelling and an expiry, v2 one target and JSON
// data.
func TestRouteBetweenVersions(t *testing.T) {
	t.Parallel()
	tb := startBroker(t, pcpclients.NewPKI(t), Options{})
	v1 := v1Client(t, tb, "ctl1", "controller")
	v2 := v2Client(t, tb, "agent2", "agent")
	v1b := v1Client(t, tb, "agent1", "agent")
	waitFor(t, "v2 registration", func() bool { return tb.local(v2.uri) != nil })

	tests := []struct {
		name     string
		from, to *wsClient
		data     string
	}{
		{"v1 to v2", v1, v2, `{"transaction_id":"t1","module":"echo"}`},
		{"v2 to v1", v2, v1, `{"transaction_id":"t1","results":{"outcome":"x"}}`},
		{"v1 to v1", v1, v1b, `{"a":[1,2]}`},
		{"v2 to v2", v2, v2, `"text"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id := newID()
			replyTo := newID()
			typ := "http://puppetlabs.com/rpc_blocking_response"
			if tt.from == v1 {
				typ = rpcRequest
			}
			tt.from.sendMsg(&message.Message{ID: id, MessageType: typ, Sender: tt.from.uri, Targets: []string{tt.to.uri},
				InReplyTo: replyTo, Data: []byte(tt.data)})
			m := tt.to.read()
			if m.ID != id || m.Sender != tt.from.uri || !slices.Equal(m.Targets, []string{tt.to.uri}) || m.InReplyTo != replyTo {
				t.Fatalf("got %+v", m)
			}
			if string(m.Data) != tt.data {
				t.Fatalf("data %s, want %s", m.Data, tt.data)
			}
			if tt.to.version == 1 && m.Expires.IsZero() {
				t.Fatal("a v1 message without expiry")
			}
		})
	}
	// (counted just after the message is queued, so perhaps after it is read)
	waitFor(t, "the routed count", func() bool { return tb.Stats().MessagesRouted == int64(len(tests)) })
}

// TestRouteErrors: the broker's answers when a message cannot be
// delivered or is refused.
func TestRouteErrors(t *testing.T) {
	t.Parallel()
	tb := startBroker(t, pcpclients.NewPKI(t), Options{})
	ctl := v1Client(t, tb, "ctl", "controller")
	agent := v1Client(t, tb, "a1", "agent")
	v2 := v2Client(t, tb, "a2", "agent")
	tests := []struct {
		name     string
		from     *wsClient
		msg      message.Message
		wantType string
		says     string
	}{
		{"never connected", ctl, message.Message{MessageType: rpcRequest, Targets: []string{"pcp://nobody/agent"}, Data: []byte(`{}`)},
			msgError, "not connected: pcp://nobody/agent"},
		{"expired", ctl, message.Message{MessageType: rpcRequest, Targets: []string{agent.uri}, Expires: time.Now().Add(-time.Second), Data: []byte(`{}`)},
			msgTTLExpired, ""},
		{"agent to agent request", agent, message.Message{MessageType: rpcRequest, Targets: []string{v2.uri}, Data: []byte(`{}`)},
			msgError, "Message not authorized"},
		{"agent to all agents", agent, message.Message{MessageType: "http://puppetlabs.com/rpc_non_blocking_request", Targets: []string{"pcp://*/agent"}, Data: []byte(`{}`)},
			msgError, "Message not authorized"},
		{"not JSON for a v2 client", ctl, message.Message{MessageType: rpcRequest, Targets: []string{v2.uri}, Data: []byte(`not json`)},
			msgError, "not delivered to pcp://a2/agent"},
		{"sender is not the session's", ctl, message.Message{MessageType: rpcRequest, Sender: "pcp://ctl/other", Targets: []string{agent.uri}, Data: []byte(`{}`)},
			msgError, "Message not authenticated"},
		{"unknown server message", ctl, message.Message{MessageType: "http://puppetlabs.com/what", Targets: []string{ServerURI}, Data: []byte(`{}`)},
			msgError, "does not handle"},
		{"v2 sender is not the connection's", v2, message.Message{MessageType: "x", Sender: "pcp://a2/controller", Targets: []string{ctl.uri}, Data: []byte(`{}`)},
			msgError, "Message not authenticated"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := tt.msg
			m.ID = newID()
			if m.Sender == "" {
				m.Sender = tt.from.uri
			}
			tt.from.sendMsg(&m)
			got := tt.from.read()
			if got.MessageType != tt.wantType || got.InReplyTo != m.ID || got.Sender != ServerURI || !strings.Contains(string(got.Data), tt.says) {
				t.Fatalf("got %s in reply to %q: %s", got.MessageType, got.InReplyTo, got.Data)
			}
		})
	}
	// The agent's answers to a controller are allowed.
	agent.sendMsg(&message.Message{ID: newID(), MessageType: "http://puppetlabs.com/rpc_blocking_response", Sender: agent.uri,
		Targets: []string{ctl.uri}, Data: []byte(`{}`)})
	if m := ctl.read(); m.Sender != agent.uri {
		t.Fatalf("got %+v", m)
	}
}

// TestMulticast: wildcard targets reach every matching client once, and
// the destination_report lists them before any answer.
func TestMulticast(t *testing.T) {
	t.Parallel()
	tb := startBroker(t, pcpclients.NewPKI(t), Options{})
	ctl := v1Client(t, tb, "ctl", "controller")
	a1 := v1Client(t, tb, "n1", "agent")
	a2 := v2Client(t, tb, "n2", "agent")
	other := v1Client(t, tb, "n1", "other")
	waitFor(t, "registrations", func() bool { return tb.Stats().Associated == 4 })
	id := newID()
	ctl.sendMsg(&message.Message{ID: id, MessageType: rpcRequest, Sender: ctl.uri, DestinationReport: true,
		Targets: []string{"pcp://*/agent", "pcp://n1/agent", "pcp://n1/*"}, Data: []byte(`{"x":1}`)})
	rep := ctl.read()
	var d struct {
		ID      string   `json:"id"`
		Targets []string `json:"targets"`
	}
	jsonData(t, rep, &d)
	want := []string{"pcp://n1/agent", "pcp://n2/agent", "pcp://n1/other"}
	if rep.MessageType != msgDestinationReport || d.ID != id || rep.InReplyTo != id || !sameSet(d.Targets, want) {
		t.Fatalf("report %s %s", rep.MessageType, rep.Data)
	}
	for _, c := range []*wsClient{a1, a2, other} {
		if m := c.read(); m.ID != id {
			t.Fatalf("%s got %+v", c.uri, m)
		}
		if m, err := c.tryRead(100 * time.Millisecond); err == nil {
			t.Fatalf("%s got a second copy %+v", c.uri, m)
		}
	}
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// TestInventory: inventory_request with and without subscription.
func TestInventory(t *testing.T) {
	t.Parallel()
	tb := startBroker(t, pcpclients.NewPKI(t), Options{})
	ctl := v1Client(t, tb, "ctl", "controller")
	v1Client(t, tb, "i1", "agent")
	v2Client(t, tb, "i2", "agent")
	waitFor(t, "registrations", func() bool { return tb.Stats().Associated == 3 })
	ask := func(c *wsClient, subscribe bool, query ...string) []string {
		t.Helper()
		id := newID()
		data, _ := json.Marshal(map[string]any{"query": query, "subscribe": subscribe})
		c.sendMsg(&message.Message{ID: id, MessageType: msgInventoryRequest, Sender: c.uri, Targets: []string{ServerURI}, Data: data})
		m := c.readType(msgInventoryResponse)
		var d struct {
			URIs []string `json:"uris"`
		}
		jsonData(t, m, &d)
		if m.InReplyTo != id || d.URIs == nil {
			t.Fatalf("inventory_response %+v %s", m, m.Data)
		}
		return d.URIs
	}
	for _, tt := range []struct {
		query []string
		want  []string
	}{
		{[]string{"pcp://*/agent"}, []string{"pcp://i1/agent", "pcp://i2/agent"}},
		{[]string{"pcp://i1/*"}, []string{"pcp://i1/agent"}},
		{[]string{"pcp://*/*"}, []string{"pcp://ctl/controller", "pcp://i1/agent", "pcp://i2/agent"}},
		{[]string{"pcp://i2/agent", "pcp://gone/agent"}, []string{"pcp://i2/agent"}},
		{[]string{"pcp://*/nothing"}, []string{}},
	} {
		if got := ask(ctl, false, tt.query...); !sameSet(got, tt.want) {
			t.Errorf("query %v: %v, want %v", tt.query, got, tt.want)
		}
	}

	// A subscriber hears of agents that connect and disconnect.
	sub := v2Client(t, tb, "watcher", "controller")
	ask(sub, true, "pcp://*/agent")
	c3 := v1Client(t, tb, "i3", "agent")
	update := func() inventoryChange {
		m := sub.readType(msgInventoryUpdate)
		var d struct {
			Changes []inventoryChange `json:"changes"`
		}
		jsonData(t, m, &d)
		if len(d.Changes) != 1 {
			t.Fatalf("update %s", m.Data)
		}
		return d.Changes[0]
	}
	if ch := update(); ch != (inventoryChange{Client: "pcp://i3/agent", Change: 1}) {
		t.Fatalf("change %+v", ch)
	}
	v1Client(t, tb, "c4", "controller") // not matching: no update
	_ = c3.ws.Close()
	if ch := update(); ch != (inventoryChange{Client: "pcp://i3/agent", Change: -1}) {
		t.Fatalf("change %+v", ch)
	}
	// Asking again without subscribing ends the subscription.
	ask(sub, false, "pcp://*/agent")
	v1Client(t, tb, "i5", "agent")
	if m, err := sub.tryRead(200 * time.Millisecond); err == nil {
		t.Fatalf("an update after the subscription ended: %s %s", m.MessageType, m.Data)
	}
	// A bad query gets an error.
	ctl.sendMsg(&message.Message{ID: newID(), MessageType: msgInventoryRequest, Sender: ctl.uri, Targets: []string{ServerURI}, Data: []byte(`{"q":1}`)})
	if m := ctl.read(); m.MessageType != msgError {
		t.Fatalf("got %s", m.MessageType)
	}
}

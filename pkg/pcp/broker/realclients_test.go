package broker

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/compilefarm/compilefarm/internal/pcpclients"
	"github.com/compilefarm/compilefarm/pkg/memstore"
)

// realEnv is a broker with the real clients' tools and a CA.
type realEnv struct {
	tools *pcpclients.Tools
	tb    *testBroker
}

func newRealEnv(t *testing.T, o Options) *realEnv {
	t.Helper()
	tools := pcpclients.Require(t)
	pki := pcpclients.NewPKI(t)
	return &realEnv{tools: tools, tb: startBroker(t, pki, o)}
}

// agent starts a real pxp-agent for certname (v1 on /pcp/, or v2) and
// waits for its association.
func (e *realEnv) agent(t *testing.T, certname string, version int) *pcpclients.Agent {
	t.Helper()
	return e.agentWith(t, certname, version, nil)
}

func (e *realEnv) agentWith(t *testing.T, certname string, version int, config map[string]any) *pcpclients.Agent {
	t.Helper()
	url := e.tb.wss("/pcp/")
	if version == 2 {
		url = e.tb.wss("/pcp2/")
	}
	a, err := e.tools.StartAgent(pcpclients.AgentOptions{Broker: url, PCPVersion: version,
		Identity: identity(t, e.tb.pki, certname), Dir: t.TempDir(), Config: config})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Stop() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := a.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	return a
}

func (e *realEnv) request(t *testing.T, o pcpclients.RequestOptions) *pcpclients.RequestResult {
	t.Helper()
	if o.Server == "" {
		o.Server = e.tb.wss("/pcp/")
	}
	if o.Identity.Cert == "" {
		o.Identity = identity(t, e.tb.pki, "controller01.example.com")
	}
	if o.Timeout == 0 {
		o.Timeout = 20
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := e.tools.Request(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func echoOutcome(t *testing.T, r pcpclients.Received) string {
	t.Helper()
	var d struct {
		Results struct {
			Outcome string `json:"outcome"`
		} `json:"results"`
	}
	if err := json.Unmarshal(r.Data, &d); err != nil {
		t.Fatalf("rpc_blocking_response data %s: %v", r.Data, err)
	}
	return d.Results.Outcome
}

// TestRealEcho: a real pxp-agent associates (v1) and answers a real
// ruby-pcp-client controller's echo request; pcp-ping finds it through
// inventory-free multicast (pcp://*/agent with a destination report).
func TestRealEcho(t *testing.T) {
	t.Parallel()
	e := newRealEnv(t, Options{})
	e.agent(t, "agent01.example.com", 1)
	res := e.request(t, pcpclients.RequestOptions{Targets: []string{"pcp://agent01.example.com/agent"},
		Blocking: true, Params: `{"argument":"hello-v1"}`})
	if res.ExitCode != 0 {
		t.Fatalf("pxp-request exit %d: %s\n%+v", res.ExitCode, res.Stderr, res.Messages)
	}
	got := res.OfType("rpc_blocking_response")
	if len(got) != 1 || echoOutcome(t, got[0]) != "hello-v1" || got[0].Envelope.Sender != "pcp://agent01.example.com/agent" {
		t.Fatalf("responses %+v", res.Messages)
	}
	// The acceptance suite's controller connects to /pcp/<type>.
	res = e.request(t, pcpclients.RequestOptions{Targets: []string{"pcp://agent01.example.com/agent"},
		Blocking: true, AppendType: true, Params: `{"argument":"appended"}`})
	if got := res.OfType("rpc_blocking_response"); res.ExitCode != 0 || len(got) != 1 || echoOutcome(t, got[0]) != "appended" {
		t.Fatalf("with --append-type: exit %d %s %+v", res.ExitCode, res.Stderr, res.Messages)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ping, err := e.tools.Ping(ctx, e.tb.wss("/pcp"), identity(t, e.tb.pki, "controller01.example.com"))
	if err != nil {
		t.Fatal(err)
	}
	if !ping.Connected || !ping.Complete || strings.Join(ping.Responders, ",") != "pcp://agent01.example.com/agent" {
		t.Fatalf("pcp-ping: %+v", ping)
	}
}

// TestRealV1V2 plays pcp-broker's v1↔v2 scenario: a pxp-agent speaking
// PCP v2 answers a ruby-pcp-client (v1) controller's echo.
func TestRealV1V2(t *testing.T) {
	t.Parallel()
	e := newRealEnv(t, Options{})
	e.agent(t, "agent02.example.com", 2)
	res := e.request(t, pcpclients.RequestOptions{Targets: []string{"pcp://agent02.example.com/agent"},
		Blocking: true, Params: `{"argument":"hello-v2"}`})
	got := res.OfType("rpc_blocking_response")
	if res.ExitCode != 0 || len(got) != 1 || echoOutcome(t, got[0]) != "hello-v2" {
		t.Fatalf("pxp-request exit %d: %s\n%+v", res.ExitCode, res.Stderr, res.Messages)
	}
	if st := e.tb.Stats(); st.V2 != 1 {
		t.Errorf("stats %+v, want one v2 connection", st)
	}
}

// TestRealDuplicateURI: a second pxp-agent with the same certificate
// supersedes the first, which the broker closes with 4000 "superseded".
func TestRealDuplicateURI(t *testing.T) {
	t.Parallel()
	e := newRealEnv(t, Options{})
	first := e.agent(t, "agent03.example.com", 1)
	e.agent(t, "agent03.example.com", 1)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := first.WaitLog(ctx, pcpclients.Superseded, 1); err != nil {
		t.Fatal(err)
	}
	_ = first.Stop() // it would reconnect and supersede the second in turn
	// The second may have been superseded by the first's reconnection:
	// wait until it has associated again and holds the URI.
	time.Sleep(500 * time.Millisecond)
	waitFor(t, "the second agent to hold the URI", func() bool {
		ok, _ := e.tb.Connected(context.Background(), "pcp://agent03.example.com/agent")
		return ok
	})
	res := e.request(t, pcpclients.RequestOptions{Targets: []string{"pcp://agent03.example.com/agent"}, Blocking: true})
	if res.ExitCode != 0 || len(res.OfType("rpc_blocking_response")) != 1 {
		t.Fatalf("the second agent did not answer: exit %d %s %+v", res.ExitCode, res.Stderr, res.Messages)
	}
}

// TestRealAssociationRefused: ruby-pcp-client associating with the type
// "server" is refused (associate_response success false, then 4002), and
// pxp-request says it could not associate.
func TestRealAssociationRefused(t *testing.T) {
	t.Parallel()
	e := newRealEnv(t, Options{})
	res := e.request(t, pcpclients.RequestOptions{Type: "server", Targets: []string{"pcp://x/agent"}})
	if res.ExitCode == 0 || !strings.Contains(res.Stderr, "could not connect/associate") {
		t.Fatalf("exit %d, stderr %s", res.ExitCode, res.Stderr)
	}
	if st := e.tb.Stats(); st.Unauthorized == 0 {
		t.Errorf("stats %+v: no refusal counted", st)
	}
}

// TestRealSend plays the send scenarios with a real controller: to itself,
// to a client never connected (error_message "not connected"), and an
// expired message (ttl_expired).
func TestRealSend(t *testing.T) {
	t.Parallel()
	e := newRealEnv(t, Options{})
	t.Run("self", func(t *testing.T) {
		res := e.request(t, pcpclients.RequestOptions{Targets: []string{"pcp://controller01.example.com/controller"},
			Blocking: true, Timeout: 2})
		got := res.OfType("rpc_blocking_request")
		if len(got) != 1 || got[0].Envelope.Sender != "pcp://controller01.example.com/controller" {
			t.Fatalf("the controller did not receive its own request: exit %d %+v", res.ExitCode, res.Messages)
		}
	})
	t.Run("never-connected", func(t *testing.T) {
		res := e.request(t, pcpclients.RequestOptions{Targets: []string{"pcp://nobody.example.com/agent"}, Blocking: true, Timeout: 2})
		got := res.OfType("error_message")
		if len(got) != 1 || !strings.Contains(string(got[0].Data), "not connected") || got[0].Envelope.InReplyTo == "" {
			t.Fatalf("exit %d %s %+v", res.ExitCode, res.Stderr, res.Messages)
		}
	})
	t.Run("expired", func(t *testing.T) {
		res := e.request(t, pcpclients.RequestOptions{Targets: []string{"pcp://nobody.example.com/agent"}, Blocking: true, TTL: -2, Timeout: 2})
		got := res.OfType("ttl_expired")
		if len(got) != 1 {
			t.Fatalf("exit %d %s %+v", res.ExitCode, res.Stderr, res.Messages)
		}
	})
}

// TestRealIdleTimeout: a pxp-agent that sends nothing for IdleTimeout is
// disconnected, and associates again.
func TestRealIdleTimeout(t *testing.T) {
	t.Parallel()
	e := newRealEnv(t, Options{IdleTimeout: 500 * time.Millisecond})
	a := e.agent(t, "agent04.example.com", 1)
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	if err := a.WaitAssociations(ctx, 2); err != nil {
		t.Fatal(err)
	}
	if st := e.tb.Stats(); st.IdleClosed == 0 {
		t.Errorf("stats %+v: no idle close counted", st)
	}
}

// TestRealRevoked: revoking a connected pxp-agent's certificate closes
// its connection at the next sweep, and it cannot come back.
func TestRealRevoked(t *testing.T) {
	t.Parallel()
	tools := pcpclients.Require(t)
	pki := pcpclients.NewPKI(t)
	e := &realEnv{tools: tools, tb: startBroker(t, pki, Options{Revocations: pki.CA, RevocationCheck: 50 * time.Millisecond})}
	a := e.agent(t, "agent05.example.com", 1)
	uri := "pcp://agent05.example.com/agent"
	if ok, _ := e.tb.Connected(context.Background(), uri); !ok {
		t.Fatal("not connected before the revocation")
	}
	if err := pki.CA.Revoke(context.Background(), "agent05.example.com"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the revoked agent's disconnection", func() bool {
		ok, _ := e.tb.Connected(context.Background(), uri)
		return !ok
	})
	// It retries, and is refused (the TLS handshake or the upgrade).
	time.Sleep(2 * time.Second)
	if ok, _ := e.tb.Connected(context.Background(), uri); ok || a.Associations() != 1 {
		t.Fatalf("the revoked agent came back (associations %d)", a.Associations())
	}
	if st := e.tb.Stats(); st.RevokedClosed != 1 {
		t.Errorf("stats %+v", st)
	}
}

// TestRealConnectionLimit: over MaxConnections, a real controller is
// refused (HTTP 503) while the agent already connected keeps working.
func TestRealConnectionLimit(t *testing.T) {
	t.Parallel()
	e := newRealEnv(t, Options{MaxConnections: 1})
	e.agent(t, "agent06.example.com", 1)
	res := e.request(t, pcpclients.RequestOptions{Targets: []string{"pcp://agent06.example.com/agent"}, Blocking: true, Timeout: 5})
	if res.ExitCode == 0 || !strings.Contains(res.Stderr, "could not connect/associate") {
		t.Fatalf("a connection over the limit was served: exit %d %+v", res.ExitCode, res.Messages)
	}
	if st := e.tb.Stats(); st.Connections != 1 || st.Rejected == 0 {
		t.Errorf("stats %+v", st)
	}
}

// TestRealPingPong: pxp-agent's websocket pings (every 6 s here, instead
// of 120 s; it wants its 5 s pong timeout below the interval) are answered
// and keep its connection open across two idle timeouts of 9 s.
func TestRealPingPong(t *testing.T) {
	t.Parallel()
	e := newRealEnv(t, Options{IdleTimeout: 9 * time.Second})
	a := e.agentWith(t, "agent07.example.com", 1, map[string]any{"ping-interval": 6})
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	if err := a.WaitLog(ctx, "WebSocket onPong event", 3); err != nil {
		t.Fatal(err)
	}
	if n := a.Associations(); n != 1 || e.tb.Stats().IdleClosed != 0 {
		t.Fatalf("associations %d, stats %+v", n, e.tb.Stats())
	}
}

// TestRealPuppetRun: the request the farm's jobs send, a non-blocking
// pxp-module-puppet run with notify_outcome, to agents of both PCP
// versions: a provisional response, then the final one (the run itself
// fails here, no Puppet server, which is still a valid PXP answer).
func TestRealPuppetRun(t *testing.T) {
	t.Parallel()
	e := newRealEnv(t, Options{})
	e.agent(t, "agent08.example.com", 1)
	e.agent(t, "agent09.example.com", 2)
	res := e.request(t, pcpclients.RequestOptions{
		Targets: []string{"pcp://agent08.example.com/agent", "pcp://agent09.example.com/agent"},
		Module:  "pxp-module-puppet", Action: "run", Params: `{"flags":["--noop"]}`, NotifyOutcome: true, Timeout: 90})
	if res.ExitCode != 0 {
		t.Fatalf("exit %d %s %+v", res.ExitCode, res.Stderr, res.Messages)
	}
	for _, typ := range []string{"rpc_provisional_response", "rpc_non_blocking_response"} {
		from := map[string]bool{}
		for _, m := range res.OfType(typ) {
			from[m.Envelope.Sender] = true
		}
		if !from["pcp://agent08.example.com/agent"] || !from["pcp://agent09.example.com/agent"] {
			t.Errorf("%s from %v", typ, from)
		}
	}
}

// TestRealTwoTasks: two broker tasks share presence and inboxes
// (memstore); a real controller on one reaches a real pxp-agent on the
// other, by URI and through pcp-ping's wildcard with a destination report.
func TestRealTwoTasks(t *testing.T) {
	t.Parallel()
	tools := pcpclients.Require(t)
	pki := pcpclients.NewPKI(t)
	store := memstore.New()
	a := &realEnv{tools: tools, tb: startBroker(t, pki, Options{Name: "task-a", Presence: store, Inbox: store})}
	b := &realEnv{tools: tools, tb: startBroker(t, pki, Options{Name: "task-b", Presence: store, Inbox: store})}
	a.agent(t, "agent10.example.com", 1)
	b.agent(t, "agent11.example.com", 2)
	res := b.request(t, pcpclients.RequestOptions{Targets: []string{"pcp://agent10.example.com/agent"},
		Blocking: true, Params: `{"argument":"across"}`})
	if got := res.OfType("rpc_blocking_response"); res.ExitCode != 0 || len(got) != 1 || echoOutcome(t, got[0]) != "across" {
		t.Fatalf("exit %d %s %+v", res.ExitCode, res.Stderr, res.Messages)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ping, err := tools.Ping(ctx, a.tb.wss("/pcp/"), identity(t, pki, "controller01.example.com"))
	if err != nil {
		t.Fatal(err)
	}
	if !ping.Complete || !sameSet(ping.Responders, []string{"pcp://agent10.example.com/agent", "pcp://agent11.example.com/agent"}) {
		t.Fatalf("pcp-ping: %+v", ping)
	}
	waitFor(t, "relayed counts", func() bool { return a.tb.Stats().MessagesRelayed > 0 && b.tb.Stats().MessagesRelayed > 0 })
}

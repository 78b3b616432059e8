package broker

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/compilefarm/compilefarm/internal/pcpclients"
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
	url := e.tb.wss("/pcp/")
	if version == 2 {
		url = e.tb.wss("/pcp2/")
	}
	a, err := e.tools.StartAgent(pcpclients.AgentOptions{Broker: url, PCPVersion: version,
		Identity: identity(t, e.tb.pki, certname), Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Stop() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := a.WaitAssociated(ctx, 1); err != nil {
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

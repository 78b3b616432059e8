package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/compilefarm/compilefarm/pkg/pcp/message"
)

// TestMain lets the test binary be the broker process `run` starts: run
// starts its own executable with "serve" and PCPBENCH_CHILD=serve in the
// environment, and here that executable is this test binary.
func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "serve" && len(os.Args) > 1 && os.Args[1] == "serve" {
		if err := serveMain(os.Args[2:]); err != nil {
			os.Stderr.WriteString("pcpbench serve: " + err.Error() + "\n")
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestRunSmall runs the whole benchmark at a small size, end to end: a
// broker process, 50 agents, 2 controllers, a restart. It checks that every
// phase completes and the report has its rows, not how fast anything is.
func TestRunSmall(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	o := runOptions{
		conns: 50, controllers: 2, inflight: 4, dialConcurrency: 10,
		duration: time.Second, connectTimeout: 30 * time.Second, reassociateTimeout: 30 * time.Second,
		progressEvery: time.Second, logLevel: "warn", restart: "term", profileDir: t.TempDir(),
	}
	res, err := run(ctx, o, func(s string) { t.Log(s) })
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	if res.Associated != 50 || res.Reassociated != 50 {
		t.Errorf("associated %d, re-associated %d; want 50 and 50", res.Associated, res.Reassociated)
	}
	if res.RoundTrips == 0 || res.RouteLost != 0 || len(res.RouteErrors) != 0 {
		t.Errorf("routing: %d round trips, %d lost, errors %v; want some, none lost, no errors", res.RoundTrips, res.RouteLost, res.RouteErrors)
	}
	if res.After.RSS <= 0 || res.After.Goroutines <= res.Before.Goroutines {
		t.Errorf("broker samples before %+v, after %+v: want an RSS and more goroutines with the connections", res.Before, res.After)
	}
	if res.BrokerRouted <= 0 {
		t.Errorf("the broker's routed-message count was not read (%v): has Stats' messages_routed changed name?", res.BrokerRouted)
	}
	for _, name := range []string{"broker-cpu-associate.pprof", "broker-cpu-routing.pprof", "broker-cpu-reassociate.pprof",
		"broker-heap.pprof", "broker-goroutine.pprof"} {
		if st, err := os.Stat(filepath.Join(o.profileDir, name)); err != nil || st.Size() == 0 {
			t.Errorf("profile %s: %v (want a non-empty file)", name, err)
		}
	}
	var md bytes.Buffer
	res.Command = "pcpbench run --conns 50"
	res.writeMarkdown(&md)
	for _, want := range []string{"## PCP broker: 50 connections", "| time to associate all |", "| memory per connection",
		"| messages routed per second", "| re-association after a restart: all associated again |", "| routing |", "pcpbench run --conns 50"} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("the report lacks %q:\n%s", want, md.String())
		}
	}
}

func TestEchoResponse(t *testing.T) {
	req := newEchoRequestForTest(t)
	resp, err := echoResponse(req, "pcp://agent-1.test/agent")
	if err != nil {
		t.Fatal(err)
	}
	if resp.MessageType != typeBlockingResponse || len(resp.Targets) != 1 || resp.Targets[0] != req.Sender {
		t.Errorf("response %+v: want an rpc_blocking_response to %s", resp, req.Sender)
	}
	if want := `{"transaction_id":"t-1","results":{"outcome":"hello"}}`; string(resp.Data) != want {
		t.Errorf("data %s, want %s", resp.Data, want)
	}
}

func newEchoRequestForTest(t *testing.T) *message.Message {
	t.Helper()
	return &message.Message{
		ID:          newID(),
		MessageType: typeBlockingRequest,
		Sender:      "pcp://controller-1.test/controller",
		Targets:     []string{"pcp://agent-1.test/agent"},
		Expires:     time.Now().Add(time.Minute),
		Data:        []byte(`{"transaction_id":"t-1","module":"echo","action":"echo","params":{"argument":"hello"}}`),
	}
}

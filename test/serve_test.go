package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestServeAWS runs two `broker serve --backend aws` front doors on the
// emulated AWS backends with the compile Lambda (real bootstrap, local
// Runtime API, SQS pollers): a real puppet agent bootstraps its
// certificate, gets its catalog and files and reports through one front
// door, then the other serves it the same catalog; 100 CSRs sent to both at
// once get 100 distinct serials.
func TestServeAWS(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	a := startAWS(t, ctx)
	envs, caDir := copyExampleEnvs(t), t.TempDir()
	s1 := startBroker(t, a.Env, a.serveArgs(caDir, envs, t.TempDir())...)
	s2 := startBroker(t, a.Env, a.serveArgs(caDir, envs, t.TempDir())...)
	if out, err := s1.brokerCLI("code", "deploy", "production"); err != nil {
		t.Fatalf("code deploy through serve: %v\n%s", err, out)
	}
	_, pollers := a.startCompileLambda(t, ctx)
	pollCtx, stopPolling := context.WithCancel(ctx)
	defer stopPolling()
	pollForever(pollCtx, t, pollers)

	agent := newAgent(t, "fleet1.example.test")
	if code, out := agent.run(t, s1); code != 2 {
		t.Fatalf("first run through front door 1: exit %d\n%s", code, out)
	}
	checkManaged(t, agent, "base")
	if code, out := agent.run(t, s2); code != 0 {
		t.Fatalf("second run through front door 2: exit %d, want 0 (the same catalog)\n%s", code, out)
	}
	n, err := a.State.GetNode(ctx, agent.Certname)
	if err != nil || n.Report == nil || n.Report.Status != "unchanged" || n.Catalog == nil {
		t.Errorf("node in DynamoDB after two runs: %+v %v", n.Report, err)
	}

	// 100 certificate requests at once, half to each front door.
	var wg sync.WaitGroup
	for i := 0; i < 100; i++ {
		f := s1
		if i%2 == 1 {
			f = s2
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := tryEnrol(f, fmt.Sprintf("csr%03d.example.test", i)); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	list, err := s2.brokerCLI("ca", "list")
	if err != nil {
		t.Fatalf("ca list: %v\n%s", err, list)
	}
	serials := map[string]string{}
	for _, line := range strings.Split(list, "\n") {
		f := strings.Fields(line)
		if len(f) >= 3 && strings.HasPrefix(f[0], "csr") && f[1] == "signed" {
			if other, dup := serials[f[2]]; dup {
				t.Errorf("serial %s issued to %s and %s", f[2], other, f[0])
			}
			serials[f[2]] = f[0]
		}
	}
	if len(serials) != 100 {
		t.Errorf("%d distinct serials for 100 concurrent requests", len(serials))
	}
}

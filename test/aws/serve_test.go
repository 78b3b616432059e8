package aws

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/compilefarm/compilefarm/test/e2e"
)

// TestServeAWS runs two `broker serve --backend aws` front doors on the
// emulated AWS backends with the compile Lambda (real bootstrap, local
// Runtime API, SQS pollers), signing with one CA whose records are in
// DynamoDB and whose key is in KMS (TestCAKeyInKMSAWS checks what that
// means): a real puppet agent
// bootstraps its certificate, gets its catalog and files and reports
// through one front door, then the other serves it the same catalog; 100
// CSRs sent to both at once get 100 distinct serials. A third front door
// proxies CA requests to the first (--ca-upstream), as PE compilers do: it
// gets its own certificate from there, and an agent enrolled through it
// holds a certificate of the fleet CA and gets its catalog.
func TestServeAWS(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: real brokers, Ruby Puppet and a puppet agent; skipped with -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	a := e2e.StartAWS(t, ctx)
	envs := e2e.CopyExampleEnvs(t)
	doors, _ := a.StartFleet(t, ctx, envs,
		[]string{"--allow-subject-alt-names", "--certname", "door1.example.test"}, []string{"--certname", "door2.example.test"})
	s1, s2 := doors[0], doors[1]

	agent := e2e.NewAgent(t, "fleet1.example.test")
	if code, out := agent.Run(t, s1); code != 2 {
		t.Fatalf("first run through front door 1: exit %d\n%s", code, out)
	}
	e2e.CheckManaged(t, agent, "base")
	if code, out := agent.Run(t, s2); code != 0 {
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
			if _, err := e2e.TryEnrol(f, fmt.Sprintf("csr%03d.example.test", i)); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	list, err := s2.CLI("ca", "list")
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

	// A front door without a CA of its own, proxying to front door 1.
	s3 := e2e.StartBroker(t, a.Env, a.ServeProxyArgs(envs, t.TempDir(), s1.Addr)...)
	proxied := e2e.NewAgent(t, "fleet3.example.test")
	if code, out := proxied.Run(t, s3); code != 2 {
		t.Fatalf("first run through the proxying front door: exit %d\n%s", code, out)
	}
	e2e.CheckManaged(t, proxied, "base")
	list, err = s1.CLI("ca", "list")
	if err != nil {
		t.Fatalf("ca list: %v\n%s", err, list)
	}
	for _, name := range []string{"fleet3.example.test", "compiler3.example.test"} {
		if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + `\s+signed\s`).MatchString(list) {
			t.Errorf("the fleet CA holds no signed certificate for %s:\n%s", name, list)
		}
	}
	if out, err := s3.CLI("ca", "sign", "someone.example.test"); err == nil || !strings.Contains(out, "upstream") {
		t.Errorf("ca sign on the proxying front door: %v\n%s; want an error pointing to the upstream CA", err, out)
	}
}

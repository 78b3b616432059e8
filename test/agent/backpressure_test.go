package agent

import (
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/compilefarm/compilefarm/test/e2e"
)

// TestAgentRetriesAfterRefusal: a real agent whose catalog request finds
// the front door full (one heavy slot, held by a certificate request whose
// body never ends, and no queue) is answered 503 + Retry-After 1, sleeps
// that second and sends the request again, which the freed slot takes: the
// run succeeds.
//
// Puppet before PUP-11853 (puppetlabs/puppet#9084, 2023; Debian 12 ships
// 7.23.0) sleeps as told but then fails the request: its HTTP client
// closes the connection inside Net::HTTP's request block and reads the
// 503's body from the closed socket ("attempt to read body out of block").
// With such an agent the test checks the sleep, the failed run, and that
// the next run succeeds.
func TestAgentRetriesAfterRefusal(t *testing.T) {
	if testing.Short() {
		t.Skip("needs puppet agent; skipped with -short")
	}
	f := e2e.StartFarm(t, t.TempDir(), e2e.CopyExampleEnvs(t),
		"--max-in-flight", "1", "--max-queued", "0", "--retry-after", "1s", "--retry-after-jitter", "0s")
	a := e2e.NewAgent(t, "agent1.example.test")
	if code, out := a.Run(t, f); code != 2 {
		t.Fatalf("first run: exit %d, want 2\n%s", code, out)
	}

	hold := holdHeavySlot(t, f)
	defer hold.Close()
	const refusedSample = `compilefarm_frontdoor_refused_total{lane="heavy",reason="queue_full"}`
	refusedBefore := f.Metric(refusedSample)
	// Free the slot once the agent was refused (from a goroutine of its
	// own: the test's goroutine runs the agent).
	released := make(chan error, 1)
	go func() {
		deadline := time.Now().Add(3 * time.Minute)
		for time.Now().Before(deadline) {
			if v, err := scrape(f.Metrics, refusedSample); err == nil && v > refusedBefore {
				released <- hold.Close()
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		hold.Close()
		released <- fmt.Errorf("no refusal within 3 minutes")
	}()
	// --environment: the agent asks for no node first, so its catalog
	// request is its first one that needs the heavy slot.
	code, out := a.Run(t, f, "--environment", "production")
	if err := <-released; err != nil {
		t.Fatalf("the held slot: %v\nagent output:\n%s", err, out)
	}
	if !strings.Contains(out, "Sleeping for 1 seconds before retrying the request") {
		t.Errorf("the agent did not honour Retry-After 1:\n%s", out)
	}
	if b, err := os.ReadFile(f.LogPath); err != nil || !strings.Contains(string(b), "front door at capacity") ||
		!strings.Contains(string(b), "path=/puppet/v3/catalog/agent1.example.test") {
		t.Errorf("no refusal of the catalog request logged (%v)", err)
	}
	if strings.Contains(out, "attempt to read body out of block") {
		t.Logf("this puppet agent predates PUP-11853: it slept as told, then failed the request (exit %d); checking its next run", code)
		if code != 1 {
			t.Errorf("run with the failed retry: exit %d, want 1\n%s", code, out)
		}
		code, out = a.Run(t, f, "--environment", "production")
	}
	if code != 0 {
		t.Fatalf("run after the refusal: exit %d, want 0\n%s", code, out)
	}
	if got := f.Nodes()[a.Certname]; got.Report == nil || got.Report.Status != "unchanged" {
		t.Errorf("report of the run: %+v, want status unchanged", got.Report)
	}
}

// holdHeavySlot takes the front door's heavy slot (with --max-in-flight 1)
// with a certificate request whose body never ends, and returns once the
// farm counts it in flight. Closing the connection frees the slot; nothing
// is stored.
func holdHeavySlot(t *testing.T, f *e2e.Farm) io.Closer {
	t.Helper()
	conn, err := tls.Dial("tcp", f.Addr, &tls.Config{InsecureSkipVerify: true})
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(conn, "PUT /puppet-ca/v1/certificate_request/holder.example.test HTTP/1.1\r\nHost: localhost\r\n"+
		"Content-Type: text/plain\r\nContent-Length: 1000\r\n\r\n-----BEGIN CERTIFICATE REQUEST-----\n")
	e2e.WaitFor(t, "the held request to take the heavy slot", time.Minute, func() bool {
		return f.Metric(`compilefarm_frontdoor_in_flight{lane="heavy"}`) == 1
	})
	return conn
}

// scrape returns one sample of the farm's metrics, for goroutines other
// than the test's (e2e.Farm.metric fails the test).
func scrape(metrics, sample string) (float64, error) {
	resp, err := http.Get(metrics + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if name, val, ok := strings.Cut(line, " "); ok && name == sample {
			return strconv.ParseFloat(strings.TrimSpace(val), 64)
		}
	}
	return 0, fmt.Errorf("no sample %s", sample)
}

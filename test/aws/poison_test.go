package aws

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/compilefarm/compilefarm/pkg/farm"
	"github.com/compilefarm/compilefarm/test/e2e"
)

// TestPoisonJobAgentKeepsCatalog runs one `broker serve --backend aws` front
// door with the compile Lambda: a real agent gets and applies its catalog,
// then code that cannot compile is deployed to its environment. The node's
// recompile fails on every delivery and ends on a dead-letter queue, the
// node record shows the compile error, and the agent's next run is served
// its last catalog (the old code) and applies it without a failure.
func TestPoisonJobAgentKeepsCatalog(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: real brokers, Ruby Puppet and a puppet agent; skipped with -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	a := e2e.StartAWS(t, ctx)
	envs := e2e.CopyExampleEnvs(t)
	doors, rt := a.StartFleet(t, ctx, envs, nil)
	s := doors[0]

	agent := e2e.NewAgent(t, "poison1.example.test")
	if code, out := agent.Run(t, s); code != 2 {
		t.Fatalf("first run: exit %d, want 2 (changes applied)\n%s", code, out)
	}
	e2e.CheckManaged(t, agent, "base")
	before, err := a.State.GetNode(ctx, agent.Certname)
	if err != nil || before.Catalog == nil || before.Compile == nil || before.Compile.Result != farm.ResultOK {
		t.Fatalf("node after its first compile: %+v %v", before, err)
	}
	oldCode := before.Catalog.CodeID
	if got := cachedCatalogCodeID(t, agent); got != oldCode {
		t.Fatalf("first catalog applied has code_id %q, the node record %q", got, oldCode)
	}
	managed := snapshotFiles(t, agent.Root)

	// Break the production code and deploy it through the front door.
	site := filepath.Join(envs, "production", "manifests", "site.pp")
	if err := os.WriteFile(site, []byte("node default {\n  include role\n  file { '/x': ensure => \n}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// The deploy follows its wave until every compile finished, so it ends
	// once the failure is recorded; bounded, so a regression fails the test
	// instead of hanging it.
	out, err := s.CLI("code", "deploy", "production")
	if err != nil || !strings.Contains(out, "1 nodes queued for recompile") || !strings.Contains(out, "failed 1") ||
		!strings.Contains(out, "1 nodes failed to compile with the new code") {
		t.Fatalf("deploy of the broken code: %v\n%s", err, out)
	}
	env, err := a.State.GetEnvironment(ctx, "production")
	if err != nil || env.CodeID == "" || env.CodeID == oldCode {
		t.Fatalf("environment after the broken deploy: %+v %v (old code %s)", env, err, oldCode)
	}
	newCode := env.CodeID

	// The recompile fails on each of its deliveries (maxReceiveCount 2)
	// and the queue dead-letters it.
	job := waitDeadLetter(t, ctx, a, 2*time.Minute)
	if job.Certname != agent.Certname || job.CodeID != newCode || job.Environment != "production" {
		t.Errorf("dead-lettered job: %+v, want %s's compile of code %s", job, agent.Certname, newCode)
	}
	if attempts := failedAttempts(rt.Output(), agent.Certname, newCode); len(attempts) != 2 || !attempts[1] || !attempts[2] {
		t.Errorf("compile failures logged for attempts %v, want attempts 1 and 2 (each of the configured 2 deliveries fails)", attempts)
	}
	if st, err := a.Queue.Stats(ctx); err != nil {
		t.Fatal(err)
	} else {
		for _, q := range st {
			if q.Depth != 0 || q.InFlight != 0 {
				t.Errorf("compile queue still holds the job after it was dead-lettered: %+v", st)
			}
		}
	}

	// The node shows the error and keeps its last catalog.
	n, err := a.State.GetNode(ctx, agent.Certname)
	if err != nil {
		t.Fatal(err)
	}
	if n.Compile == nil || n.Compile.Result != farm.ResultFailed || n.Compile.CodeID != newCode ||
		!strings.Contains(n.Compile.Error, "Syntax error") || !strings.Contains(n.Compile.Error, "site.pp") {
		t.Errorf("the node does not show the compile error of code %s: %+v", newCode, n.Compile)
	}
	if n.Catalog == nil || n.Catalog.Digest != before.Catalog.Digest || n.Catalog.CodeID != oldCode {
		t.Errorf("the node's catalog moved: %+v -> %+v", before.Catalog, n.Catalog)
	}
	if n.Pending() {
		t.Errorf("the node's dead-lettered compile still counts as pending: %+v", n.Requested)
	}

	// The agent's next run gets its last catalog from the farm, not its cache.
	code, out := agent.Run(t, s)
	if code != 0 {
		t.Fatalf("run after the broken deploy: exit %d, want 0 (the last catalog, nothing to change)\n%s", code, out)
	}
	// (Facter may log unrelated errors when not run as root, so look for
	// the catalog's failure modes rather than any "Error:".)
	for _, bad := range []string{"Could not retrieve catalog", "Using cached catalog", "Syntax error", "Could not parse",
		"Failed to apply catalog", "Error 500", "Server Error"} {
		if strings.Contains(out, bad) {
			t.Errorf("run after the broken deploy shows %q:\n%s", bad, out)
		}
	}
	if !strings.Contains(out, "Applying configuration version '"+oldCode+"'") {
		t.Errorf("run after the broken deploy does not apply the old code's catalog (configuration version %s):\n%s", oldCode, out)
	}
	e2e.CheckManaged(t, agent, "base")
	for rel, was := range managed {
		if now, err := os.ReadFile(filepath.Join(agent.Root, rel)); err != nil || string(now) != was {
			t.Errorf("managed file %s changed: %q -> %q (%v)", rel, was, now, err)
		}
	}
	if got := cachedCatalogCodeID(t, agent); got != oldCode {
		t.Errorf("catalog served after the broken deploy has code_id %q, want the old %q (new code %s)", got, oldCode, newCode)
	}
	after, err := a.State.GetNode(ctx, agent.Certname)
	if err != nil || after.Report == nil || after.Report.Status != "unchanged" {
		t.Errorf("report after the broken deploy: %+v %v, want status unchanged", after.Report, err)
	} else if after.Report.CatalogUUID != "" && after.Report.CatalogUUID != before.Catalog.UUID {
		t.Errorf("report names catalog %s, want the last good one %s", after.Report.CatalogUUID, before.Catalog.UUID)
	}
	if after.Catalog == nil || after.Catalog.Digest != before.Catalog.Digest {
		t.Errorf("the node's catalog moved after the agent's run: %+v", after.Catalog)
	}
}

// waitDeadLetter polls both lanes' dead-letter queues until one holds a
// message and returns its job.
func waitDeadLetter(t *testing.T, ctx context.Context, a *e2e.AWS, limit time.Duration) farm.Job {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		for _, lane := range []farm.Lane{farm.LaneUrgent, farm.LaneBulk} {
			got, err := a.SQS.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
				QueueUrl: aws.String(a.Queues.DLQ(lane)), MaxNumberOfMessages: 10, VisibilityTimeout: 60,
				MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
			})
			if err != nil {
				t.Fatalf("receive from the %s dead-letter queue: %v", lane, err)
			}
			if len(got.Messages) > 1 {
				t.Errorf("%d messages on the %s dead-letter queue, want 1", len(got.Messages), lane)
			}
			if len(got.Messages) > 0 {
				m := got.Messages[0]
				var job farm.Job
				if err := json.Unmarshal([]byte(aws.ToString(m.Body)), &job); err != nil {
					t.Fatalf("dead-lettered message: %v: %s", err, aws.ToString(m.Body))
				}
				t.Logf("dead-lettered on the %s lane after %s receives: %+v", lane, m.Attributes["ApproximateReceiveCount"], job)
				return job
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no job reached a dead-letter queue within %s", limit)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// failedAttempts returns the delivery attempts the compile function logged
// as failed compiles of the node's code.
func failedAttempts(log, certname, codeID string) map[int]bool {
	attempts := map[int]bool{}
	re := regexp.MustCompile(`"attempt":(\d+)`)
	for _, line := range strings.Split(log, "\n") {
		if !strings.Contains(line, "compile failed") || !strings.Contains(line, `"node":"`+certname+`"`) ||
			!strings.Contains(line, codeID) {
			continue
		}
		if m := re.FindStringSubmatch(line); m != nil {
			n, _ := strconv.Atoi(m[1])
			attempts[n] = true
		}
	}
	return attempts
}

// cachedCatalogCodeID returns the code_id of the catalog the agent last
// received (its cached copy).
func cachedCatalogCodeID(t *testing.T, a *e2e.Agent) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(a.Dir, "var", "client_data", "catalog", a.Certname+".json"))
	if err != nil {
		t.Fatalf("agent's cached catalog: %v", err)
	}
	var cat struct {
		CodeID string `json:"code_id"`
	}
	if err := json.Unmarshal(b, &cat); err != nil {
		t.Fatalf("agent's cached catalog: %v", err)
	}
	return cat.CodeID
}

// snapshotFiles returns the contents of the regular files under root by
// relative path.
func snapshotFiles(t *testing.T, root string) map[string]string {
	t.Helper()
	files := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		files[rel] = string(b)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatalf("no managed files under %s", root)
	}
	return files
}

package aws

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/compilefarm/compilefarm/pkg/code"
	"github.com/compilefarm/compilefarm/pkg/facts"
	"github.com/compilefarm/compilefarm/pkg/farm"
	"github.com/compilefarm/compilefarm/pkg/intake"
	"github.com/compilefarm/compilefarm/test/e2e"
)

// TestCompileLambda runs the real compile bootstrap under a local Lambda
// Runtime API, fed by an SQS poller building real SQS events, with S3,
// DynamoDB and SQS emulators on loopback: facts go in through the intake,
// the Lambda compiles and stores the catalog, a redelivered job changes
// nothing, and a node whose code cannot compile ends on the dead-letter
// queue with its error shown and its last catalog kept.
func TestCompileLambda(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: real brokers, Ruby Puppet and a puppet agent; skipped with -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	a := e2e.StartAWS(t, ctx)
	content, state, queue, sqsc, urls := a.Content, a.State, a.Queue, a.SQS, a.Queues

	// Deploy the example environment and a broken one, as a code deploy does.
	envs := e2e.CopyExampleEnvs(t)
	e2e.AddBrokenEnv(t, envs, "node default {\n  file { '/x': ensure => \n}\n")
	for _, name := range []string{"production", "broken"} {
		m, err := code.Snapshot(ctx, content, name, filepath.Join(envs, name))
		if err != nil {
			t.Fatal(err)
		}
		if err := state.PutEnvironment(ctx, farm.Environment{Name: name, CodeID: m.CodeID(), DeployedAt: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	filter, _ := facts.NewFilter(facts.DefaultVolatile)
	in := &intake.Intake{Content: content, Nodes: state, Envs: state, Queue: queue, Filter: filter}
	submit := func(name, env string, values map[string]any) {
		t.Helper()
		doc, _ := json.Marshal(map[string]any{"name": name, "values": values})
		if _, err := in.Submit(ctx, intake.Upload{Certname: name, Environment: env,
			Facts: facts.JSONDocument(doc)}); err != nil {
			t.Fatalf("submit facts of %s: %v", name, err)
		}
	}

	_, pollers := a.StartCompileLambda(t, ctx)
	poller := pollers[0] // the urgent lane
	drain := func(why string) {
		t.Helper()
		deadline := time.Now().Add(2 * time.Minute)
		for {
			got, _, err := poller.PollOnce(ctx, 1)
			if err != nil {
				t.Fatalf("%s: %v", why, err)
			}
			if got == 0 {
				st, _ := queue.Stats(ctx)
				if st[0].Depth == 0 && st[0].InFlight == 0 {
					return
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: the urgent queue did not drain", why)
			}
		}
	}

	good := e2e.SyntheticFacts("lambda1.example.test", 1)
	submit("lambda1.example.test", "production", good)
	drain("first compile")
	n, err := state.GetNode(ctx, "lambda1.example.test")
	if err != nil || n.Catalog == nil || n.Pending() || n.Compile.Result != farm.ResultOK {
		t.Fatalf("after the Lambda compiled: %+v %v", n, err)
	}
	cat, err := content.Get(ctx, farm.SpaceCatalogs, n.Catalog.Digest)
	if err != nil || !strings.Contains(string(cat), `"name":"lambda1.example.test"`) || !strings.Contains(string(cat), `"code_id":"`) {
		t.Fatalf("stored catalog: %v %.200s", err, cat)
	}

	// The same job delivered again changes nothing.
	job, _ := json.Marshal(farm.Job{Certname: n.Certname, Environment: "production", CodeID: n.Requested.CodeID,
		FactsDigest: n.Requested.FactsDigest, Seq: n.Requested.Seq, Lane: farm.LaneUrgent})
	sqsc.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(urls.UrgentURL), MessageBody: aws.String(string(job))})
	drain("redelivered job")
	if again, _ := state.GetNode(ctx, n.Certname); again.Catalog.Digest != n.Catalog.Digest || again.Catalog.Seq != n.Catalog.Seq {
		t.Errorf("a redelivered job moved the catalog: %+v -> %+v", n.Catalog, again.Catalog)
	}

	// Poison: the node moves to an environment that cannot compile.
	submit("lambda1.example.test", "broken", good)
	drain("poison job")
	n2, _ := state.GetNode(ctx, n.Certname)
	if n2.Compile == nil || n2.Compile.Result != farm.ResultFailed || !strings.Contains(n2.Compile.Error, "Syntax error") {
		t.Errorf("the node does not show the compile error: %+v", n2.Compile)
	}
	if n2.Catalog == nil || n2.Catalog.Digest != n.Catalog.Digest {
		t.Errorf("the node lost its last catalog")
	}
	dlq, err := sqsc.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(urls.DLQ(farm.LaneUrgent)),
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameApproximateNumberOfMessages}})
	if err != nil || dlq.Attributes["ApproximateNumberOfMessages"] != "1" {
		t.Errorf("dead-letter queue: %v %v, want the poison job", dlq, err)
	}
}

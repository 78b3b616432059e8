package e2e

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/compilefarm/compilefarm/internal/emulator"
	"github.com/compilefarm/compilefarm/internal/lambdaruntime"
	"github.com/compilefarm/compilefarm/pkg/code"
	"github.com/compilefarm/compilefarm/pkg/compiler"
	"github.com/compilefarm/compilefarm/pkg/dynamostate"
	"github.com/compilefarm/compilefarm/pkg/facts"
	"github.com/compilefarm/compilefarm/pkg/farm"
	"github.com/compilefarm/compilefarm/pkg/s3store"
	"github.com/compilefarm/compilefarm/pkg/sqsqueue"
)

// TestCompileLambda runs the real compile bootstrap under a local Lambda
// Runtime API, fed by an SQS poller building real SQS events, with S3,
// DynamoDB and SQS emulators on loopback: facts go in through the intake,
// the Lambda compiles and stores the catalog, a redelivered job changes
// nothing, and a node whose code cannot compile ends on the dead-letter
// queue with its error shown and its last catalog kept.
func TestCompileLambda(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	s3emu, err := emulator.StartS3(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s3emu.Stop()
	ddbEmu, err := emulator.StartDynamoDB(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer ddbEmu.Stop()
	sqsEmu, err := emulator.StartSQS(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer sqsEmu.Stop()

	creds := credentials.NewStaticCredentialsProvider("test", "test", "")
	s3c := s3.New(s3.Options{Region: "us-east-1", Credentials: creds, BaseEndpoint: aws.String(s3emu.URL), UsePathStyle: true})
	if _, err := s3c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("farm")}); err != nil {
		t.Fatal(err)
	}
	content := s3store.New(s3c, "farm", s3store.Options{})
	state := dynamostate.New(dynamodb.New(dynamodb.Options{Region: "us-east-1", Credentials: creds, BaseEndpoint: aws.String(ddbEmu.URL)}),
		dynamostate.Options{NodesTable: "nodes", EnvironmentsTable: "environments"})
	if err := state.EnsureTables(ctx); err != nil {
		t.Fatal(err)
	}
	sqsc := sqs.New(sqs.Options{Region: "us-east-1", Credentials: creds, BaseEndpoint: aws.String(sqsEmu.URL)})
	urls, err := sqsqueue.EnsureQueues(ctx, sqsc, "farm", 2)
	if err != nil {
		t.Fatal(err)
	}
	queue := sqsqueue.New(sqsc, urls.Options())

	// Deploy the example environment and a broken one, as a code deploy does.
	envs := copyExampleEnvs(t)
	broken := filepath.Join(envs, "broken")
	if out, err := exec.Command("cp", "-a", filepath.Join(envs, "production"), broken).CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	os.WriteFile(filepath.Join(broken, "manifests", "site.pp"), []byte("node default {\n  file { '/x': ensure => \n}\n"), 0o644)
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
	intake := &compiler.Intake{Content: content, Nodes: state, Envs: state, Queue: queue, Filter: filter}
	submit := func(name, env string, values map[string]any) {
		t.Helper()
		doc, _ := json.Marshal(map[string]any{"name": name, "values": values})
		if _, err := intake.Submit(ctx, compiler.Upload{Certname: name, Environment: env,
			Document: func() ([]byte, error) { return doc, nil }}); err != nil {
			t.Fatalf("submit facts of %s: %v", name, err)
		}
	}

	// The real bootstrap, configured as the function would be.
	bin := filepath.Join(t.TempDir(), "bootstrap")
	if out, err := exec.Command("go", "build", "-o", bin, "../functions/compile").CombinedOutput(); err != nil {
		t.Fatalf("build the compile function: %v\n%s", err, out)
	}
	rt, err := lambdaruntime.Start(bin, []string{
		"AWS_REGION=us-east-1", "AWS_ACCESS_KEY_ID=test", "AWS_SECRET_ACCESS_KEY=test",
		"AWS_ENDPOINT_URL_S3=" + s3emu.URL, "AWS_ENDPOINT_URL_DYNAMODB=" + ddbEmu.URL, "AWS_ENDPOINT_URL_SQS=" + sqsEmu.URL,
		"COMPILEFARM_BUCKET=farm", "COMPILEFARM_NODES_TABLE=nodes", "COMPILEFARM_ENVIRONMENTS_TABLE=environments",
		"COMPILEFARM_URGENT_QUEUE_URL=" + urls.UrgentURL, "COMPILEFARM_BULK_QUEUE_URL=" + urls.BulkURL,
		"COMPILEFARM_MAX_RECEIVES=2", "COMPILEFARM_WORKDIR=" + t.TempDir(),
	}, 3*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		rt.Stop()
		if t.Failed() {
			t.Logf("function output:\n%s", tail(rt.Output(), 40))
		}
	}()
	poller := &lambdaruntime.Poller{SQS: sqsc, QueueURL: urls.UrgentURL, QueueARN: "arn:aws:sqs:us-east-1:000000000000:farm-urgent", Region: "us-east-1", Runtime: rt, VisibilityTimeout: 2}
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

	good := syntheticFacts("lambda1.example.test", 1)
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

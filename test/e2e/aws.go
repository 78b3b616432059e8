package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/compilefarm/compilefarm/internal/emulator"
	"github.com/compilefarm/compilefarm/internal/lambdaruntime"
	"github.com/compilefarm/compilefarm/internal/procgroup"
	"github.com/compilefarm/compilefarm/pkg/dynamostate"
	"github.com/compilefarm/compilefarm/pkg/s3store"
	"github.com/compilefarm/compilefarm/pkg/sqsqueue"
)

// AWS is the AWS backends of a farm on loopback emulators: a bucket,
// the node and environment tables, and the compile queues (maxReceiveCount
// 2) with their dead-letter queues; Secrets Manager and KMS for the CA key.
type AWS struct {
	S3URL, DynamoURL, SQSURL, SecretsURL, KMSURL string
	Queues                                       sqsqueue.QueueURLs
	Content                                      *s3store.Store
	State                                        *dynamostate.Store
	Queue                                        *sqsqueue.Queue
	SQS                                          *sqs.Client
	// Env is what a process needs to use these backends (AWS endpoints and
	// credentials).
	Env []string
	// LambdaEnv is more configuration for the compile function.
	LambdaEnv []string
	// CAKeyArgs name the fleet CA's key source, for `broker ca init` and
	// every `broker serve`: the KMS key CAKMSKey unless a test sets
	// another before the CA is made (InitCA, or the first ServeArgs).
	CAKeyArgs []string

	caOnce sync.Once
	caErr  error
}

// The fleet CA of serve tests: records in the CATable table, key in the
// KMS key CAKMSKey (made by `broker ca init`), or in the Secrets Manager
// secret CASecret for a test that imports a Puppet Server key.
const (
	CATable  = "farm-ca"
	CAKMSKey = "alias/compilefarm/ca"
	CASecret = "compilefarm/ca-key"
)

// QueriesTable is the table of the PuppetDB queries compiles made
// (broker serve's --queries-table, the compile function's
// COMPILEFARM_QUERIES_TABLE).
const QueriesTable = "queries"

func StartAWS(t *testing.T, ctx context.Context) *AWS {
	t.Helper()
	s3emu, err := emulator.StartS3(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s3emu.Stop)
	ddb, err := emulator.StartDynamoDB(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ddb.Stop)
	sq, err := emulator.StartSQS(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sq.Stop)
	creds := credentials.NewStaticCredentialsProvider("test", "test", "")
	s3c := s3.New(s3.Options{Region: "us-east-1", Credentials: creds, BaseEndpoint: aws.String(s3emu.URL), UsePathStyle: true})
	if _, err := s3c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("farm")}); err != nil {
		t.Fatal(err)
	}
	ddbc := dynamodb.New(dynamodb.Options{Region: "us-east-1", Credentials: creds, BaseEndpoint: aws.String(ddb.URL)})
	state := dynamostate.New(ddbc, dynamostate.Options{NodesTable: "nodes", IndexTable: "node-index", EnvironmentsTable: "environments",
		PresenceTable: "pcp-presence", JobsTable: "jobs", QueriesTable: QueriesTable})
	if err := state.EnsureTables(ctx); err != nil {
		t.Fatal(err)
	}
	if err := dynamostate.NewCAStore(ddbc, CATable).EnsureTable(ctx); err != nil {
		t.Fatal(err)
	}
	secrets, err := emulator.StartSecretsManager(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(secrets.Stop)
	kmsEmu, err := emulator.StartKMS(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kmsEmu.Stop)
	sqsc := sqs.New(sqs.Options{Region: "us-east-1", Credentials: creds, BaseEndpoint: aws.String(sq.URL)})
	urls, err := sqsqueue.EnsureQueues(ctx, sqsc, "farm", 2)
	if err != nil {
		t.Fatal(err)
	}
	return &AWS{
		S3URL: s3emu.URL, DynamoURL: ddb.URL, SQSURL: sq.URL, SecretsURL: secrets.URL, KMSURL: kmsEmu.URL, Queues: urls,
		Content: s3store.New(s3c, "farm", s3store.Options{}), State: state,
		Queue: sqsqueue.New(sqsc, urls.Options()), SQS: sqsc,
		Env: []string{
			"AWS_REGION=us-east-1", "AWS_ACCESS_KEY_ID=test", "AWS_SECRET_ACCESS_KEY=test",
			"AWS_ENDPOINT_URL_S3=" + s3emu.URL, "AWS_ENDPOINT_URL_DYNAMODB=" + ddb.URL, "AWS_ENDPOINT_URL_SQS=" + sq.URL,
			"AWS_ENDPOINT_URL_SECRETS_MANAGER=" + secrets.URL, "AWS_ENDPOINT_URL_KMS=" + kmsEmu.URL,
		},
		CAKeyArgs: []string{"--ca-key-kms", CAKMSKey},
	}
}

// InitCA makes the fleet CA with `broker ca init` (a 2048-bit key, for
// speed, when the key source holds none) and extra flags
// (--import-key FILE); only its first call does. ServeArgs calls it.
func (a *AWS) InitCA(t *testing.T, extra ...string) {
	t.Helper()
	a.caOnce.Do(func() {
		args := append(append([]string{"ca", "init"}, a.CAArgs()...), "--key-bits", "2048", "--name", "fleet")
		cmd := exec.Command(BrokerBin(t), append(args, extra...)...)
		cmd.Env = append(os.Environ(), a.Env...)
		if out, err := cmd.CombinedOutput(); err != nil {
			a.caErr = fmt.Errorf("broker %s: %v\n%s", strings.Join(cmd.Args[1:], " "), err, out)
		}
	})
	if a.caErr != nil {
		t.Fatal(a.caErr)
	}
}

// CAArgs are the flags naming the fleet CA: its table and key source.
func (a *AWS) CAArgs() []string {
	return append([]string{"--ca-table", CATable}, a.CAKeyArgs...)
}

// ServeArgs are the broker serve flags for these backends, the fleet CA
// in DynamoDB with its key in KMS (made by InitCA on first use; CAKeyArgs
// may name another key source), autosigning. extra flags go last.
func (a *AWS) ServeArgs(t *testing.T, envs, work string, extra ...string) []string {
	t.Helper()
	a.InitCA(t)
	return append(append(a.ServeBackendArgs(envs, work), a.CAArgs()...), append([]string{"--autosign"}, extra...)...)
}

// ServeBackendArgs are the broker serve flags every front door on these
// backends takes: listeners, storage, queues and code.
func (a *AWS) ServeBackendArgs(envs, work string) []string {
	return []string{"serve", "--backend", "aws", "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0",
		"--bucket", "farm", "--nodes-table", "nodes", "--node-index-table", "node-index", "--environments-table", "environments",
		"--urgent-queue-url", a.Queues.UrgentURL, "--bulk-queue-url", a.Queues.BulkURL,
		"--environments", envs, "--work", work}
}

// StartFleet starts one broker serve per entry of extraArgs (serveArgs
// plus those flags) on envs, deploys production through the first, and runs
// the compile Lambda with its pollers until the test ends.
func (a *AWS) StartFleet(t *testing.T, ctx context.Context, envs string, extraArgs ...[]string) ([]*Farm, *lambdaruntime.Runtime) {
	t.Helper()
	var doors []*Farm
	for _, extra := range extraArgs {
		work := t.TempDir()
		door := StartBroker(t, a.Env, a.ServeArgs(t, envs, work, extra...)...)
		door.Work = work
		doors = append(doors, door)
	}
	if out, err := doors[0].CLI("code", "deploy", "production"); err != nil {
		t.Fatalf("code deploy through serve: %v\n%s", err, out)
	}
	rt, pollers := a.StartCompileLambda(t, ctx)
	pollCtx, stopPolling := context.WithCancel(ctx)
	t.Cleanup(stopPolling)
	PollForever(pollCtx, t, pollers)
	return doors, rt
}

// PCPArgs are the broker serve flags of a task named name running the PCP
// broker on these backends (presence and jobs tables, an inbox queue per
// task).
func (a *AWS) PCPArgs(name string) []string {
	return []string{"--certname", name, "--pcp-listen", "127.0.0.1:0",
		"--presence-table", "pcp-presence", "--jobs-table", "jobs", "--pcp-inbox-prefix", "farm-pcp-"}
}

// ServeProxyArgs are the broker serve flags for a front door on these
// backends that proxies CA requests to upstream (host:port).
func (a *AWS) ServeProxyArgs(envs, work, upstream string) []string {
	return append(a.ServeBackendArgs(envs, work), "--ca-upstream", "https://"+upstream, "--certname", "compiler3.example.test")
}

// StartCompileLambda runs the real compile bootstrap under the local Lambda
// Runtime API with a poller per lane acting as the event source mapping.
func (a *AWS) StartCompileLambda(t *testing.T, ctx context.Context) (*lambdaruntime.Runtime, []*lambdaruntime.Poller) {
	t.Helper()
	rt, err := lambdaruntime.Start(CompileFunctionBin(t), append(append(slices.Clip(a.Env),
		"COMPILEFARM_BUCKET=farm", "COMPILEFARM_NODES_TABLE=nodes", "COMPILEFARM_NODE_INDEX_TABLE=node-index", "COMPILEFARM_ENVIRONMENTS_TABLE=environments",
		"COMPILEFARM_URGENT_QUEUE_URL="+a.Queues.UrgentURL, "COMPILEFARM_BULK_QUEUE_URL="+a.Queues.BulkURL,
		"COMPILEFARM_MAX_RECEIVES=2", "COMPILEFARM_WORKDIR="+t.TempDir(),
	), a.LambdaEnv...), 3*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		rt.Stop()
		if t.Failed() {
			t.Logf("compile function output:\n%s", procgroup.Tail(rt.Output(), 40))
		}
	})
	var pollers []*lambdaruntime.Poller
	for _, q := range []struct{ url, name string }{{a.Queues.UrgentURL, "urgent"}, {a.Queues.BulkURL, "bulk"}} {
		pollers = append(pollers, &lambdaruntime.Poller{SQS: a.SQS, QueueURL: q.url, Runtime: rt, Region: "us-east-1",
			QueueARN: "arn:aws:sqs:us-east-1:000000000000:farm-" + q.name, VisibilityTimeout: 2})
	}
	return rt, pollers
}

// PollForever runs the pollers until ctx ends (a Lambda concurrency of
// one), as the event source mapping would.
func PollForever(ctx context.Context, t *testing.T, pollers []*lambdaruntime.Poller) {
	go func() {
		for ctx.Err() == nil {
			for _, p := range pollers {
				if _, _, err := p.PollOnce(ctx, 1); err != nil && ctx.Err() == nil {
					t.Logf("poller: %v", err)
				}
			}
		}
	}()
}

// Package localstack_test runs localstack/run.sh's e2e, which on a
// developer's machine targets LocalStack, against the loopback emulators
// the other tests use, standing in for a deployed compilefarm-local: a
// bucket, the four tables, the queues with their dead-letter queues, and an
// outputs file shaped like `cdklocal deploy --outputs-file` writes it.
// Docker and LocalStack themselves are not needed (nor run).
package localstack_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/compilefarm/compilefarm/internal/emulator"
	"github.com/compilefarm/compilefarm/pkg/dynamostate"
	"github.com/compilefarm/compilefarm/pkg/sqsqueue"
)

func TestRunShE2EOnEmulators(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: emulators, Ruby Puppet and a real puppet agent; skipped with -short")
	}
	for _, tool := range []string{"bash", "curl", "puppet", "ruby"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is needed (scripts/install-deps.sh): %v", tool, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	start := func(p *emulator.Process, err error) *emulator.Process {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Stop)
		return p
	}
	s3e := start(emulator.StartS3(ctx, t.TempDir()))
	ddb := start(emulator.StartDynamoDB(ctx))
	sq := start(emulator.StartSQS(ctx))
	sm := start(emulator.StartSecretsManager(ctx))

	// The stack's resources, with names as CloudFormation would give them.
	creds := credentials.NewStaticCredentialsProvider("test", "test", "")
	s3c := s3.New(s3.Options{Region: "us-east-1", Credentials: creds, BaseEndpoint: aws.String(s3e.URL), UsePathStyle: true})
	if _, err := s3c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("compilefarm-local-content-1a2b3c")}); err != nil {
		t.Fatal(err)
	}
	ddbc := dynamodb.New(dynamodb.Options{Region: "us-east-1", Credentials: creds, BaseEndpoint: aws.String(ddb.URL)})
	if err := dynamostate.New(ddbc, dynamostate.Options{NodesTable: "compilefarm-local-nodes",
		IndexTable: "compilefarm-local-node-index", EnvironmentsTable: "compilefarm-local-environments"}).EnsureTables(ctx); err != nil {
		t.Fatal(err)
	}
	if err := dynamostate.NewCAStore(ddbc, "compilefarm-local-ca").EnsureTable(ctx); err != nil {
		t.Fatal(err)
	}
	sqsc := sqs.New(sqs.Options{Region: "us-east-1", Credentials: creds, BaseEndpoint: aws.String(sq.URL)})
	urls, err := sqsqueue.EnsureQueues(ctx, sqsc, "compilefarm-local", 3)
	if err != nil {
		t.Fatal(err)
	}
	// The outputs infra/farmstack declares, plus some it might (dead-letter
	// queues, ARNs) that must not be taken for the ones e2e needs.
	dir := t.TempDir()
	outputs := filepath.Join(dir, "outputs.json")
	b, _ := json.Marshal(map[string]map[string]string{"compilefarm-local": {
		"Bucket": "compilefarm-local-content-1a2b3c", "BucketArn": "arn:aws:s3:::compilefarm-local-content-1a2b3c",
		"NodesTable": "compilefarm-local-nodes", "NodeIndexTable": "compilefarm-local-node-index",
		"EnvironmentsTable": "compilefarm-local-environments", "CATable": "compilefarm-local-ca",
		"CAKmsKey": "arn:aws:kms:us-east-1:000000000000:key/6f2a0c9e-1b7d-4e3a-9c55-0d8e2f4a7b31", "UrgentQueueUrl": urls.UrgentURL, "BulkQueueUrl": urls.BulkURL,
		"UrgentDeadLetterQueueUrl": urls.UrgentURL + "-dlq", "CompileFunction": "compilefarm-local-compile",
		"ScalerFunction": "compilefarm-local-scaler",
	}})
	if err := os.WriteFile(outputs, b, 0o644); err != nil {
		t.Fatal(err)
	}
	// A health endpoint in LocalStack's place.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	health := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{"edition": "emulators", "version": "none"}`)
	})}
	go health.Serve(ln)
	t.Cleanup(func() { health.Close() })

	ports := make([]string, 3)
	for i := range ports {
		p, err := emulator.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		ports[i] = strconv.Itoa(p)
	}
	tmp := t.TempDir()
	runE2E := func(t *testing.T) string {
		t.Helper()
		cmd := exec.CommandContext(ctx, "bash", "run.sh", "e2e")
		cmd.Env = append(os.Environ(),
			"LOCALSTACK_TIER=free", "LOCALSTACK_AUTH_TOKEN=", "LOCALSTACK_OUTPUTS="+outputs,
			"LOCALSTACK_HEALTH_URL=http://"+ln.Addr().String()+"/_localstack/health",
			// Per-service endpoints win over run.sh's AWS_ENDPOINT_URL.
			"AWS_ENDPOINT_URL_S3="+s3e.URL, "AWS_ENDPOINT_URL_DYNAMODB="+ddb.URL, "AWS_ENDPOINT_URL_SQS="+sq.URL,
			"AWS_ENDPOINT_URL_SECRETS_MANAGER="+sm.URL,
			// No KMS among the loopback emulators: the CA's key goes in a
			// secret that ca init creates, whatever broker supports.
			"E2E_CA_KEY=secret",
			"E2E_PORT="+ports[0], "E2E_ADMIN_PORT="+ports[1], "E2E_METRICS_PORT="+ports[2],
			"E2E_FIRST_COMPILE_WAIT=2m", "TMPDIR="+tmp, "KEEP=")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("run.sh e2e: %v\n%s%s", err, out, keptLogs(tmp))
		}
		return string(out)
	}
	out := runE2E(t)
	for _, want := range []string{"puppet agent exited 2", ".localstack.test  production", "second run exited 0", "e2e passed"} {
		if !strings.Contains(out, want) {
			t.Errorf("run.sh e2e output lacks %q:\n%s", want, out)
		}
	}
	// Again on the same resources: the CA is kept, the code is unchanged,
	// a new agent joins.
	out = runE2E(t)
	for _, want := range []string{"code unchanged", "e2e passed"} {
		if !strings.Contains(out, want) {
			t.Errorf("second run.sh e2e output lacks %q:\n%s", want, out)
		}
	}
}

// keptLogs returns the tails of the logs run.sh keeps after a failure.
func keptLogs(tmp string) string {
	var b strings.Builder
	logs, _ := filepath.Glob(filepath.Join(tmp, "compilefarm-localstack-e2e.*", "*.log"))
	for _, l := range logs {
		data, _ := os.ReadFile(l)
		lines := strings.Split(string(data), "\n")
		if len(lines) > 30 {
			lines = lines[len(lines)-30:]
		}
		fmt.Fprintf(&b, "--- %s\n%s\n", l, strings.Join(lines, "\n"))
	}
	return b.String()
}

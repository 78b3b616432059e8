// Command compile is the compile Lambda: an SQS event source mapping hands
// it batches of compile jobs; it compiles each with the Ruby Puppet engine
// (one worker process, started in the init phase and reused by every
// invocation), stores catalogs in S3 and moves node pointers in DynamoDB,
// and reports the jobs to deliver again (ReportBatchItemFailures).
//
// Configuration (environment): COMPILEFARM_BUCKET, COMPILEFARM_PREFIX,
// COMPILEFARM_NODES_TABLE, COMPILEFARM_NODE_INDEX_TABLE, COMPILEFARM_ENVIRONMENTS_TABLE,
// COMPILEFARM_URGENT_QUEUE_URL, COMPILEFARM_BULK_QUEUE_URL (for collectors'
// recompiles), COMPILEFARM_MAX_RECEIVES (the queues' maxReceiveCount,
// default 3), COMPILEFARM_WORKDIR (default /tmp/compilefarm),
// COMPILEFARM_RUBY (default ruby), COMPILEFARM_COMPILE_TIMEOUT (default 2m),
// COMPILEFARM_EXTERNAL_NODES (an external node classifier, as broker's
// --external-nodes: run again for each compile, as Puppet Server runs it per
// catalog) and COMPILEFARM_EXTERNAL_NODES_TIMEOUT (default 10s),
// COMPILEFARM_EYAML_KEYS (the directory with the keys of encrypted Hiera
// data, as broker dev's --eyaml-keys); COMPILEFARM_PUPPETDB (PuppetDB's
// URLs, comma-separated, as broker's --puppetdb: for puppetdb_query() in
// manifests), COMPILEFARM_PUPPETDB_CA, COMPILEFARM_PUPPETDB_CERT and
// COMPILEFARM_PUPPETDB_KEY (PEM text, or the path of a PEM file: the CA
// PuppetDB's certificate comes from, and the client certificate and key
// presented to it; needed for an https URL), or, as the stack gives them,
// COMPILEFARM_PUPPETDB_IDENTITY_SECRET (a Secrets Manager secret holding
// JSON {"cert": PEM, "key": PEM}) and COMPILEFARM_PUPPETDB_CA_SECRET (one
// holding the CA's PEM), read once at init; COMPILEFARM_STORECONFIGS
// (farm, the default, or puppetdb, as broker's --storeconfigs) and
// COMPILEFARM_QUERIES_TABLE (the DynamoDB table where compiles record the
// PuppetDB queries they make, which the fleet runs again);
// AWS endpoints and credentials from the standard AWS configuration.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/compilefarm/compilefarm/pkg/classifier"
	"github.com/compilefarm/compilefarm/pkg/code"
	"github.com/compilefarm/compilefarm/pkg/compiler"
	"github.com/compilefarm/compilefarm/pkg/compiler/puppet"
	"github.com/compilefarm/compilefarm/pkg/dynamostate"
	"github.com/compilefarm/compilefarm/pkg/facts"
	"github.com/compilefarm/compilefarm/pkg/intake"
	"github.com/compilefarm/compilefarm/pkg/s3store"
	"github.com/compilefarm/compilefarm/pkg/sqsqueue"
)

func main() {
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	h, err := setup(context.Background(), os.Getenv, log)
	if err != nil {
		log.Error("compile function init failed", "err", err)
		os.Exit(1) // the Lambda runtime reports an init error
	}
	lambda.Start(h.handle)
}

type handler struct {
	pool        *compiler.Pool
	maxReceives int
}

func setup(ctx context.Context, env func(string) string, log *slog.Logger) (*handler, error) {
	var bucket, nodesTable, indexTable, envTable string
	for _, v := range []struct {
		name string
		into *string
	}{
		{"COMPILEFARM_BUCKET", &bucket},
		{"COMPILEFARM_NODES_TABLE", &nodesTable},
		{"COMPILEFARM_NODE_INDEX_TABLE", &indexTable},
		{"COMPILEFARM_ENVIRONMENTS_TABLE", &envTable},
	} {
		if *v.into = env(v.name); *v.into == "" {
			return nil, fmt.Errorf("%s is not set", v.name)
		}
	}
	var err error
	maxReceives := 3
	if v := env("COMPILEFARM_MAX_RECEIVES"); v != "" {
		if maxReceives, err = strconv.Atoi(v); err != nil || maxReceives < 1 {
			return nil, fmt.Errorf("COMPILEFARM_MAX_RECEIVES=%q is not a positive number", v)
		}
	}
	timeout := 2 * time.Minute
	if v := env("COMPILEFARM_COMPILE_TIMEOUT"); v != "" {
		if timeout, err = time.ParseDuration(v); err != nil {
			return nil, fmt.Errorf("COMPILEFARM_COMPILE_TIMEOUT: %w", err)
		}
	}
	workdir := env("COMPILEFARM_WORKDIR")
	if workdir == "" {
		workdir = "/tmp/compilefarm"
	}
	ruby := env("COMPILEFARM_RUBY")
	if ruby == "" {
		ruby = "ruby"
	}
	var enc *classifier.Exec
	if cmd := env("COMPILEFARM_EXTERNAL_NODES"); cmd != "" {
		encTimeout := classifier.DefaultTimeout
		if v := env("COMPILEFARM_EXTERNAL_NODES_TIMEOUT"); v != "" {
			if encTimeout, err = time.ParseDuration(v); err != nil {
				return nil, fmt.Errorf("COMPILEFARM_EXTERNAL_NODES_TIMEOUT: %w", err)
			}
		}
		if enc, err = classifier.NewExec(cmd, encTimeout); err != nil {
			return nil, fmt.Errorf("COMPILEFARM_EXTERNAL_NODES: %w", err)
		}
	}
	awsCfg, err := awsconfig.LoadDefaultConfig(ctx)
	if err != nil {
		return nil, fmt.Errorf("load AWS configuration: %w", err)
	}
	content := s3store.NewFromConfig(awsCfg, bucket, s3store.Options{Prefix: env("COMPILEFARM_PREFIX")})
	queriesTable := env("COMPILEFARM_QUERIES_TABLE")
	state := dynamostate.NewFromConfig(awsCfg, dynamostate.Options{NodesTable: nodesTable, IndexTable: indexTable, EnvironmentsTable: envTable,
		QueriesTable: queriesTable})
	queue := sqsqueue.New(sqs.NewFromConfig(awsCfg), sqsqueue.Options{
		UrgentURL: env("COMPILEFARM_URGENT_QUEUE_URL"), BulkURL: env("COMPILEFARM_BULK_QUEUE_URL"), Logger: log,
	})
	filter, err := facts.NewFilter(facts.DefaultVolatile)
	if err != nil {
		return nil, err
	}
	pdb, err := puppetDB(env)
	if err != nil {
		return nil, err
	}
	if pdb != nil {
		if err := puppetDBSecrets(ctx, secretsmanager.NewFromConfig(awsCfg), env, pdb); err != nil {
			return nil, err
		}
	}
	engine, err := puppet.New(ctx, puppet.Options{Workers: 1, Ruby: ruby, WorkDir: filepath.Join(workdir, "engine"), Timeout: timeout, Logger: log,
		EyamlKeys: env("COMPILEFARM_EYAML_KEYS"), PuppetDB: pdb, StoreConfigs: env("COMPILEFARM_STORECONFIGS")})
	if err != nil {
		return nil, fmt.Errorf("start the puppet engine: %w", err)
	}
	in := &intake.Intake{Content: content, Nodes: state, Envs: state, Queue: queue, Filter: filter, Log: log}
	pool := &compiler.Pool{Nodes: state, Content: content, Engine: engine, Queue: queue,
		Code: code.NewLibrary(content, filepath.Join(workdir, "code")), Collectors: in, Log: log}
	if enc != nil {
		pool.Classifier = enc
	}
	if pdb != nil && queriesTable != "" {
		pool.Queries = state // the fleet's refresher runs them again
	}
	log.Info("compile function ready", "puppet_version", engine.PuppetVersion(), "bucket", bucket, "nodes_table", nodesTable)
	return &handler{pool: pool, maxReceives: maxReceives}, nil
}

// handle compiles one SQS batch and reports the messages to deliver again.
func (h *handler) handle(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
	items := make([]compiler.BatchItem, len(ev.Records))
	for i, r := range ev.Records {
		n, _ := strconv.Atoi(r.Attributes["ApproximateReceiveCount"])
		items[i] = compiler.BatchItem{ID: r.MessageId, Body: []byte(r.Body), ReceiveCount: n}
	}
	var resp events.SQSEventResponse
	for _, id := range h.pool.HandleBatch(ctx, items, h.maxReceives) {
		resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: id})
	}
	return resp, nil
}

// puppetDB reads the PuppetDB compiles query from the environment: nil
// when COMPILEFARM_PUPPETDB is unset. The engine checks the rest.
func puppetDB(env func(string) string) (*puppet.PuppetDB, error) {
	urls := env("COMPILEFARM_PUPPETDB")
	if urls == "" {
		return nil, nil
	}
	p := &puppet.PuppetDB{}
	for _, u := range strings.Split(urls, ",") {
		if u = strings.TrimSpace(u); u != "" {
			p.URLs = append(p.URLs, u)
		}
	}
	for _, v := range []struct {
		name string
		into *[]byte
	}{
		{"COMPILEFARM_PUPPETDB_CA", &p.CACert},
		{"COMPILEFARM_PUPPETDB_CERT", &p.Cert},
		{"COMPILEFARM_PUPPETDB_KEY", &p.Key},
	} {
		b, err := pemValue(env(v.name))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", v.name, err)
		}
		*v.into = b
	}
	return p, nil
}

// secretReader is the part of the Secrets Manager client the init reads
// PuppetDB's identity with.
type secretReader interface {
	GetSecretValue(ctx context.Context, in *secretsmanager.GetSecretValueInput, optFns ...func(*secretsmanager.Options)) (*secretsmanager.GetSecretValueOutput, error)
}

// puppetDBSecrets fills pdb's client identity and CA from the secrets the
// stack names (COMPILEFARM_PUPPETDB_IDENTITY_SECRET: JSON {"cert", "key"};
// COMPILEFARM_PUPPETDB_CA_SECRET: PEM), when set: two GetSecretValue calls
// per container, at init.
func puppetDBSecrets(ctx context.Context, sm secretReader, env func(string) string, pdb *puppet.PuppetDB) error {
	read := func(name string) (string, error) {
		out, err := sm.GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: aws.String(env(name))})
		if err != nil {
			return "", fmt.Errorf("%s: read secret %s: %w", name, env(name), err)
		}
		return aws.ToString(out.SecretString), nil
	}
	if env("COMPILEFARM_PUPPETDB_IDENTITY_SECRET") != "" {
		v, err := read("COMPILEFARM_PUPPETDB_IDENTITY_SECRET")
		if err != nil {
			return err
		}
		var id struct{ Cert, Key string }
		if err := json.Unmarshal([]byte(v), &id); err != nil || id.Cert == "" || id.Key == "" {
			return fmt.Errorf(`COMPILEFARM_PUPPETDB_IDENTITY_SECRET: want JSON {"cert": PEM, "key": PEM} in the secret`)
		}
		pdb.Cert, pdb.Key = []byte(id.Cert), []byte(id.Key)
	}
	if env("COMPILEFARM_PUPPETDB_CA_SECRET") != "" {
		v, err := read("COMPILEFARM_PUPPETDB_CA_SECRET")
		if err != nil {
			return err
		}
		pdb.CACert = []byte(v)
	}
	return nil
}

// pemValue is PEM text as given, or the content of the file it names.
func pemValue(v string) ([]byte, error) {
	if v == "" || strings.HasPrefix(strings.TrimSpace(v), "-----BEGIN ") {
		return []byte(v), nil
	}
	b, err := os.ReadFile(v)
	if err != nil {
		return nil, fmt.Errorf("neither PEM text nor a readable file: %w", err)
	}
	return b, nil
}

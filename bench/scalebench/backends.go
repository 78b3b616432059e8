package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/compilefarm/compilefarm/internal/emulator"
	"github.com/compilefarm/compilefarm/pkg/awscalls"
	"github.com/compilefarm/compilefarm/pkg/dynamostate"
	"github.com/compilefarm/compilefarm/pkg/localstore"
	"github.com/compilefarm/compilefarm/pkg/s3store"
	"github.com/compilefarm/compilefarm/pkg/sqsqueue"
)

// openEmbedded opens the embedded store (bbolt and content files) in dir,
// as broker dev does.
func openEmbedded(ctx context.Context, dir string, log *slog.Logger) (backend, func(), error) {
	st, err := localstore.Open(ctx, dir, localstore.Options{Logger: log})
	if err != nil {
		return backend{}, nil, fmt.Errorf("open the embedded store: %w", err)
	}
	b := backend{name: "embedded (localstore: bbolt + files)", content: st, nodes: st, envs: st, queue: st.Queue(localstore.QueueOptions{})}
	return b, func() { _ = st.Close() }, nil
}

// startAWS starts the S3, DynamoDB and SQS emulators on loopback and
// returns the AWS drivers on them (the tables, bucket and queues made as
// test/e2e/aws.go makes them), every client counted by one
// awscalls.Counter. stop ends the emulators.
func startAWS(ctx context.Context, dir string, log *slog.Logger) (b backend, stop func(), err error) {
	var procs []*emulator.Process
	stop = func() {
		for _, p := range procs {
			p.Stop()
		}
	}
	defer func() {
		if err != nil {
			stop()
		}
	}()
	s3root := filepath.Join(dir, "s3")
	if err := os.MkdirAll(s3root, 0o750); err != nil {
		return b, nil, fmt.Errorf("S3 emulator directory: %w", err)
	}
	s3emu, err := emulator.StartS3(ctx, s3root)
	if err != nil {
		return b, nil, err
	}
	procs = append(procs, s3emu)
	ddb, err := emulator.StartDynamoDB(ctx)
	if err != nil {
		return b, nil, err
	}
	procs = append(procs, ddb)
	sq, err := emulator.StartSQS(ctx)
	if err != nil {
		return b, nil, err
	}
	procs = append(procs, sq)

	calls := awscalls.New()
	cfg := aws.Config{Region: "us-east-1", Credentials: credentials.NewStaticCredentialsProvider("test", "test", "")}
	calls.Instrument(&cfg)
	s3c := s3.NewFromConfig(cfg, func(o *s3.Options) { o.BaseEndpoint, o.UsePathStyle = aws.String(s3emu.URL), true })
	if _, err := s3c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("farm")}); err != nil {
		return b, nil, fmt.Errorf("create the bucket: %w", err)
	}
	ddbc := dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) { o.BaseEndpoint = aws.String(ddb.URL) })
	state := dynamostate.New(ddbc, dynamostate.Options{NodesTable: "nodes", IndexTable: "node-index", EnvironmentsTable: "environments"})
	if err := state.EnsureTables(ctx); err != nil {
		return b, nil, fmt.Errorf("create the tables: %w", err)
	}
	sqsc := sqs.NewFromConfig(cfg, func(o *sqs.Options) { o.BaseEndpoint = aws.String(sq.URL) })
	urls, err := sqsqueue.EnsureQueues(ctx, sqsc, "scalebench", 3)
	if err != nil {
		return b, nil, fmt.Errorf("create the queues: %w", err)
	}
	qopts := urls.Options()
	qopts.Logger = log
	b = backend{
		name:    "AWS drivers on emulators (dynamostate on dynalite, s3store on versitygw, sqsqueue on fauxqs)",
		content: s3store.New(s3c, "farm", s3store.Options{}), nodes: state, envs: state,
		queue: sqsqueue.New(sqsc, qopts), envCache: true, calls: calls,
	}
	return b, stop, nil
}

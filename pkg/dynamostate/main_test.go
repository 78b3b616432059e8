package dynamostate

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/compilefarm/compilefarm/internal/emulator"
)

// emu is the dynalite the tests share, on a free loopback port. Each test
// gets its own tables (newStore). Without the emulator the tests fail,
// naming the script that installs it.
var emu *emulator.Process

func TestMain(m *testing.M) { emulator.Main(m, emulator.DynamoDB(&emu)) }

// newClient returns a DynamoDB client for the emulator; optFns adjust it.
func newClient(url string, optFns ...func(*dynamodb.Options)) *dynamodb.Client {
	o := dynamodb.Options{
		Region:       "us-east-1",
		Credentials:  credentials.NewStaticCredentialsProvider("test", "test", ""),
		BaseEndpoint: aws.String(url),
	}
	return dynamodb.New(o, optFns...)
}

var tableSeq atomic.Int64

// newStore returns a Store on fresh tables of the emulator, deleted when
// the test ends.
func newStore(t *testing.T, adjust ...func(*Options)) *Store {
	t.Helper()
	return newStoreWith(t, nil, adjust...)
}

// newStoreWith is newStore with clientOpts adjusting its client (a call
// counter's middleware, for instance).
func newStoreWith(t *testing.T, clientOpts []func(*dynamodb.Options), adjust ...func(*Options)) *Store {
	t.Helper()
	if testing.Short() { // also for a test that forgot its own guard
		t.Skip("needs the DynamoDB emulator; skipped with -short")
	}
	n := tableSeq.Add(1)
	opts := Options{
		NodesTable:        fmt.Sprintf("t%04d-nodes", n),
		IndexTable:        fmt.Sprintf("t%04d-node-index", n),
		EnvironmentsTable: fmt.Sprintf("t%04d-environments", n),
		PresenceTable:     fmt.Sprintf("t%04d-presence", n),
		JobsTable:         fmt.Sprintf("t%04d-jobs", n),
		QueriesTable:      fmt.Sprintf("t%04d-queries", n),
	}
	for _, f := range adjust {
		f(&opts)
	}
	client := newClient(emu.URL, clientOpts...)
	s := New(client, opts)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.EnsureTables(ctx); err != nil {
		t.Fatalf("create tables: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, tb := range []string{opts.NodesTable, opts.IndexTable, opts.EnvironmentsTable, opts.PresenceTable, opts.JobsTable, opts.QueriesTable} {
			if _, err := client.DeleteTable(ctx, &dynamodb.DeleteTableInput{TableName: aws.String(tb)}); err != nil {
				t.Logf("delete table %s: %v", tb, err)
			}
		}
	})
	return s
}

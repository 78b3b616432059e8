package emulator

import (
	"context"
	"flag"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/compilefarm/compilefarm/internal/procgroup"
)

// Need is one emulator a package's tests run against, and where Main puts
// it: S3, DynamoDB, SQS, SecretsManager or KMS.
type Need struct {
	what  string
	start func(ctx context.Context, dir string) (*Process, error)
	into  **Process
}

// S3 asks Main for versitygw, serving buckets from a directory of its own
// (Process.Dir), into *p.
func S3(p **Process) Need {
	return Need{"the S3 emulator", func(ctx context.Context, dir string) (*Process, error) {
		e, err := StartS3(ctx, dir)
		if e != nil {
			e.Dir = dir
		}
		return e, err
	}, p}
}

// DynamoDB asks Main for dynalite, into *p.
func DynamoDB(p **Process) Need {
	return Need{"the DynamoDB emulator", func(ctx context.Context, _ string) (*Process, error) { return StartDynamoDB(ctx) }, p}
}

// SQS asks Main for fauxqs, into *p.
func SQS(p **Process) Need {
	return Need{"the SQS emulator", func(ctx context.Context, _ string) (*Process, error) { return StartSQS(ctx) }, p}
}

// SecretsManager asks Main for moto (which also serves the Lambda and
// CloudWatch APIs), into *p.
func SecretsManager(p **Process) Need {
	return Need{"the Secrets Manager emulator", func(ctx context.Context, _ string) (*Process, error) { return StartSecretsManager(ctx) }, p}
}

// KMS asks Main for local-kms, keeping its keys in a directory of its own
// (Process.Dir), into *p.
func KMS(p **Process) Need {
	return Need{"the KMS emulator", func(ctx context.Context, dir string) (*Process, error) {
		e, err := StartKMS(ctx, dir)
		if e != nil {
			e.Dir = dir
		}
		return e, err
	}, p}
}

// Main is the TestMain of a package whose tests run against emulators. With
// -short it starts none (the tests that need one skip: "skipped with
// -short"). Otherwise it starts each needed emulator, at most a minute
// each, and fails the whole run, saying how to install it, when one does
// not start: the AWS drivers are tested against a real emulator or not at
// all. When a test fails it prints the end of each emulator's output. It
// stops them and exits with the tests' status.
func Main(m *testing.M, needs ...Need) {
	flag.Parse()
	if testing.Short() {
		os.Exit(m.Run())
	}
	os.Exit(run(m, needs))
}

func run(m *testing.M, needs []Need) int {
	var started []*Process
	defer func() {
		for _, p := range started {
			p.Stop()
		}
	}()
	for _, n := range needs {
		dir, err := os.MkdirTemp("", "compilefarm-emulator-")
		if err != nil {
			fmt.Fprintf(os.Stderr, "FAIL: a directory for %s: %v\n", n.what, err)
			return 1
		}
		defer os.RemoveAll(dir)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		p, err := n.start(ctx, dir)
		cancel()
		if err != nil {
			fmt.Fprintf(os.Stderr, "FAIL: %s is needed by these tests: %v\n", n.what, err)
			return 1
		}
		started = append(started, p)
		*n.into = p
	}
	code := m.Run()
	if code != 0 {
		for _, p := range started {
			fmt.Fprintf(os.Stderr, "--- %s output (last lines) ---\n%s\n", p.Name, procgroup.Tail(p.Output(), 40))
		}
	}
	return code
}

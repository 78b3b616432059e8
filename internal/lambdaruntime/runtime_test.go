package lambdaruntime

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
)

// echoBin is testdata/echo built once for the package's tests.
var echoBin string

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		os.Exit(m.Run()) // no build: the tests that need it skip
	}
	dir, err := os.MkdirTemp("", "lambdaruntime-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	echoBin = filepath.Join(dir, "bootstrap")
	if out, err := exec.Command("go", "build", "-o", echoBin, "./testdata/echo").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build test function: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// startEcho runs the echo function under a new Runtime until the test ends.
func startEcho(t *testing.T) *Runtime {
	t.Helper()
	rt, err := Start(echoBin, nil, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Stop() })
	return rt
}

func TestRealFunction(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a function built with go build; skipped with -short")
	}
	rt := startEcho(t)
	event := func(bodies ...string) []byte {
		var ev events.SQSEvent
		for i, b := range bodies {
			ev.Records = append(ev.Records, events.SQSMessage{MessageId: string(rune('a' + i)), Body: b})
		}
		out, _ := json.Marshal(ev)
		return out
	}
	ctx := context.Background()
	for i := 0; i < 3; i++ { // one process serves many invocations
		out, err := rt.Invoke(ctx, event("ok", "fail", "ok"))
		if err != nil {
			t.Fatalf("invoke %d: %v\n%s", i, err, rt.Output())
		}
		var resp events.SQSEventResponse
		json.Unmarshal(out, &resp)
		if len(resp.BatchItemFailures) != 1 || resp.BatchItemFailures[0].ItemIdentifier != "b" {
			t.Fatalf("invoke %d: response %s", i, out)
		}
	}
	_, err := rt.Invoke(ctx, event("panic"))
	var ferr *FunctionError
	if err == nil || !strings.Contains(err.Error(), "asked to") {
		t.Errorf("a panicking function: %v", err)
	} else if !errors.As(err, &ferr) {
		t.Errorf("error %T is not a FunctionError", err)
	}
}

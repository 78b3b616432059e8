package lambdaruntime

import (
	"context"
	"encoding/json"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
)

func TestRealFunction(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "bootstrap")
	if out, err := exec.Command("go", "build", "-o", bin, "./testdata/echo").CombinedOutput(); err != nil {
		t.Fatalf("build test function: %v\n%s", err, out)
	}
	rt, err := Start(bin, nil, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Stop()
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
	_, err = rt.Invoke(ctx, event("panic"))
	var ferr *FunctionError
	if err == nil || !strings.Contains(err.Error(), "asked to") {
		t.Errorf("a panicking function: %v", err)
	} else if !errors.As(err, &ferr) {
		t.Errorf("error %T is not a FunctionError", err)
	}
}

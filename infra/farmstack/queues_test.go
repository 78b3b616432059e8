package farmstack

import (
	"strconv"
	"testing"
)

// TestQueues: urgent and bulk queues, each with a dead-letter queue at
// MaxReceives, visibility timeouts VisibilityFactor times the function's
// timeout, SSE.
func TestQueues(t *testing.T) {
	for _, ctx := range []map[string]string{nil, {"compileTimeoutSeconds": "120"}} {
		s := synth(t, ctx)
		timeout := float64(s.stack.Config.CompileTimeoutSeconds)
		_, fn := s.find(t, "AWS::Lambda::Function", "FunctionName", "compilefarm-dev-compile")
		if num(fn["Timeout"]) != timeout {
			t.Errorf("compile Timeout = %v, want %v", fn["Timeout"], timeout)
		}
		if got := len(s.resources("AWS::SQS::Queue")); got != 4 {
			t.Errorf("%d queues, want 4", got)
		}
		for _, lane := range []string{"urgent", "bulk"} {
			dlqID, dlq := s.find(t, "AWS::SQS::Queue", "QueueName", "compilefarm-dev-"+lane+"-dlq")
			_, q := s.find(t, "AWS::SQS::Queue", "QueueName", "compilefarm-dev-"+lane)
			if vt := num(q["VisibilityTimeout"]); vt <= timeout || vt != timeout*VisibilityFactor {
				t.Errorf("%s VisibilityTimeout = %v, want %v (> the function's %v)", lane, vt, timeout*VisibilityFactor, timeout)
			}
			rp, _ := q["RedrivePolicy"].(map[string]interface{})
			if num(rp["maxReceiveCount"]) != MaxReceives || !containsAll(jsonString(rp["deadLetterTargetArn"]), dlqID) {
				t.Errorf("%s RedrivePolicy = %s, want maxReceiveCount %d to %s", lane, jsonString(rp), MaxReceives, dlqID)
			}
			if env := fn["Environment"].(map[string]interface{})["Variables"].(map[string]interface{}); env["COMPILEFARM_MAX_RECEIVES"] != strconv.Itoa(int(num(rp["maxReceiveCount"]))) {
				t.Errorf("COMPILEFARM_MAX_RECEIVES = %v, the queues' maxReceiveCount %v", env["COMPILEFARM_MAX_RECEIVES"], rp["maxReceiveCount"])
			}
			for _, p := range []map[string]interface{}{q, dlq} {
				if p["SqsManagedSseEnabled"] != true {
					t.Errorf("%s: queue %v without SSE", lane, p["QueueName"])
				}
			}
		}
	}
}

package farmstack

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/compilefarm/compilefarm/pkg/scaling"
)

// TestScaler: the Go zip function with the agreed environment contract and
// the IAM it needs, for the bulk lane only.
func TestScaler(t *testing.T) {
	s := synth(t, map[string]string{"urgentConcurrencyMax": "50", "bulkConcurrencyMin": "5", "bulkConcurrencyMax": "6"})
	id, fn := s.find(t, "AWS::Lambda::Function", "FunctionName", "compilefarm-dev-scaler")
	if fn["Runtime"] != "provided.al2023" || fn["Handler"] != "bootstrap" || jsonString(fn["Architectures"]) != `["arm64"]` {
		t.Errorf("scaler Runtime/Handler/Architectures = %v/%v/%s", fn["Runtime"], fn["Handler"], jsonString(fn["Architectures"]))
	}
	if !containsAll(jsonString(fn["Code"]), "S3Key") {
		t.Errorf("scaler Code = %s, want a zip asset", jsonString(fn["Code"]))
	}
	env := fn["Environment"].(map[string]interface{})["Variables"].(map[string]interface{})
	if cd, err := time.ParseDuration(fmt.Sprint(env["COMPILEFARM_SCALER_COOLDOWN"])); len(env) != 2 || err != nil || cd != scaling.DefaultCooldown {
		t.Errorf("scaler environment %s", jsonString(env))
	}
	// COMPILEFARM_SCALER_LANES is a Fn::Join of JSON with the queue names
	// and mapping IDs; put placeholders in for the references and decode it.
	join, ok := env["COMPILEFARM_SCALER_LANES"].(map[string]interface{})["Fn::Join"].([]interface{})
	if !ok {
		t.Fatalf("COMPILEFARM_SCALER_LANES = %s", jsonString(env["COMPILEFARM_SCALER_LANES"]))
	}
	var b strings.Builder
	for _, part := range join[1].([]interface{}) {
		switch p := part.(type) {
		case string:
			b.WriteString(p)
		default:
			b.WriteString("REF:" + regexp.MustCompile(`[^A-Za-z0-9]`).ReplaceAllString(jsonString(p), ""))
		}
	}
	var lanes []struct {
		Lane, Queue, Mapping string
		Min, Max, Step       int
		High, Low            string
		LowFor               string `json:"low_for"`
	}
	// The scaler refuses unknown fields; so does this decoding.
	dec := json.NewDecoder(strings.NewReader(b.String()))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&lanes); err != nil {
		t.Fatalf("COMPILEFARM_SCALER_LANES %s: %v", b.String(), err)
	}
	want := map[string][2]int{"bulk": {5, 6}}
	if len(lanes) != 1 {
		t.Fatalf("lanes %+v, want the bulk lane only", lanes)
	}
	esmIDs := map[string]bool{}
	bulkESM := eventSourceMappings(t, s)["bulk"]
	esmIDs["REF:Ref"+bulkESM] = true
	for _, l := range lanes {
		w, ok := want[l.Lane]
		if !ok || l.Min != w[0] || l.Max != w[1] || l.Step != ScalerStep(l.Lane, w[0], w[1]) {
			t.Errorf("lane %+v, want min/max %v, step %d", l, w, ScalerStep(l.Lane, w[0], w[1]))
		}
		// The scaler decides with the thresholds the alarms use: the
		// lane's defaults in pkg/scaling.
		th := scaling.DefaultLane(l.Lane).Config
		for _, c := range []struct {
			got  string
			want time.Duration
		}{{l.High, th.High}, {l.Low, th.Low}, {l.LowFor, th.LowFor}} {
			if d, err := time.ParseDuration(c.got); err != nil || d != c.want {
				t.Errorf("lane %s: threshold %q, want %s", l.Lane, c.got, c.want)
			}
		}
		for _, c := range []struct {
			name string
			want float64
		}{{"-age-high", th.High.Seconds()}, {"-age-low", th.Low.Seconds()}} {
			_, a := s.find(t, "AWS::CloudWatch::Alarm", "AlarmName", "compilefarm-dev-"+l.Lane+c.name)
			if num(a["Threshold"]) != c.want {
				t.Errorf("%s%s Threshold %v, want %v", l.Lane, c.name, a["Threshold"], c.want)
			}
			if c.name == "-age-low" && num(a["EvaluationPeriods"]) != th.LowFor.Minutes() {
				t.Errorf("%s%s EvaluationPeriods %v, want %v (low_for in minutes)", l.Lane, c.name, a["EvaluationPeriods"], th.LowFor.Minutes())
			}
		}
		qID, _ := s.find(t, "AWS::SQS::Queue", "QueueName", "compilefarm-dev-"+l.Lane)
		if l.Queue != "REF:FnGetAtt"+qID+"QueueName" {
			t.Errorf("lane %s queue %q, want the queue name of %s", l.Lane, l.Queue, qID)
		}
		if !esmIDs[l.Mapping] {
			t.Errorf("lane %s mapping %q is not an event source mapping's ID", l.Lane, l.Mapping)
		}
	}

	// IAM: Get/UpdateEventSourceMapping on the bulk mapping, GetMetricData.
	roleID := fn["Role"].(map[string]interface{})["Fn::GetAtt"].([]interface{})[0].(string)
	var stmts []map[string]interface{}
	for _, r := range s.resources("AWS::IAM::Policy") {
		if jsonString(props(r)["Roles"]) == `[{"Ref":"`+roleID+`"}]` {
			for _, st := range props(r)["PolicyDocument"].(map[string]interface{})["Statement"].([]interface{}) {
				stmts = append(stmts, st.(map[string]interface{}))
			}
		}
	}
	var esm, metrics bool
	for _, st := range stmts {
		a := jsonString(st["Action"])
		if containsAll(a, "lambda:GetEventSourceMapping", "lambda:UpdateEventSourceMapping") {
			esm = true
			res := jsonString(st["Resource"])
			if len(asList(st["Resource"])) != 1 || !containsAll(res, bulkESM, "event-source-mapping:") {
				t.Errorf("scaler's mapping statement %s, want the bulk mapping %s only", res, bulkESM)
			}
		}
		if a == `"cloudwatch:GetMetricData"` {
			metrics = st["Resource"] == "*"
		}
	}
	if !esm || !metrics {
		t.Errorf("scaler statements: event source mappings %v, GetMetricData on * %v", esm, metrics)
	}
	if len(stmts) != 2 {
		t.Errorf("scaler %s: statements %s, want just those two", id, jsonString(stmts))
	}
}

// TestScalerWiring: for the bulk lane a high and a low queue-age alarm
// whose action is the scaler (with the permission to invoke it), and an
// every-minute schedule.
func TestScalerWiring(t *testing.T) {
	s := dev(t)
	scalerID, _ := s.find(t, "AWS::Lambda::Function", "FunctionName", "compilefarm-dev-scaler")
	for _, lane := range []string{"bulk"} {
		qID, _ := s.find(t, "AWS::SQS::Queue", "QueueName", "compilefarm-dev-"+lane)
		for _, c := range []struct{ name, op string }{{"-age-high", "GreaterThanOrEqualToThreshold"}, {"-age-low", "LessThanOrEqualToThreshold"}} {
			_, a := s.find(t, "AWS::CloudWatch::Alarm", "AlarmName", "compilefarm-dev-"+lane+c.name)
			if a["MetricName"] != "ApproximateAgeOfOldestMessage" || a["Namespace"] != "AWS/SQS" || a["ComparisonOperator"] != c.op {
				t.Errorf("%s%s: %v %v %v", lane, c.name, a["Namespace"], a["MetricName"], a["ComparisonOperator"])
			}
			if !containsAll(jsonString(a["Dimensions"]), qID) {
				t.Errorf("%s%s dimensions %s", lane, c.name, jsonString(a["Dimensions"]))
			}
			if acts := jsonString(a["AlarmActions"]); !containsAll(acts, scalerID) {
				t.Errorf("%s%s AlarmActions %s do not reference the scaler %s", lane, c.name, acts, scalerID)
			}
		}
	}
	n := 0
	for _, r := range s.resources("AWS::Lambda::Permission") {
		p := props(r)
		if p["Principal"] == "lambda.alarms.cloudwatch.amazonaws.com" && containsAll(jsonString(p["FunctionName"]), scalerID) {
			n++
		}
	}
	if n != 2 {
		t.Errorf("%d alarm permissions on the scaler, want 2", n)
	}
	_, rule := s.find(t, "AWS::Events::Rule", "ScheduleExpression", "rate(1 minute)")
	if !containsAll(jsonString(rule["Targets"]), scalerID) {
		t.Errorf("the schedule's targets %s miss the scaler", jsonString(rule["Targets"]))
	}
}

// TestScalerStep: the lane's default step, within a narrower range at most
// the range, at least 1.
func TestScalerStep(t *testing.T) {
	u, b := scaling.Urgent.Config, scaling.Bulk.Config
	for _, c := range []struct {
		lane           string
		min, max, want int
	}{
		{"urgent", 2, 50, u.Step}, {"bulk", b.Min, b.Max, b.Step},
		{"bulk", 2, 2, 1}, {"bulk", 5, 6, 1}, {"bulk", 2, 2 + b.Step - 1, b.Step - 1}, {"bulk", 2, 1000, b.Step},
	} {
		if got := ScalerStep(c.lane, c.min, c.max); got != c.want {
			t.Errorf("ScalerStep(%s, %d, %d) = %d, want %d", c.lane, c.min, c.max, got, c.want)
		}
	}
}

// TestDefaultRangesFromScaling: without context, the stack's concurrency
// settings are the lanes' defaults in pkg/scaling, and only the bulk lane
// has a range to steer.
func TestDefaultRangesFromScaling(t *testing.T) {
	d := Defaults()
	if d.UrgentConcurrencyMax != scaling.Urgent.Config.Max || d.BulkConcurrencyMin != scaling.Bulk.Config.Min || d.BulkConcurrencyMax != scaling.Bulk.Config.Max {
		t.Errorf("Defaults() urgent %d, bulk %d/%d; pkg/scaling's: urgent %d, bulk %d/%d",
			d.UrgentConcurrencyMax, d.BulkConcurrencyMin, d.BulkConcurrencyMax,
			scaling.Urgent.Config.Max, scaling.Bulk.Config.Min, scaling.Bulk.Config.Max)
	}
	if scaling.Urgent.Steered() || !scaling.Bulk.Steered() {
		t.Errorf("steered: urgent %v, bulk %v; want the bulk lane only", scaling.Urgent.Steered(), scaling.Bulk.Steered())
	}
}

// TestUrgentLaneAtItsMax (issue 23, D8): the urgent event source sits at
// urgentConcurrencyMax, and the scaler neither steers it nor has an alarm
// or a permission for it; urgentConcurrencyMin is refused, saying why.
func TestUrgentLaneAtItsMax(t *testing.T) {
	for _, c := range []struct {
		ctx  map[string]string
		want float64
	}{{nil, float64(scaling.Urgent.Config.Max)}, {map[string]string{"urgentConcurrencyMax": "120"}, 120}} {
		s := synth(t, c.ctx)
		esm := eventSourceMappings(t, s)
		sc, _ := props(s.resources("AWS::Lambda::EventSourceMapping")[esm["urgent"]])["ScalingConfig"].(map[string]interface{})
		if num(sc["MaximumConcurrency"]) != c.want {
			t.Errorf("%v: urgent MaximumConcurrency %v, want %v", c.ctx, sc["MaximumConcurrency"], c.want)
		}
		_, fn := s.find(t, "AWS::Lambda::Function", "FunctionName", "compilefarm-dev-scaler")
		roleID := fn["Role"].(map[string]interface{})["Fn::GetAtt"].([]interface{})[0].(string)
		for id, r := range s.resources("AWS::IAM::Policy") {
			if p := props(r); containsAll(jsonString(p["Roles"]), roleID) && containsAll(jsonString(p["PolicyDocument"]), esm["urgent"]) {
				t.Errorf("%v: the scaler's policy %s names the urgent mapping", c.ctx, id)
			}
		}
		if containsAll(jsonString(fn["Environment"]), esm["urgent"]) || containsAll(jsonString(fn["Environment"]), `\"lane\":\"urgent\"`) {
			t.Errorf("%v: the scaler is given the urgent lane: %s", c.ctx, jsonString(fn["Environment"]))
		}
		for _, r := range s.resources("AWS::CloudWatch::Alarm") {
			if name, _ := props(r)["AlarmName"].(string); strings.HasPrefix(name, "compilefarm-dev-urgent-age-") {
				t.Errorf("%v: scaler alarm %s on the urgent lane", c.ctx, name)
			}
		}
	}
	_, err := configFrom(t, map[string]interface{}{"urgentConcurrencyMin": "2"})
	if err == nil || !strings.Contains(err.Error(), "urgentConcurrencyMin is no longer read") {
		t.Errorf("urgentConcurrencyMin=2: %v", err)
	}
}

// eventSourceMappings returns the logical IDs of the compile event source
// mappings by lane.
func eventSourceMappings(t *testing.T, s *synthed) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, lane := range []string{"urgent", "bulk"} {
		qID, _ := s.find(t, "AWS::SQS::Queue", "QueueName", "compilefarm-dev-"+lane)
		for id, r := range s.resources("AWS::Lambda::EventSourceMapping") {
			if containsAll(jsonString(props(r)["EventSourceArn"]), `"`+qID+`"`) {
				out[lane] = id
			}
		}
		if out[lane] == "" {
			t.Fatalf("no event source mapping on the %s queue", lane)
		}
	}
	return out
}

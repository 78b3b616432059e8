package farmstack

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/compilefarm/compilefarm/pkg/scaling"
)

// TestObservability: the dashboard, the DLQ and compile-error alarms,
// and the SNS topic, there without alarmEmail too (which only subscribes
// an address).
func TestObservability(t *testing.T) {
	s := dev(t)
	_, d := s.find(t, "AWS::CloudWatch::Dashboard", "DashboardName", "compilefarm-dev-farm")
	body := jsonString(d["DashboardBody"])
	for _, m := range []string{"ApproximateNumberOfMessagesVisible", "ApproximateAgeOfOldestMessage", "Duration", "Errors", "Throttles",
		"ConcurrentExecutions", "NewFlowCount", "ActiveFlowCount", "UnHealthyHostCount", "CPUUtilization", "FrontDoorErrorLines"} {
		if !containsAll(body, m) {
			t.Errorf("the dashboard has no %s", m)
		}
	}
	topicID, _ := s.find(t, "AWS::SNS::Topic", "TopicName", "compilefarm-dev-alarms")
	for _, lane := range []string{"urgent", "bulk"} {
		dlqID, _ := s.find(t, "AWS::SQS::Queue", "QueueName", "compilefarm-dev-"+lane+"-dlq")
		_, a := s.find(t, "AWS::CloudWatch::Alarm", "AlarmName", "compilefarm-dev-"+lane+"-dlq-not-empty")
		if a["MetricName"] != "ApproximateNumberOfMessagesVisible" || num(a["Threshold"]) != 0 || a["ComparisonOperator"] != "GreaterThanThreshold" ||
			!containsAll(jsonString(a["Dimensions"]), dlqID) {
			t.Errorf("%s DLQ alarm %s", lane, jsonString(a))
		}
	}
	fnID, _ := s.find(t, "AWS::Lambda::Function", "FunctionName", "compilefarm-dev-compile")
	_, a := s.find(t, "AWS::CloudWatch::Alarm", "AlarmName", "compilefarm-dev-compile-errors")
	if a["MetricName"] != "Errors" || a["Namespace"] != "AWS/Lambda" || !containsAll(jsonString(a["Dimensions"]), fnID) {
		t.Errorf("compile errors alarm %s", jsonString(a))
	}
	if n := len(s.resources("AWS::SNS::Subscription")); n != 0 {
		t.Errorf("%d SNS subscriptions without alarmEmail", n)
	}
	if !containsAll(jsonString(s.json["Outputs"]), `"AlarmTopic"`, `{"Ref":"`+topicID+`"}`) {
		t.Errorf("no output AlarmTopic with the topic's ARN: %s", jsonString(s.json["Outputs"]))
	}
	checkAlarmTopicPolicy(t, s, topicID)

	e := synth(t, map[string]string{"alarmEmail": "ops@example.com"})
	topicID, _ = e.find(t, "AWS::SNS::Topic", "TopicName", "compilefarm-dev-alarms")
	_, sub := e.find(t, "AWS::SNS::Subscription", "Endpoint", "ops@example.com")
	if sub["Protocol"] != "email" || !containsAll(jsonString(sub["TopicArn"]), topicID) {
		t.Errorf("subscription %s", jsonString(sub))
	}
}

// checkAlarmTopicPolicy: the topic takes TLS only, and its policy (which
// replaces SNS's default one) lets the stage's CloudWatch alarms publish.
func checkAlarmTopicPolicy(t *testing.T, s *synthed, topicID string) {
	t.Helper()
	var stmts []interface{}
	for _, r := range s.resources("AWS::SNS::TopicPolicy") {
		if p := props(r); containsAll(jsonString(p["Topics"]), topicID) {
			stmts = append(stmts, asList(p["PolicyDocument"].(map[string]interface{})["Statement"])...)
		}
	}
	var tls, cw bool
	for _, st := range stmts {
		st := st.(map[string]interface{})
		j := jsonString(st)
		switch {
		case st["Effect"] == "Deny" && containsAll(j, `"aws:SecureTransport":"false"`, "sns:Publish"):
			tls = true
		case st["Effect"] == "Allow" && containsAll(j, `"Service":"cloudwatch.amazonaws.com"`, `"sns:Publish"`, `"aws:SourceAccount"`,
			`":cloudwatch:"`, `":alarm:compilefarm-dev-*"`):
			cw = true
		}
	}
	if !tls || !cw {
		t.Errorf("alarm topic policy: TLS only %v, CloudWatch alarms may publish %v: %s", tls, cw, jsonString(stmts))
	}
}

// TestAlarms (issue 23, D4): every alarm notifies the alarm topic (but
// the scaler's, which invoke the scaler), on ALARM and on OK; a target
// group with no healthy task pages, missing data included; the scaler's
// errors, the compile function's throttles and each lane's queue age
// page; the 5xx alarm does not sit OK without data.
func TestAlarms(t *testing.T) {
	s := dev(t)
	topicID, _ := s.find(t, "AWS::SNS::Topic", "TopicName", "compilefarm-dev-alarms")
	scalerID, _ := s.find(t, "AWS::Lambda::Function", "FunctionName", "compilefarm-dev-scaler")
	compileID, _ := s.find(t, "AWS::Lambda::Function", "FunctionName", "compilefarm-dev-compile")
	topic := `{"Ref":"` + topicID + `"}`
	n := 0
	for id, r := range s.resources("AWS::CloudWatch::Alarm") {
		p := props(r)
		if containsAll(jsonString(p["AlarmActions"]), scalerID) {
			continue // the scaler's own age alarms
		}
		n++
		if !containsAll(jsonString(p["AlarmActions"]), topic) || !containsAll(jsonString(p["OKActions"]), topic) {
			t.Errorf("alarm %s (%v) does not notify the topic: AlarmActions %s, OKActions %s", id, p["AlarmName"],
				jsonString(p["AlarmActions"]), jsonString(p["OKActions"]))
		}
	}
	if n != 12 { // 2 DLQs, 2 queue ages, compile errors, throttles and canary errors, scaler errors, 2 target groups, fleet errors, 5xx
		t.Errorf("%d operator alarms, want 12", n)
	}

	type want struct {
		namespace, metric, stat, op, missing string
		threshold, period, periods           float64
		dims                                 []string
	}
	// The NLB's dimension is its full name, which CDK takes from a
	// listener's ARN.
	nlbID, _ := firstID(s.resources("AWS::ElasticLoadBalancingV2::LoadBalancer"))
	tgs, listeners := map[float64]string{}, map[float64]string{}
	for id, r := range s.resources("AWS::ElasticLoadBalancingV2::TargetGroup") {
		tgs[num(props(r)["Port"])] = id
	}
	for id, r := range s.resources("AWS::ElasticLoadBalancingV2::Listener") {
		if p := props(r); containsAll(jsonString(p["LoadBalancerArn"]), nlbID) {
			listeners[num(p["Port"])] = id
		}
	}
	urgentID, _ := s.find(t, "AWS::SQS::Queue", "QueueName", "compilefarm-dev-urgent")
	bulkID, _ := s.find(t, "AWS::SQS::Queue", "QueueName", "compilefarm-dev-bulk")
	for name, w := range map[string]want{
		"healthy-hosts-8140": {"AWS/NetworkELB", "HealthyHostCount", "Minimum", "LessThanThreshold", "breaching", 1, 60, 2,
			[]string{`"Name":"TargetGroup"`, tgs[FrontDoorPort], `"Name":"LoadBalancer"`, listeners[FrontDoorPort]}},
		"healthy-hosts-8142": {"AWS/NetworkELB", "HealthyHostCount", "Minimum", "LessThanThreshold", "breaching", 1, 60, 2,
			[]string{`"Name":"TargetGroup"`, tgs[PCPPort], `"Name":"LoadBalancer"`, listeners[PCPPort]}},
		"scaler-errors":     {"AWS/Lambda", "Errors", "Sum", "GreaterThanThreshold", "notBreaching", 0, 300, 2, []string{scalerID}},
		"compile-throttles": {"AWS/Lambda", "Throttles", "Sum", "GreaterThanThreshold", "notBreaching", 0, 300, 1, []string{compileID}},
		"urgent-queue-age": {"AWS/SQS", "ApproximateAgeOfOldestMessage", "Maximum", "GreaterThanOrEqualToThreshold", "notBreaching",
			UrgentAgeAlarm.Seconds(), 300, 1, []string{urgentID}},
		"bulk-queue-age": {"AWS/SQS", "ApproximateAgeOfOldestMessage", "Maximum", "GreaterThanOrEqualToThreshold", "notBreaching",
			BulkAgeAlarm.Seconds(), 300, 1, []string{bulkID}},
	} {
		_, a := s.find(t, "AWS::CloudWatch::Alarm", "AlarmName", "compilefarm-dev-"+name)
		if a["Namespace"] != w.namespace || a["MetricName"] != w.metric || a["Statistic"] != w.stat || a["ComparisonOperator"] != w.op ||
			a["TreatMissingData"] != w.missing || num(a["Threshold"]) != w.threshold || num(a["Period"]) != w.period ||
			num(a["EvaluationPeriods"]) != w.periods || !containsAll(jsonString(a["Dimensions"]), w.dims...) {
			t.Errorf("%s: %s, want %+v", name, jsonString(a), w)
		}
	}
	if tgs[FrontDoorPort] == "" || tgs[PCPPort] == "" || listeners[FrontDoorPort] == "" || listeners[PCPPort] == "" {
		t.Errorf("target groups %v, the NLB's listeners %v", tgs, listeners)
	}

	// A fleet that is down writes no EMF lines: the 5xx share goes to
	// INSUFFICIENT_DATA, which the topic hears about too.
	_, a := s.find(t, "AWS::CloudWatch::Alarm", "AlarmName", "compilefarm-dev-front-door-5xx")
	if a["TreatMissingData"] != "missing" || !containsAll(jsonString(a["InsufficientDataActions"]), topic) {
		t.Errorf("5xx alarm: TreatMissingData %v, InsufficientDataActions %s", a["TreatMissingData"], jsonString(a["InsufficientDataActions"]))
	}

	// Without the fleet no healthy-hosts alarm; without the compile
	// function no throttles or scaler alarm.
	for ctx, absent := range map[string][]string{"fleet": {"healthy-hosts-8140", "healthy-hosts-8142", "front-door-5xx"},
		"compileFunction": {"compile-throttles", "scaler-errors", "compile-errors"}} {
		o := synth(t, map[string]string{ctx: "false"})
		for _, r := range o.resources("AWS::CloudWatch::Alarm") {
			if name, _ := props(r)["AlarmName"].(string); slices.Contains(absent, strings.TrimPrefix(name, "compilefarm-dev-")) {
				t.Errorf("%s=false: alarm %s", ctx, name)
			}
		}
	}
}

// TestQueueAgeAlarms: the urgent threshold is broker serve's default
// first-compile-wait; the bulk one at least twice how long the lane's
// defaults take to drain a 100,000-node deploy in the simulation of
// docs/benchmarks.md, with 1 s compiles and with 1.5 s ones (the slowest
// measured, docs/operations.md), so an ordinary deploy never pages.
func TestQueueAgeAlarms(t *testing.T) {
	src, err := os.ReadFile(filepath.Join(repoRoot, "broker", "serve.go"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`"first-compile-wait", (\d+)\*time.Second`).FindSubmatch(src)
	if m == nil || string(m[1]) != strconv.Itoa(int(UrgentAgeAlarm.Seconds())) {
		t.Errorf("UrgentAgeAlarm %v; broker serve's first-compile-wait default: %q", UrgentAgeAlarm, m)
	}
	for _, compile := range []time.Duration{time.Second, 1500 * time.Millisecond} {
		model := scaling.DefaultModel
		model.Compile = compile
		r := scaling.Simulate(model, 2*time.Hour, scaling.SimLane{Lane: scaling.Bulk, Start: scaling.Bulk.Config.Min, Burst: 100_000, Seed: 1})[0]
		if r.Drained == 0 || 2*r.MaxAge > BulkAgeAlarm {
			t.Errorf("compiles of %v: 100,000 bulk jobs drained after %v, oldest %v: BulkAgeAlarm %v is not twice that", compile, r.Drained, r.MaxAge, BulkAgeAlarm)
		}
		if testing.Verbose() {
			t.Logf("compiles of %v: drained after %v, oldest job %v", compile, r.Drained, r.MaxAge)
		}
	}
}

// TestFrontDoorMetrics: the dashboard graphs the front door's EMF metrics
// (namespace compilefarm, dimension Stage) with latency percentiles, and
// an alarm watches the share of 5xx answers.
func TestFrontDoorMetrics(t *testing.T) {
	s := dev(t)
	_, d := s.find(t, "AWS::CloudWatch::Dashboard", "DashboardName", "compilefarm-dev-farm")
	body := strings.ReplaceAll(jsonString(d["DashboardBody"]), `\"`, `"`)
	metric := func(name string) string { return `["compilefarm","` + name + `","Stage","dev"` }
	for _, name := range append([]string{MetricRequests, MetricRequests4xx, MetricRequests5xx, MetricRefused}, CatalogOutcomeMetrics...) {
		if !containsAll(body, metric(name)+`,{"label":`) || !strings.Contains(body[strings.Index(body, metric(name)):], `"stat":"Sum"`) {
			t.Errorf("the dashboard has no Sum of %s with Stage dev", name)
		}
	}
	for _, name := range []string{MetricLatency, MetricCatalogLatency} {
		for _, stat := range []string{"p50", "p99"} {
			if !regexp.MustCompile(regexp.QuoteMeta(metric(name)) + `,\{[^}]*"stat":"` + stat + `"`).MatchString(body) {
				t.Errorf("the dashboard has no %s of %s", stat, name)
			}
		}
	}
	for _, title := range []string{"Front door requests", "Front door 4xx, 5xx and refusals", "Front door latency (ms)", "Catalog requests by outcome"} {
		if !strings.Contains(body, `"title":"`+title+`"`) {
			t.Errorf("the dashboard has no %q widget", title)
		}
	}

	_, a := s.find(t, "AWS::CloudWatch::Alarm", "AlarmName", "compilefarm-dev-front-door-5xx")
	if num(a["Threshold"]) != FrontDoor5xxPercent || a["ComparisonOperator"] != "GreaterThanThreshold" {
		t.Errorf("5xx alarm %s", jsonString(a))
	}
	ms := jsonString(a["Metrics"])
	if !containsAll(ms, `"Expression":"IF(requests \u003e 0, 100 * errors / requests, 0)"`, `"Id":"requests"`, `"Id":"errors"`,
		`"MetricName":"Requests"`, `"MetricName":"Requests5xx"`, `"Namespace":"compilefarm"`, `{"Name":"Stage","Value":"dev"}`, `"Period":300`, `"Stat":"Sum"`) {
		t.Errorf("5xx alarm metrics %s", ms)
	}

	// The names are the ones broker serve writes (pkg/metrics/emf).
	src, err := os.ReadFile(filepath.Join(repoRoot, "pkg", "metrics", "emf", "frontdoor.go"))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{FrontDoorNamespace, MetricRequests, MetricRequests4xx, MetricRequests5xx, MetricRefused, MetricLatency, MetricCatalogLatency} {
		if !strings.Contains(string(src), `= "`+name+`"`) {
			t.Errorf("pkg/metrics/emf writes no metric %q", name)
		}
	}
	for _, name := range CatalogOutcomeMetrics {
		if !strings.Contains(string(src), "metrics."+name) {
			t.Errorf("pkg/metrics/emf writes no %s (CatalogMetric(metrics.%s))", name, name)
		}
	}
}

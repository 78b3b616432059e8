package farmstack

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestObservability: the dashboard, the DLQ and compile-error alarms,
// and the SNS topic only with alarmEmail.
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
	for _, lane := range []string{"urgent", "bulk"} {
		dlqID, _ := s.find(t, "AWS::SQS::Queue", "QueueName", "compilefarm-dev-"+lane+"-dlq")
		_, a := s.find(t, "AWS::CloudWatch::Alarm", "AlarmName", "compilefarm-dev-"+lane+"-dlq-not-empty")
		if a["MetricName"] != "ApproximateNumberOfMessagesVisible" || num(a["Threshold"]) != 0 || a["ComparisonOperator"] != "GreaterThanThreshold" ||
			!containsAll(jsonString(a["Dimensions"]), dlqID) {
			t.Errorf("%s DLQ alarm %s", lane, jsonString(a))
		}
		if _, ok := a["AlarmActions"]; ok {
			t.Errorf("without alarmEmail the DLQ alarm has actions %s", jsonString(a["AlarmActions"]))
		}
	}
	fnID, _ := s.find(t, "AWS::Lambda::Function", "FunctionName", "compilefarm-dev-compile")
	_, a := s.find(t, "AWS::CloudWatch::Alarm", "AlarmName", "compilefarm-dev-compile-errors")
	if a["MetricName"] != "Errors" || a["Namespace"] != "AWS/Lambda" || !containsAll(jsonString(a["Dimensions"]), fnID) {
		t.Errorf("compile errors alarm %s", jsonString(a))
	}
	if n := len(s.resources("AWS::SNS::Topic")); n != 0 {
		t.Errorf("%d SNS topics without alarmEmail", n)
	}

	e := synth(t, map[string]string{"alarmEmail": "ops@example.com"})
	topicID, _ := firstID(e.resources("AWS::SNS::Topic"))
	if topicID == "" {
		t.Fatal("no SNS topic with alarmEmail")
	}
	_, sub := e.find(t, "AWS::SNS::Subscription", "Endpoint", "ops@example.com")
	if sub["Protocol"] != "email" {
		t.Errorf("subscription %s", jsonString(sub))
	}
	for _, name := range []string{"urgent-dlq-not-empty", "bulk-dlq-not-empty", "compile-errors", "front-door-errors", "front-door-5xx"} {
		_, a := e.find(t, "AWS::CloudWatch::Alarm", "AlarmName", "compilefarm-dev-"+name)
		if !containsAll(jsonString(a["AlarmActions"]), topicID) {
			t.Errorf("%s AlarmActions %s without the topic", name, jsonString(a["AlarmActions"]))
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
	if num(a["Threshold"]) != FrontDoor5xxPercent || a["ComparisonOperator"] != "GreaterThanThreshold" || a["TreatMissingData"] != "notBreaching" {
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

package farmstack

import "testing"

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
	for _, name := range []string{"urgent-dlq-not-empty", "bulk-dlq-not-empty", "compile-errors", "front-door-errors"} {
		_, a := e.find(t, "AWS::CloudWatch::Alarm", "AlarmName", "compilefarm-dev-"+name)
		if !containsAll(jsonString(a["AlarmActions"]), topicID) {
			t.Errorf("%s AlarmActions %s without the topic", name, jsonString(a["AlarmActions"]))
		}
	}
}

package farmstack

import (
	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatch"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatchactions"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslogs"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssns"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssnssubscriptions"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"
)

// Observability is the farm's dashboard and its operator alarms (the
// scaler's alarms are in Scaling).
type Observability struct {
	Construct constructs.Construct // the construct holding the resources
	Dashboard awscloudwatch.Dashboard
	// DLQAlarms by lane name: a job ended in the lane's dead-letter queue.
	DLQAlarms map[string]awscloudwatch.Alarm
	// CompileErrors: the compile function's invocations failed (Errors);
	// nil without the compile function.
	CompileErrors awscloudwatch.Alarm
	// FleetErrors: ERROR lines in the fleet's logs (nil without a fleet).
	FleetErrors awscloudwatch.Alarm
	// Topic gets the alarms' notifications; nil without alarmEmail.
	Topic awssns.Topic
}

// ObservabilityProps are what is watched. Compile and Fleet may be nil.
type ObservabilityProps struct {
	Queues  *Queues
	Compile *Compile
	Fleet   *Fleet
}

// MetricsNamespace is the namespace of the stack's own metrics (from
// metric filters on the fleet's logs).
func MetricsNamespace(cfg Config) string { return "compilefarm/" + cfg.Stage }

// NewObservability declares the dashboard, the alarms and, with
// alarmEmail, the SNS topic they notify.
func NewObservability(scope constructs.Construct, id string, cfg Config, p ObservabilityProps) *Observability {
	o := &Observability{Construct: constructs.NewConstruct(scope, jsii.String(id)), DLQAlarms: map[string]awscloudwatch.Alarm{}}
	q := p.Queues
	minute := awscdk.Duration_Minutes(jsii.Number(1))
	var notify []awscloudwatch.IAlarmAction
	if cfg.AlarmEmail != "" {
		o.Topic = awssns.NewTopic(o.Construct, jsii.String("Alarms"), &awssns.TopicProps{
			TopicName:   jsii.String(cfg.Name("alarms")),
			DisplayName: jsii.String("compilefarm " + cfg.Stage + " alarms"),
		})
		o.Topic.AddSubscription(awssnssubscriptions.NewEmailSubscription(jsii.String(cfg.AlarmEmail), nil))
		notify = append(notify, awscloudwatchactions.NewSnsAction(o.Topic))
	}
	withActions := func(a awscloudwatch.Alarm) awscloudwatch.Alarm {
		for _, n := range notify {
			a.AddAlarmAction(n)
			a.AddOkAction(n)
		}
		return a
	}

	// A job in a dead-letter queue failed MaxReceives times: engine
	// failures, code that does not compile, malformed messages.
	for _, l := range q.Lanes() {
		o.DLQAlarms[l.Name] = withActions(l.DLQ.MetricApproximateNumberOfMessagesVisible(&awscloudwatch.MetricOptions{
			Period: minute, Statistic: jsii.String("Maximum"),
		}).CreateAlarm(o.Construct, jsii.String("Dlq-"+l.Name), &awscloudwatch.CreateAlarmOptions{
			AlarmName:          jsii.String(cfg.Name(l.Name + "-dlq-not-empty")),
			AlarmDescription:   jsii.String("Compile jobs of the " + l.Name + " lane failed " + itoa(MaxReceives) + " times and are in its dead-letter queue"),
			Threshold:          jsii.Number(0),
			EvaluationPeriods:  jsii.Number(1),
			ComparisonOperator: awscloudwatch.ComparisonOperator_GREATER_THAN_THRESHOLD,
			TreatMissingData:   awscloudwatch.TreatMissingData_NOT_BREACHING,
		}))
	}
	o.Dashboard = awscloudwatch.NewDashboard(o.Construct, jsii.String("Dashboard"), &awscloudwatch.DashboardProps{
		DashboardName:   jsii.String(cfg.Name("farm")),
		DefaultInterval: awscdk.Duration_Hours(jsii.Number(3)),
	})
	graph := func(title string, left []awscloudwatch.IMetric) awscloudwatch.GraphWidget {
		return awscloudwatch.NewGraphWidget(&awscloudwatch.GraphWidgetProps{
			Title: jsii.String(title), Left: &left, Width: jsii.Number(8), Height: jsii.Number(6),
		})
	}
	per := func(f func(l *Lane) awscloudwatch.IMetric) []awscloudwatch.IMetric {
		var ms []awscloudwatch.IMetric
		for _, l := range q.Lanes() {
			ms = append(ms, f(l))
		}
		return ms
	}
	mo := func(stat, label string) *awscloudwatch.MetricOptions {
		return &awscloudwatch.MetricOptions{Period: minute, Statistic: jsii.String(stat), Label: jsii.String(label)}
	}
	o.Dashboard.AddWidgets(
		graph("Queue depth (visible jobs)", per(func(l *Lane) awscloudwatch.IMetric {
			return l.Queue.MetricApproximateNumberOfMessagesVisible(mo("Maximum", l.Name))
		})),
		graph("Oldest job age (s)", per(func(l *Lane) awscloudwatch.IMetric {
			return l.Queue.MetricApproximateAgeOfOldestMessage(mo("Maximum", l.Name))
		})),
		graph("Dead-letter queues", per(func(l *Lane) awscloudwatch.IMetric {
			return l.DLQ.MetricApproximateNumberOfMessagesVisible(mo("Maximum", l.Name+" DLQ"))
		})),
	)
	var alarms []awscloudwatch.IAlarm
	for _, l := range q.Lanes() {
		alarms = append(alarms, o.DLQAlarms[l.Name])
	}

	if p.Compile != nil {
		fn := p.Compile.Function
		// Lambda Errors counts failed invocations (init failures, crashes,
		// timeouts), not jobs the function reports failed in its batch
		// response: those retry and end in the dead-letter queue above.
		o.CompileErrors = withActions(fn.MetricErrors(&awscloudwatch.MetricOptions{
			Period: awscdk.Duration_Minutes(jsii.Number(5)), Statistic: jsii.String("Sum"),
		}).CreateAlarm(o.Construct, jsii.String("CompileErrors"), &awscloudwatch.CreateAlarmOptions{
			AlarmName:          jsii.String(cfg.Name("compile-errors")),
			AlarmDescription:   jsii.String("Invocations of the compile function failed (init failure, crash or timeout)"),
			Threshold:          jsii.Number(0),
			EvaluationPeriods:  jsii.Number(1),
			ComparisonOperator: awscloudwatch.ComparisonOperator_GREATER_THAN_THRESHOLD,
			TreatMissingData:   awscloudwatch.TreatMissingData_NOT_BREACHING,
		}))

		o.Dashboard.AddWidgets(
			graph("Compile duration (ms)", []awscloudwatch.IMetric{
				fn.MetricDuration(mo("Average", "average")), fn.MetricDuration(mo("p99", "p99")),
			}),
			graph("Compile errors and throttles", []awscloudwatch.IMetric{
				fn.MetricErrors(mo("Sum", "errors")), fn.MetricThrottles(mo("Sum", "throttles")),
			}),
			graph("Compile concurrency", []awscloudwatch.IMetric{
				fn.Metric(jsii.String("ConcurrentExecutions"), mo("Maximum", "concurrent executions")),
				fn.MetricInvocations(mo("Sum", "invocations")),
			}),
		)
		alarms = append(alarms, o.CompileErrors)
	}

	if f := p.Fleet; f != nil {
		// The front door's traffic. TLS passes through the NLB, so it sees
		// connections and bytes, not HTTP requests: requests, latency and
		// status codes are on each task's /metrics (Prometheus; nothing
		// ships them to CloudWatch in this stack). The dashboard shows the
		// NLB's flow metrics, target health, the tasks' CPU, and ERROR
		// lines in the fleet's logs (a metric filter: broker serve logs
		// with slog's text handler, "level=ERROR").
		errs := awslogs.NewMetricFilter(o.Construct, jsii.String("FleetErrorLines"), &awslogs.MetricFilterProps{
			LogGroup:        f.Logs,
			FilterPattern:   awslogs.FilterPattern_AllTerms(jsii.String("level=ERROR")),
			MetricNamespace: jsii.String(MetricsNamespace(cfg)),
			MetricName:      jsii.String("FrontDoorErrorLines"),
			MetricValue:     jsii.String("1"),
			DefaultValue:    jsii.Number(0),
		})
		errMetric := errs.Metric(mo("Sum", "ERROR log lines"))
		o.FleetErrors = withActions(errMetric.CreateAlarm(o.Construct, jsii.String("FleetErrors"), &awscloudwatch.CreateAlarmOptions{
			AlarmName:          jsii.String(cfg.Name("front-door-errors")),
			AlarmDescription:   jsii.String("The front door fleet logged errors in 5 minutes running"),
			Threshold:          jsii.Number(0),
			EvaluationPeriods:  jsii.Number(5),
			ComparisonOperator: awscloudwatch.ComparisonOperator_GREATER_THAN_THRESHOLD,
			TreatMissingData:   awscloudwatch.TreatMissingData_NOT_BREACHING,
		}))
		alarms = append(alarms, o.FleetErrors)
		lbm := f.LoadBalancer.Metrics()
		tg := f.TargetGroups[FrontDoorPort].Metrics()
		o.Dashboard.AddWidgets(
			graph("Front door connections", []awscloudwatch.IMetric{
				lbm.NewFlowCount(mo("Sum", "new flows")), lbm.ActiveFlowCount(mo("Average", "active flows")),
			}),
			graph("Front door resets and bytes", []awscloudwatch.IMetric{
				lbm.TcpTargetResetCount(mo("Sum", "target resets")), lbm.TcpClientResetCount(mo("Sum", "client resets")),
				lbm.ProcessedBytes(mo("Sum", "bytes")),
			}),
			graph("Front door tasks", []awscloudwatch.IMetric{
				tg.HealthyHostCount(mo("Minimum", "healthy")), tg.UnHealthyHostCount(mo("Maximum", "unhealthy")),
				f.Service.MetricCpuUtilization(mo("Average", "CPU %")), errMetric,
			}),
		)
	}
	o.Dashboard.AddWidgets(awscloudwatch.NewAlarmStatusWidget(&awscloudwatch.AlarmStatusWidgetProps{
		Title: jsii.String("Alarms"), Alarms: &alarms, Width: jsii.Number(24),
	}))
	return o
}

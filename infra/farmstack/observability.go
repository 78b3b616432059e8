package farmstack

import (
	"strings"

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
	// FrontDoor5xx: more than FrontDoor5xxPercent of the front door's
	// requests answered 5xx in 5 minutes (nil without a fleet).
	FrontDoor5xx awscloudwatch.Alarm
	// OutboxAge: the PuppetDB outbox's oldest command waited longer than
	// OutboxAgeAlarm; OutboxDLQ: commands PuppetDB refused are in its
	// dead-letter queue. Both nil without puppetdbUrls.
	OutboxAge, OutboxDLQ awscloudwatch.Alarm
	// Topic gets the alarms' notifications; nil without alarmEmail.
	Topic awssns.Topic
}

// ObservabilityProps are what is watched. Compile, Fleet and PuppetDB may
// be nil.
type ObservabilityProps struct {
	Queues   *Queues
	Compile  *Compile
	Fleet    *Fleet
	PuppetDB *PuppetDB
}

// MetricsNamespace is the namespace of the stack's own metrics (from
// metric filters on the fleet's logs).
func MetricsNamespace(cfg Config) string { return "compilefarm/" + cfg.Stage }

// The front door's metrics, which each fleet task writes as
// embedded-metric-format lines (serve's --emf-interval; pkg/metrics/emf,
// whose names these are): namespace FrontDoorNamespace, dimension Stage.
const (
	FrontDoorNamespace   = "compilefarm"
	MetricRequests       = "Requests"       // requests answered, health checks left out (Count)
	MetricRequests4xx    = "Requests4xx"    // ... with a 4xx
	MetricRequests5xx    = "Requests5xx"    // ... with a 5xx (refusals and pending first compiles included)
	MetricRefused        = "Refused"        // 503 + Retry-After for want of capacity
	MetricLatency        = "Latency"        // every request's duration (ms, a distribution: percentiles)
	MetricCatalogLatency = "CatalogLatency" // catalog requests' duration (ms)
)

// CatalogOutcomeMetrics are the EMF metrics counting catalog requests by
// outcome.
var CatalogOutcomeMetrics = []string{"CatalogFresh", "CatalogStale", "CatalogWaited", "CatalogFailed", "CatalogPending"}

// FrontDoor5xxPercent: the 5xx alarm fires when more than this share of
// the front door's requests in 5 minutes were answered 5xx.
const FrontDoor5xxPercent = 1

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
		// connections and bytes, not HTTP requests: requests, status
		// classes, refusals, catalog outcomes and latency come from the
		// tasks themselves, as embedded-metric-format lines in their logs
		// (--emf-interval; namespace compilefarm, dimension Stage). The
		// dashboard shows those, the NLB's flow metrics, target health,
		// the tasks' CPU, and ERROR lines in the fleet's logs (a metric
		// filter: broker serve logs with slog's text handler,
		// "level=ERROR").
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

		fdm := func(name, stat, label string, period awscdk.Duration) awscloudwatch.IMetric {
			return awscloudwatch.NewMetric(&awscloudwatch.MetricProps{
				Namespace: jsii.String(FrontDoorNamespace), MetricName: jsii.String(name),
				DimensionsMap: &map[string]*string{"Stage": jsii.String(cfg.Stage)},
				Period:        period, Statistic: jsii.String(stat), Label: jsii.String(label),
			})
		}
		fiveMinutes := awscdk.Duration_Minutes(jsii.Number(5))
		// IF: no requests (a stage without agents) is no error rate.
		rate5xx := func(period awscdk.Duration) awscloudwatch.MathExpression {
			return awscloudwatch.NewMathExpression(&awscloudwatch.MathExpressionProps{
				Expression: jsii.String("IF(requests > 0, 100 * errors / requests, 0)"),
				UsingMetrics: &map[string]awscloudwatch.IMetric{
					"requests": fdm(MetricRequests, "Sum", "requests", period),
					"errors":   fdm(MetricRequests5xx, "Sum", "5xx", period),
				},
				Label:  jsii.String("5xx % of requests"),
				Period: period,
			})
		}
		o.FrontDoor5xx = withActions(rate5xx(fiveMinutes).CreateAlarm(o.Construct, jsii.String("FrontDoor5xx"), &awscloudwatch.CreateAlarmOptions{
			AlarmName: jsii.String(cfg.Name("front-door-5xx")),
			AlarmDescription: jsii.String("More than " + itoa(FrontDoor5xxPercent) + "% of the front door's requests in 5 minutes were answered 5xx: " +
				"503 refusals for want of capacity (Refused), first compiles not done within first-compile-wait (CatalogPending), " +
				"or backend failures (ERROR lines in the fleet's logs)"),
			Threshold:          jsii.Number(FrontDoor5xxPercent),
			EvaluationPeriods:  jsii.Number(1),
			ComparisonOperator: awscloudwatch.ComparisonOperator_GREATER_THAN_THRESHOLD,
			TreatMissingData:   awscloudwatch.TreatMissingData_NOT_BREACHING,
		}))
		alarms = append(alarms, o.FrontDoor5xx)
		var outcomes []awscloudwatch.IMetric
		for _, name := range CatalogOutcomeMetrics {
			outcomes = append(outcomes, fdm(name, "Sum", strings.ToLower(strings.TrimPrefix(name, "Catalog")), minute))
		}
		errorsGraph := graph("Front door 4xx, 5xx and refusals", []awscloudwatch.IMetric{
			fdm(MetricRequests4xx, "Sum", "4xx", minute), fdm(MetricRequests5xx, "Sum", "5xx", minute),
			fdm(MetricRefused, "Sum", "503 refusals (back-pressure)", minute),
		})
		errorsGraph.AddRightMetric(rate5xx(minute))
		o.Dashboard.AddWidgets(
			graph("Front door requests", []awscloudwatch.IMetric{fdm(MetricRequests, "Sum", "requests", minute)}),
			errorsGraph,
			graph("Front door latency (ms)", []awscloudwatch.IMetric{
				fdm(MetricLatency, "p50", "p50", minute), fdm(MetricLatency, "p99", "p99", minute),
				fdm(MetricCatalogLatency, "p50", "catalog p50", minute), fdm(MetricCatalogLatency, "p99", "catalog p99", minute),
			}),
			graph("Catalog requests by outcome", outcomes),
		)
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
	if pdb := p.PuppetDB; pdb != nil {
		// The sink's outbox: commands wait there while PuppetDB is down or
		// the drain is stuck (age), and the ones PuppetDB refused end in
		// its dead-letter queue, which the drainer logs with the node.
		o.OutboxAge = withActions(pdb.Outbox.MetricApproximateAgeOfOldestMessage(&awscloudwatch.MetricOptions{
			Period: awscdk.Duration_Minutes(jsii.Number(5)), Statistic: jsii.String("Maximum"),
		}).CreateAlarm(o.Construct, jsii.String("OutboxAge"), &awscloudwatch.CreateAlarmOptions{
			AlarmName: jsii.String(cfg.Name("puppetdb-outbox-age")),
			AlarmDescription: jsii.String("A PuppetDB command has waited in the outbox for more than " + OutboxAgeAlarm.String() +
				": PuppetDB unreachable or failing, or no fleet task draining (the fleet's logs say which)"),
			Threshold:          jsii.Number(OutboxAgeAlarm.Seconds()),
			EvaluationPeriods:  jsii.Number(1),
			ComparisonOperator: awscloudwatch.ComparisonOperator_GREATER_THAN_THRESHOLD,
			TreatMissingData:   awscloudwatch.TreatMissingData_NOT_BREACHING,
		}))
		o.OutboxDLQ = withActions(pdb.DLQ.MetricApproximateNumberOfMessagesVisible(&awscloudwatch.MetricOptions{
			Period: minute, Statistic: jsii.String("Maximum"),
		}).CreateAlarm(o.Construct, jsii.String("OutboxDlq"), &awscloudwatch.CreateAlarmOptions{
			AlarmName:          jsii.String(cfg.Name("puppetdb-dlq-not-empty")),
			AlarmDescription:   jsii.String("PuppetDB refused commands (or one was received " + itoa(OutboxMaxReceives) + " times): they are in its dead-letter queue, and the fleet's logs name their nodes"),
			Threshold:          jsii.Number(0),
			EvaluationPeriods:  jsii.Number(1),
			ComparisonOperator: awscloudwatch.ComparisonOperator_GREATER_THAN_THRESHOLD,
			TreatMissingData:   awscloudwatch.TreatMissingData_NOT_BREACHING,
		}))
		alarms = append(alarms, o.OutboxAge, o.OutboxDLQ)
		o.Dashboard.AddWidgets(
			graph("PuppetDB outbox backlog (commands)", []awscloudwatch.IMetric{
				pdb.Outbox.MetricApproximateNumberOfMessagesVisible(mo("Maximum", "waiting")),
				pdb.Outbox.MetricApproximateNumberOfMessagesNotVisible(mo("Maximum", "in flight or retrying")),
				pdb.DLQ.MetricApproximateNumberOfMessagesVisible(mo("Maximum", "dead-lettered")),
			}),
			graph("PuppetDB outbox oldest command age (s)", []awscloudwatch.IMetric{
				pdb.Outbox.MetricApproximateAgeOfOldestMessage(mo("Maximum", "oldest")),
			}),
			graph("PuppetDB commands sent and delivered", []awscloudwatch.IMetric{
				pdb.Outbox.MetricNumberOfMessagesSent(mo("Sum", "sent")),
				pdb.Outbox.MetricNumberOfMessagesDeleted(mo("Sum", "finished (delivered or dead-lettered)")),
			}),
		)
	}
	o.Dashboard.AddWidgets(awscloudwatch.NewAlarmStatusWidget(&awscloudwatch.AlarmStatusWidgetProps{
		Title: jsii.String("Alarms"), Alarms: &alarms, Width: jsii.Number(24),
	}))
	return o
}

package farmstack

import (
	"strings"
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatch"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatchactions"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslogs"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssns"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssnssubscriptions"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"
)

// Observability is the farm's dashboard, its operator alarms and the
// topic they notify (the scaler's alarms, which only invoke the scaler,
// are in Scaling).
type Observability struct {
	Construct constructs.Construct // the construct holding the resources
	Dashboard awscloudwatch.Dashboard
	// DLQAlarms by lane name: a job ended in the lane's dead-letter queue.
	DLQAlarms map[string]awscloudwatch.Alarm
	// QueueAge by lane name: the lane's oldest job waited longer than
	// UrgentAgeAlarm or BulkAgeAlarm.
	QueueAge map[string]awscloudwatch.Alarm
	// CompileErrors: the compile function's invocations failed (Errors);
	// CompileThrottles: Lambda refused to run it (Throttles). Nil without
	// the compile function.
	CompileErrors, CompileThrottles awscloudwatch.Alarm
	// ScalerErrors: the scaler failed in two 5-minute windows in a row
	// (nil without the compile function, which it steers).
	ScalerErrors awscloudwatch.Alarm
	// HealthyHosts by listener port: no task passed the NLB's health
	// check (nil map without a fleet).
	HealthyHosts map[int]awscloudwatch.Alarm
	// FleetErrors: ERROR lines in the fleet's logs (nil without a fleet).
	FleetErrors awscloudwatch.Alarm
	// FrontDoor5xx: more than FrontDoor5xxPercent of the front door's
	// requests answered 5xx in 5 minutes (nil without a fleet).
	FrontDoor5xx awscloudwatch.Alarm
	// OutboxAge: the PuppetDB outbox's oldest command waited longer than
	// OutboxAgeAlarm; OutboxDLQ: commands PuppetDB refused are in its
	// dead-letter queue. Both nil without puppetdbUrls.
	OutboxAge, OutboxDLQ awscloudwatch.Alarm
	// Topic, compilefarm-<stage>-alarms, gets every alarm above (ALARM and
	// OK; the 5xx alarm's INSUFFICIENT_DATA too). alarmEmail subscribes an
	// address; other subscribers (a pager, chat) are the operator's: the
	// stack output AlarmTopic is its ARN.
	Topic awssns.Topic
}

// ObservabilityProps are what is watched. Compile, Scaling, Fleet and
// PuppetDB may be nil.
type ObservabilityProps struct {
	Queues   *Queues
	Compile  *Compile
	Scaling  *Scaling
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

// The compile queues' age alarms, which page (the scaler's own age alarms
// only wake the scaler).
const (
	// UrgentAgeAlarm: the urgent lane serves agents waiting for a first
	// catalog, which broker serve answers 503 + Retry-After after
	// --first-compile-wait (60 s by default): an urgent job older than
	// that is an agent turned away. The lane runs at urgentConcurrencyMax
	// and Lambda's pollers fill it within seconds, so a lane that keeps up
	// shows the age of a cold start and a compile; past a minute its load
	// is above that maximum, the account's concurrency ran out (the
	// throttles alarm), or compiles fail and are delivered again.
	UrgentAgeAlarm = 60 * time.Second
	// BulkAgeAlarm: a code deploy's recompiles are not draining. A deploy
	// enqueues all of them at once and they drain in order, so the oldest
	// job's age is the time since the deploy: the lane's defaults
	// (scaling.Bulk, "a deploy should be done well within the hour")
	// drain 100,000 nodes of 1 s compiles in about 20 minutes, and in
	// well under half an hour with 1.5 s compiles, the slowest measured
	// (TestBulkAgeAlarm runs the simulation of docs/benchmarks.md). An
	// hour is twice that: the scaler is not raising the cap, compiles
	// are failing or far slower, or the lane is throttled.
	BulkAgeAlarm = time.Hour
)

// FleetMinHealthyHosts: a target group's alarm fires below this many
// healthy tasks. Not fleetDesiredCount: ECS replaces a failed task within
// a minute or two by itself and the NLB spreads agents over the others,
// so one task down is no page; no healthy task is the front door (or PCP)
// down for every agent.
const FleetMinHealthyHosts = 1

// NewObservability declares the dashboard, the alarms and the SNS topic
// they notify (with alarmEmail, its email subscription).
func NewObservability(scope constructs.Construct, id string, cfg Config, p ObservabilityProps) *Observability {
	o := &Observability{Construct: constructs.NewConstruct(scope, jsii.String(id)),
		DLQAlarms: map[string]awscloudwatch.Alarm{}, QueueAge: map[string]awscloudwatch.Alarm{}}
	q := p.Queues
	minute := awscdk.Duration_Minutes(jsii.Number(1))
	fiveMinutes := awscdk.Duration_Minutes(jsii.Number(5))
	o.Topic = newAlarmTopic(o.Construct, cfg)
	if cfg.AlarmEmail != "" {
		o.Topic.AddSubscription(awssnssubscriptions.NewEmailSubscription(jsii.String(cfg.AlarmEmail), nil))
	}
	notify := awscloudwatchactions.NewSnsAction(o.Topic)
	withActions := func(a awscloudwatch.Alarm) awscloudwatch.Alarm {
		a.AddAlarmAction(notify)
		a.AddOkAction(notify)
		return a
	}
	// above: an alarm on m above threshold (at or above with atOrAbove)
	// in periods periods in a row, missing data as no breach.
	above := func(m awscloudwatch.IMetric, id, name, desc string, threshold float64, periods int, atOrAbove bool) awscloudwatch.Alarm {
		op := awscloudwatch.ComparisonOperator_GREATER_THAN_THRESHOLD
		if atOrAbove {
			op = awscloudwatch.ComparisonOperator_GREATER_THAN_OR_EQUAL_TO_THRESHOLD
		}
		return withActions(awscloudwatch.NewAlarm(o.Construct, jsii.String(id), &awscloudwatch.AlarmProps{
			Metric:             m,
			AlarmName:          jsii.String(cfg.Name(name)),
			AlarmDescription:   jsii.String(desc),
			Threshold:          jsii.Number(threshold),
			EvaluationPeriods:  jsii.Number(periods),
			ComparisonOperator: op,
			TreatMissingData:   awscloudwatch.TreatMissingData_NOT_BREACHING,
		}))
	}

	// A job in a dead-letter queue failed MaxReceives times: engine
	// failures, code that does not compile, malformed messages.
	for _, l := range q.Lanes() {
		o.DLQAlarms[l.Name] = above(l.DLQ.MetricApproximateNumberOfMessagesVisible(&awscloudwatch.MetricOptions{
			Period: minute, Statistic: jsii.String("Maximum"),
		}), "Dlq-"+l.Name, l.Name+"-dlq-not-empty",
			"Compile jobs of the "+l.Name+" lane failed "+itoa(MaxReceives)+" times and are in its dead-letter queue", 0, 1, false)
	}
	// A lane's oldest job waited too long (UrgentAgeAlarm, BulkAgeAlarm
	// say why these thresholds). An idle queue reports no age: missing
	// data is no backlog.
	for _, l := range q.Lanes() {
		limit, desc := BulkAgeAlarm, "A bulk job has waited more than "+BulkAgeAlarm.String()+": a code deploy's recompiles are not draining "+
			"(the scaler not raising the bulk cap, compiles failing or slow, or the function throttled)"
		if l.Name == "urgent" {
			limit, desc = UrgentAgeAlarm, "An urgent job has waited more than "+UrgentAgeAlarm.String()+", an agent's first-compile wait: "+
				"the urgent lane is behind at urgentConcurrencyMax (load above it, the account's concurrency exhausted, or compiles failing)"
		}
		o.QueueAge[l.Name] = above(l.Queue.MetricApproximateAgeOfOldestMessage(&awscloudwatch.MetricOptions{
			Period: fiveMinutes, Statistic: jsii.String("Maximum"),
		}), "Age-"+l.Name, l.Name+"-queue-age", desc, limit.Seconds(), 1, true)
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
		alarms = append(alarms, o.DLQAlarms[l.Name], o.QueueAge[l.Name])
	}

	if p.Compile != nil {
		fn := p.Compile.Function
		// Lambda Errors counts failed invocations (init failures, crashes,
		// timeouts), not jobs the function reports failed in its batch
		// response: those retry and end in the dead-letter queue above.
		o.CompileErrors = above(fn.MetricErrors(&awscloudwatch.MetricOptions{
			Period: fiveMinutes, Statistic: jsii.String("Sum"),
		}), "CompileErrors", "compile-errors", "Invocations of the compile function failed (init failure, crash or timeout)", 0, 1, false)
		// Throttles: Lambda refused an invocation. The event sources'
		// MaximumConcurrency keeps the lanes within urgentConcurrencyMax +
		// bulkConcurrencyMax, so a throttle means the account's (or the
		// region's) concurrency ran out: other functions, or the lanes'
		// maxima above the unreserved concurrency. A throttled batch goes
		// back to its queue and counts a receive, so throttling that lasts
		// ends in the dead-letter queue. None is expected: any in 5 minutes
		// pages, as an error does.
		o.CompileThrottles = above(fn.MetricThrottles(&awscloudwatch.MetricOptions{
			Period: fiveMinutes, Statistic: jsii.String("Sum"),
		}), "CompileThrottles", "compile-throttles",
			"Lambda throttled the compile function: the account's concurrency is exhausted (jobs wait, and go to the dead-letter queue if it lasts)", 0, 1, false)

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
		alarms = append(alarms, o.CompileErrors, o.CompileThrottles)
		// The canary's rollback alarm (compile.go): CodeDeploy acts on it,
		// the topic says it happened.
		if a := p.Compile.CanaryErrors; a != nil {
			alarms = append(alarms, withActions(a))
		}
	}
	if sc := p.Scaling; sc != nil {
		// The scaler runs every minute. A broken one (its IAM, a mapping
		// it cannot find, its configuration) fails every run, so errs in
		// every 5-minute window; one failed run (a throttled API call) is
		// retried a minute later by the next. Two windows in a row page.
		o.ScalerErrors = above(sc.Function.MetricErrors(&awscloudwatch.MetricOptions{
			Period: fiveMinutes, Statistic: jsii.String("Sum"),
		}), "ScalerErrors", "scaler-errors",
			"The scaler failed for 10 minutes: the bulk lane's concurrency is not being steered (its logs say why)", 0, 2, false)
		alarms = append(alarms, o.ScalerErrors)
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
		o.FleetErrors = above(errMetric, "FleetErrors", "front-door-errors",
			"The front door fleet logged errors in 5 minutes running", 0, 5, false)
		alarms = append(alarms, o.FleetErrors)

		fdm := func(name, stat, label string, period awscdk.Duration) awscloudwatch.IMetric {
			return awscloudwatch.NewMetric(&awscloudwatch.MetricProps{
				Namespace: jsii.String(FrontDoorNamespace), MetricName: jsii.String(name),
				DimensionsMap: &map[string]*string{"Stage": jsii.String(cfg.Stage)},
				Period:        period, Statistic: jsii.String(stat), Label: jsii.String(label),
			})
		}
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
		// Missing data: a 5xx share of no requests is undefined, neither OK
		// nor a breach. Each task writes its counters every minute (zeros
		// included) once it has answered a request, so no data means no
		// task writing: the fleet down (the healthy-hosts alarms), its logs
		// not reaching CloudWatch, or, on a stage without agents, tasks that
		// have answered only health checks. The alarm then goes to
		// INSUFFICIENT_DATA, not OK, and tells the topic so; "breaching"
		// would page a 5xx rate nobody measured.
		o.FrontDoor5xx = rate5xx(fiveMinutes).CreateAlarm(o.Construct, jsii.String("FrontDoor5xx"), &awscloudwatch.CreateAlarmOptions{
			AlarmName: jsii.String(cfg.Name("front-door-5xx")),
			AlarmDescription: jsii.String("More than " + itoa(FrontDoor5xxPercent) + "% of the front door's requests in 5 minutes were answered 5xx: " +
				"503 refusals for want of capacity (Refused), first compiles not done within first-compile-wait (CatalogPending), " +
				"or backend failures (ERROR lines in the fleet's logs). INSUFFICIENT_DATA: no task reports requests " +
				"(fleet down, logs not arriving, or no agent yet)"),
			Threshold:          jsii.Number(FrontDoor5xxPercent),
			EvaluationPeriods:  jsii.Number(1),
			ComparisonOperator: awscloudwatch.ComparisonOperator_GREATER_THAN_THRESHOLD,
			TreatMissingData:   awscloudwatch.TreatMissingData_MISSING,
		})
		withActions(o.FrontDoor5xx).AddInsufficientDataAction(notify)
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
		// A target group with no healthy task: agents reach no front door
		// (8140) or no PCP broker (8142). A fleet that is down writes no
		// metric at all, so missing data breaches.
		o.HealthyHosts = map[int]awscloudwatch.Alarm{}
		for _, port := range []int{FrontDoorPort, PCPPort} {
			tgm := f.TargetGroups[port].Metrics()
			o.HealthyHosts[port] = withActions(tgm.HealthyHostCount(&awscloudwatch.MetricOptions{
				Period: minute, Statistic: jsii.String("Minimum"),
			}).CreateAlarm(o.Construct, jsii.String("HealthyHosts"+itoa(port)), &awscloudwatch.CreateAlarmOptions{
				AlarmName: jsii.String(cfg.Name("healthy-hosts-" + itoa(port))),
				AlarmDescription: jsii.String("No fleet task passed the load balancer's health check on port " + itoa(port) +
					" for 2 minutes (or the target group reports nothing): agents cannot connect. ECS events and the fleet's logs say why"),
				Threshold: jsii.Number(FleetMinHealthyHosts),
				// Two minutes: the NLB takes 20 s (2 checks 10 s apart) to
				// mark a task unhealthy, a replacement a minute or so to
				// start; two empty minutes in a row are an outage.
				EvaluationPeriods:  jsii.Number(2),
				ComparisonOperator: awscloudwatch.ComparisonOperator_LESS_THAN_THRESHOLD,
				TreatMissingData:   awscloudwatch.TreatMissingData_BREACHING,
			}))
			alarms = append(alarms, o.HealthyHosts[port])
		}
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
		o.OutboxAge = above(pdb.Outbox.MetricApproximateAgeOfOldestMessage(&awscloudwatch.MetricOptions{
			Period: fiveMinutes, Statistic: jsii.String("Maximum"),
		}), "OutboxAge", "puppetdb-outbox-age", "A PuppetDB command has waited in the outbox for more than "+OutboxAgeAlarm.String()+
			": PuppetDB unreachable or failing, or no fleet task draining (the fleet's logs say which)", OutboxAgeAlarm.Seconds(), 1, false)
		o.OutboxDLQ = above(pdb.DLQ.MetricApproximateNumberOfMessagesVisible(&awscloudwatch.MetricOptions{
			Period: minute, Statistic: jsii.String("Maximum"),
		}), "OutboxDlq", "puppetdb-dlq-not-empty", "PuppetDB refused commands (or one was received "+itoa(OutboxMaxReceives)+
			" times): they are in its dead-letter queue, and the fleet's logs name their nodes", 0, 1, false)
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

// newAlarmTopic declares compilefarm-<stage>-alarms, the topic every
// operator alarm notifies, and its output AlarmTopic (its ARN, for the
// subscriptions an operator adds). It accepts only TLS; the topic policy
// that takes replaces SNS's default one, under which the account's
// CloudWatch alarms could publish, so it allows them again: alarms of this
// account named compilefarm-<stage>-*. Not KMS-encrypted: CloudWatch
// cannot publish to a topic under the AWS-managed SNS key, and the alarms
// carry no secret.
func newAlarmTopic(scope constructs.Construct, cfg Config) awssns.Topic {
	t := awssns.NewTopic(scope, jsii.String("Alarms"), &awssns.TopicProps{
		TopicName:   jsii.String(cfg.Name("alarms")),
		DisplayName: jsii.String("compilefarm " + cfg.Stage + " alarms"),
		EnforceSSL:  jsii.Bool(true),
	})
	stack := awscdk.Stack_Of(scope)
	t.AddToResourcePolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
		Sid:        jsii.String("CloudWatchAlarms"),
		Principals: &[]awsiam.IPrincipal{awsiam.NewServicePrincipal(jsii.String("cloudwatch.amazonaws.com"), nil)},
		Actions:    jsii.Strings("sns:Publish"),
		Resources:  &[]*string{t.TopicArn()},
		Conditions: &map[string]interface{}{
			"StringEquals": map[string]interface{}{"aws:SourceAccount": stack.Account()},
			"ArnLike": map[string]interface{}{"aws:SourceArn": stack.FormatArn(&awscdk.ArnComponents{
				Service: jsii.String("cloudwatch"), Resource: jsii.String("alarm"), ResourceName: jsii.String(cfg.Name("*")),
				ArnFormat: awscdk.ArnFormat_COLON_RESOURCE_NAME,
			})},
		},
	}))
	awscdk.NewCfnOutput(stack, jsii.String("AlarmTopic"), &awscdk.CfnOutputProps{
		Value: t.TopicArn(), Description: jsii.String("the alarms' SNS topic: subscribe a pager or chat to it"),
	})
	return t
}

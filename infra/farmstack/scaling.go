package farmstack

import (
	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatch"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatchactions"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsevents"
	"github.com/aws/aws-cdk-go/awscdk/v2/awseventstargets"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslogs"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"

	"github.com/compilefarm/compilefarm/pkg/scaling"
)

// The scaler steers the bulk lane only, the lanes whose pkg/scaling
// defaults have a range (scaling.Lane.Steered): the urgent lane's event
// source sits at urgentConcurrencyMax (compile.go). The bulk lane's
// settings are pkg/scaling's defaults (scaling.Bulk, where its doc comment
// says why; the simulation in docs/benchmarks.md runs with the same),
// except min and max, which the context may override (Config).
// COMPILEFARM_SCALER_COOLDOWN is scaling.DefaultCooldown: the least time
// between two steps of one lane.
//
// Queue-age thresholds: the scaler's decision and the alarms that wake it
// use the same ones, the lane's High, Low and LowFor, passed to the scaler
// as the optional "high", "low" and "low_for" of COMPILEFARM_SCALER_LANES.
// The scaler raises a lane's concurrency while its oldest message is at
// least high old and lowers it once the age stayed at or below low for
// low_for, as far as the messages in flight leave room (it reads the
// queue's ApproximateNumberOfMessagesNotVisible too: GetMetricData, the
// same permission). The alarms only wake it early: the every-minute schedule keeps
// it stepping while an alarm stays in ALARM (an alarm invokes its action
// once per state change).

// Scaling is the scaler Lambda (functions/scaler): it steps the bulk
// lane's event source MaximumConcurrency between the lane's min and max,
// woken by queue-age alarms and an every-minute schedule.
type Scaling struct {
	Construct constructs.Construct // the construct holding the resources
	Function  awslambda.Function
	// Lanes are the lanes it steers (the bulk lane).
	Lanes []*Lane
	// Alarms by lane name: high (age above) and low (age below).
	High, Low map[string]awscloudwatch.Alarm
	Schedule  awsevents.Rule
}

// ScalingProps are what the scaler steers.
type ScalingProps struct {
	AssetDir string // the directory holding the scaler's bootstrap (infra/assets/scaler)
	Queues   *Queues
	Compile  *Compile
}

// ScalerStep is how far one step moves lane's concurrency within [lo, hi]:
// the lane's default step (scaling.Urgent or scaling.Bulk), but no more
// than the range (a context that narrows it), and at least 1.
func ScalerStep(lane string, lo, hi int) int {
	return max(1, min(scaling.DefaultLane(lane).Config.Step, hi-lo))
}

// NewScaling declares the scaler, its alarms and its schedule.
func NewScaling(scope constructs.Construct, id string, cfg Config, p ScalingProps) *Scaling {
	s := &Scaling{Construct: constructs.NewConstruct(scope, jsii.String(id)),
		High: map[string]awscloudwatch.Alarm{}, Low: map[string]awscloudwatch.Alarm{}}
	q, c := p.Queues, p.Compile
	for _, l := range q.Lanes() {
		if scaling.DefaultLane(l.Name).Steered() {
			s.Lanes = append(s.Lanes, l)
		}
	}
	ranges := map[string][2]int{
		"bulk": {cfg.BulkConcurrencyMin, cfg.BulkConcurrencyMax},
	}
	// COMPILEFARM_SCALER_LANES, the contract with functions/scaler: a JSON
	// array of {"lane","queue","mapping","min","max","step"}.
	var lanes []interface{}
	for _, l := range s.Lanes {
		r, th := ranges[l.Name], scaling.DefaultLane(l.Name).Config
		lanes = append(lanes, map[string]interface{}{
			"lane": l.Name, "queue": l.Queue.QueueName(), "mapping": c.Sources[l.Name].EventSourceMappingId(),
			"min": r[0], "max": r[1], "step": ScalerStep(l.Name, r[0], r[1]),
			"high": th.High.String(), "low": th.Low.String(), "low_for": th.LowFor.String(),
		})
	}
	stack := awscdk.Stack_Of(s.Construct)
	logs := awslogs.NewLogGroup(s.Construct, jsii.String("Logs"), &awslogs.LogGroupProps{
		LogGroupName:  jsii.String("/aws/lambda/" + cfg.Name("scaler")),
		Retention:     awslogs.RetentionDays_ONE_MONTH,
		RemovalPolicy: awscdk.RemovalPolicy_DESTROY,
	})
	s.Function = awslambda.NewFunction(s.Construct, jsii.String("Function"), &awslambda.FunctionProps{
		FunctionName: jsii.String(cfg.Name("scaler")),
		Description:  jsii.String("compilefarm " + cfg.Stage + ": steps the bulk compile event source's MaximumConcurrency with the queue's age"),
		Runtime:      awslambda.Runtime_PROVIDED_AL2023(),
		Architecture: awslambda.Architecture_ARM_64(),
		Handler:      jsii.String("bootstrap"),
		// Built by `make synth` (GOOS=linux GOARCH=arm64 -tags lambda.norpc).
		Code:       awslambda.Code_FromAsset(jsii.String(p.AssetDir), nil),
		MemorySize: jsii.Number(128),
		Timeout:    awscdk.Duration_Seconds(jsii.Number(30)),
		// No reserved concurrency: AWS refuses any reservation that leaves
		// an account less than 100 unreserved (new accounts have 10 in
		// all). Two overlapping invocations (an alarm and the schedule)
		// are harmless: the scaler's cool-down runs from the mapping's
		// LastModified, so the second sees the first's change.
		LogGroup: logs,
		Environment: &map[string]*string{
			// Stack.ToJsonString resolves the queue names and mapping IDs
			// (tokens) inside the JSON at deploy time.
			"COMPILEFARM_SCALER_LANES":    stack.ToJsonString(lanes, nil),
			"COMPILEFARM_SCALER_COOLDOWN": jsii.String(scaling.DefaultCooldown.String()),
		},
	})
	fn := s.Function
	// The mapping starts at the lane's min (compile.go) and the scaler
	// moves it. CloudFormation leaves a mapping alone while its template
	// does not change; a deploy that changes a mapping (its batch size, say)
	// sets MaximumConcurrency back to min, and the scaler steps up again.
	var mappingARNs []*string
	for _, l := range s.Lanes {
		mappingARNs = append(mappingARNs, c.Sources[l.Name].EventSourceMappingArn())
	}
	fn.AddToRolePolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
		Sid:       jsii.String("StepEventSourceMappings"),
		Actions:   jsii.Strings("lambda:GetEventSourceMapping", "lambda:UpdateEventSourceMapping"),
		Resources: &mappingARNs,
	}))
	fn.AddToRolePolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
		Sid:     jsii.String("ReadQueueMetrics"),
		Actions: jsii.Strings("cloudwatch:GetMetricData"),
		// GetMetricData supports no resource-level permissions: its
		// resource must be "*". It only reads metrics (no data service).
		Resources: jsii.Strings("*"),
	}))

	action := awscloudwatchactions.NewLambdaAction(fn, &awscloudwatchactions.LambdaActionProps{
		// One lambda:InvokeFunction permission per alarm (the default id
		// would collide between the alarms).
		UseUniquePermissionId: jsii.Bool(true),
	})
	for _, l := range s.Lanes {
		th := scaling.DefaultLane(l.Name).Config
		age := l.Queue.MetricApproximateAgeOfOldestMessage(&awscloudwatch.MetricOptions{
			Period: awscdk.Duration_Minutes(jsii.Number(1)), Statistic: jsii.String("Maximum"),
		})
		high := age.CreateAlarm(s.Construct, jsii.String("AgeHigh-"+l.Name), &awscloudwatch.CreateAlarmOptions{
			AlarmName:          jsii.String(cfg.Name(l.Name + "-age-high")),
			AlarmDescription:   jsii.String("The " + l.Name + " queue's oldest message is old: the scaler raises the lane's concurrency"),
			Threshold:          jsii.Number(th.High.Seconds()),
			EvaluationPeriods:  jsii.Number(1),
			ComparisonOperator: awscloudwatch.ComparisonOperator_GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
			TreatMissingData:   awscloudwatch.TreatMissingData_NOT_BREACHING,
		})
		low := age.CreateAlarm(s.Construct, jsii.String("AgeLow-"+l.Name), &awscloudwatch.CreateAlarmOptions{
			AlarmName:          jsii.String(cfg.Name(l.Name + "-age-low")),
			AlarmDescription:   jsii.String("The " + l.Name + " queue keeps up: the scaler lowers the lane's concurrency"),
			Threshold:          jsii.Number(th.Low.Seconds()),
			EvaluationPeriods:  jsii.Number(th.LowFor.Minutes()), // one-minute periods
			ComparisonOperator: awscloudwatch.ComparisonOperator_LESS_THAN_OR_EQUAL_TO_THRESHOLD,
			// An idle queue stops reporting: no data means no backlog.
			TreatMissingData: awscloudwatch.TreatMissingData_BREACHING,
		})
		high.AddAlarmAction(action)
		low.AddAlarmAction(action)
		s.High[l.Name], s.Low[l.Name] = high, low
	}

	s.Schedule = awsevents.NewRule(s.Construct, jsii.String("EveryMinute"), &awsevents.RuleProps{
		RuleName:    jsii.String(cfg.Name("scaler-tick")),
		Description: jsii.String("Runs the scaler every minute, so it keeps stepping while an age alarm stays in ALARM"),
		Schedule:    awsevents.Schedule_Rate(awscdk.Duration_Minutes(jsii.Number(1))),
		Targets:     &[]awsevents.IRuleTarget{awseventstargets.NewLambdaFunction(fn, nil)},
	})
	return s
}

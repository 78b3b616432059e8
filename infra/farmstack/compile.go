package farmstack

import (
	"fmt"
	"maps"
	"strconv"
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatch"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscodedeploy"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsecrassets"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambdaeventsources"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslogs"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"

	"github.com/compilefarm/compilefarm/pkg/dynamostate"
	"github.com/compilefarm/compilefarm/pkg/scaling"
)

// AssetExcludes keeps what a Docker build of the repository root does not
// need out of the image assets' build context (cdk.out copies the context
// at every synth, and its hash changes the image): the git directory, tools
// and data, built binaries, npm trees, infra/ itself (its own Go module, with
// cdk.out inside), the docs, the LocalStack setup, the measurement commands
// (bench/) and the end-to-end tests (test/): no Go package the images build
// imports them, so changing them does not change an image.
var AssetExcludes = []string{".git", ".tools", ".data", "bin", "node_modules", "infra", "docs", "localstack", "bench", "test",
	"**/cdk.out", "**/*.test", "**/*.out", "**/*.prof"}

// Batching of the compile event sources: the lanes' BatchSize and
// BatchingWindow in pkg/scaling (scaling.Urgent: 1, no window; scaling.Bulk:
// 2, 10 s; their doc comments say why), which the simulation in
// docs/benchmarks.md models too. The function runs one Ruby worker, so a
// batch's jobs compile one after the other and the batch must fit in the
// function's timeout (EngineTimeout).

// maxEngineTimeout is the compile engine's own timeout per catalog
// (COMPILEFARM_COMPILE_TIMEOUT, the function's default of 2m).
const maxEngineTimeout = 2 * time.Minute

// EngineTimeout is the per-catalog compile timeout given to the function:
// 2 minutes, or less if a full batch of compiles of the lane with the
// larger batches (plus 30 s for the rest of the invocation) would not fit
// in the function's timeout.
func EngineTimeout(functionTimeoutSeconds int) time.Duration {
	t := time.Duration(functionTimeoutSeconds-30) * time.Second / time.Duration(MaxBatchSize())
	if t > maxEngineTimeout {
		t = maxEngineTimeout
	}
	return t.Truncate(time.Second)
}

// MaxBatchSize is the larger of the lanes' batch sizes.
func MaxBatchSize() int { return max(scaling.Urgent.BatchSize, scaling.Bulk.BatchSize) }

// CompileAlias is the compile function's alias that both event sources
// invoke: a new image or configuration is a new version, and moving the
// alias to it (CodeDeploy's canary, or the stack update) is the release.
const CompileAlias = "live"

// compileDeployment values (Config.CompileDeployment).
const (
	// DeployCanary: CodeDeploy moves the alias to a new version, 10% of
	// the compiles for 10 minutes first, and moves it back if the new
	// version's Errors alarm fires (or the deployment fails or is stopped).
	DeployCanary = "canary"
	// DeployAllAtOnce: the stack update moves the alias at once, with no
	// CodeDeploy (a dev stage; LocalStack).
	DeployAllAtOnce = "all-at-once"
)

// CanaryConfig is the canary's traffic shift: the CodeDeploy predefined
// configuration of 10% for 10 minutes. Ten minutes at 10% are tens of
// compiles on a quiet stage and thousands during a deploy, enough for a
// Puppet or worker that fails at start or on ordinary catalogs to show as
// errors; a longer bake holds every stack update that changes the image
// for as long (cdk deploy waits for the deployment).
func CanaryConfig() awscodedeploy.ILambdaDeploymentConfig {
	return awscodedeploy.LambdaDeploymentConfig_CANARY_10PERCENT_10MINUTES()
}

// Compile is the compile Lambda (functions/compile) and its event sources.
type Compile struct {
	Construct constructs.Construct // the construct holding the resources
	Function  awslambda.Function
	// Version is the function's current version (a new one whenever its
	// image or configuration changes), Alias its CompileAlias, which the
	// event sources invoke.
	Version awslambda.Version
	Alias   awslambda.Alias
	// Deployment is the CodeDeploy deployment group that moves Alias, and
	// CanaryErrors its rollback alarm: the current version's Errors
	// through the alias (dimension ExecutedVersion). Both nil with
	// compileDeployment all-at-once.
	Deployment   awscodedeploy.LambdaDeploymentGroup
	CanaryErrors awscloudwatch.Alarm
	// Sources by lane name, for the scaler (their mapping IDs and ARNs).
	Sources map[string]awslambdaeventsources.SqsEventSource
	// InitialConcurrency is each lane's MaximumConcurrency as deployed:
	// urgent's maximum, where it stays; bulk's minimum, which the scaler
	// moves within [min, max].
	InitialConcurrency map[string]int
}

// CompileProps are what the compile function is wired to.
type CompileProps struct {
	RepoRoot string // the repository root: the Docker build context
	Storage  *Storage
	Queues   *Queues
	PuppetDB *PuppetDB // nil without puppetdbUrls
}

// NewCompile declares the compile function from functions/compile/Dockerfile.
func NewCompile(scope constructs.Construct, id string, cfg Config, p CompileProps) *Compile {
	c := &Compile{Construct: constructs.NewConstruct(scope, jsii.String(id)),
		Sources: map[string]awslambdaeventsources.SqsEventSource{}, InitialConcurrency: map[string]int{}}
	st, q := p.Storage, p.Queues
	logs := awslogs.NewLogGroup(c.Construct, jsii.String("Logs"), &awslogs.LogGroupProps{
		LogGroupName:  jsii.String("/aws/lambda/" + cfg.Name("compile")),
		Retention:     awslogs.RetentionDays_ONE_MONTH,
		RemovalPolicy: awscdk.RemovalPolicy_DESTROY,
	})
	// Exactly the variables functions/compile/main.go reads that the
	// stack decides (tests check the names against main.go). Left at
	// their defaults: COMPILEFARM_PREFIX (the bucket is the stage's
	// own), COMPILEFARM_WORKDIR (the image sets it), COMPILEFARM_RUBY,
	// and the optional COMPILEFARM_EXTERNAL_NODES(_TIMEOUT) and
	// COMPILEFARM_EYAML_KEYS, which need a classifier in the image or
	// a key mount the stack does not have.
	env := map[string]*string{
		"COMPILEFARM_BUCKET":             st.Bucket.BucketName(),
		"COMPILEFARM_NODES_TABLE":        st.Table(dynamostate.RoleNodes).TableName(),
		"COMPILEFARM_NODE_INDEX_TABLE":   st.Table(dynamostate.RoleNodeIndex).TableName(),
		"COMPILEFARM_ENVIRONMENTS_TABLE": st.Table(dynamostate.RoleEnvironments).TableName(),
		"COMPILEFARM_URGENT_QUEUE_URL":   q.Urgent.Queue.QueueUrl(),
		"COMPILEFARM_BULK_QUEUE_URL":     q.Bulk.Queue.QueueUrl(),
		"COMPILEFARM_MAX_RECEIVES":       jsii.String(strconv.Itoa(MaxReceives)),
		"COMPILEFARM_COMPILE_TIMEOUT":    jsii.String(EngineTimeout(cfg.CompileTimeoutSeconds).String()),
	}
	// PuppetDB (puppetdbUrls): its URLs, CA, identity and storeconfigs for
	// puppetdb_query() and collectors (puppetdb.go).
	if p.PuppetDB != nil {
		maps.Copy(env, p.PuppetDB.CompileEnvironment())
		// Where compiles record the queries they make (the fleet's
		// refresher runs them again).
		env["COMPILEFARM_QUERIES_TABLE"] = st.Table(dynamostate.RoleQueries).TableName()
	}
	c.Function = awslambda.NewDockerImageFunction(c.Construct, jsii.String("Function"), &awslambda.DockerImageFunctionProps{
		FunctionName: jsii.String(cfg.Name("compile")),
		Description:  jsii.String("compilefarm " + cfg.Stage + ": compiles Puppet catalogs from the urgent and bulk queues"),
		Code: awslambda.DockerImageCode_FromImageAsset(jsii.String(p.RepoRoot), &awslambda.AssetImageCodeProps{
			File:    jsii.String("functions/compile/Dockerfile"),
			Exclude: jsii.Strings(AssetExcludes...),
			// arm64: Lambda's arm64 costs about 20 % less per GB-second than
			// x86_64. The Dockerfile builds for the platform it is asked for
			// (GOARCH=$TARGETARCH; its header says what was checked on arm64).
			Platform: awsecrassets.Platform_LINUX_ARM64(),
		}),
		Architecture: awslambda.Architecture_ARM_64(),
		MemorySize:   jsii.Number(cfg.CompileMemoryMiB),
		Timeout:      awscdk.Duration_Seconds(jsii.Number(cfg.CompileTimeoutSeconds)),
		// Code checkouts and the worker's state live under /tmp
		// (COMPILEFARM_WORKDIR): more than the default 512 MiB.
		EphemeralStorageSize: awscdk.Size_Mebibytes(jsii.Number(2048)),
		LogGroup:             logs,
		Environment:          &env,
		// Versions are kept when a newer one replaces them (release):
		// the alias can go back to the one before after a deployment has
		// finished, not only during its canary.
		CurrentVersionOptions: &awslambda.VersionOptions{RemovalPolicy: awscdk.RemovalPolicy_RETAIN},
	})
	fn := c.Function
	// The actions the function calls, on what it calls them (access.go);
	// the event sources grant the receive side themselves.
	grantCompile(fn.Role(), st, q, p.PuppetDB)
	if pdb := p.PuppetDB; pdb != nil {
		if len(pdb.CompileSubnetIDs) > 0 {
			// In the VPC PuppetDB is reached from (puppetdbSubnetIds), set
			// on the CloudFormation resource: the L2 function wants an
			// IVpc with its zones, which only a lookup would give. The
			// managed policy is what the L2 adds for a function in a VPC
			// (its network interfaces); on the role itself, so the role
			// has it before the function is created.
			fn.Node().DefaultChild().(awslambda.CfnFunction).SetVpcConfig(&awslambda.CfnFunction_VpcConfigProperty{
				SubnetIds:        jsii.Strings(pdb.CompileSubnetIDs...),
				SecurityGroupIds: &[]*string{pdb.CompileSecurityGroupID},
			})
			fn.Role().AddManagedPolicy(awsiam.ManagedPolicy_FromAwsManagedPolicyName(jsii.String("service-role/AWSLambdaVPCAccessExecutionRole")))
		}
	}

	c.release(cfg)

	// The urgent lane at its maximum: MaximumConcurrency is a cap, not a
	// reservation, and Lambda's own SQS scaling adds invocations as the
	// queue fills, so agents' compiles start within seconds (stepping it
	// up from a low cap took minutes; scaling.Urgent says more). The bulk
	// lane starts at its minimum and the scaler steers it: its cap is what
	// protects classifiers and Hiera backends from a deploy's flood.
	for _, l := range []struct {
		lane     *Lane
		initial  int
		settings scaling.Lane
	}{
		{q.Urgent, cfg.UrgentConcurrencyMax, scaling.Urgent},
		{q.Bulk, cfg.BulkConcurrencyMin, scaling.Bulk},
	} {
		props := &awslambdaeventsources.SqsEventSourceProps{
			BatchSize:               jsii.Number(l.settings.BatchSize),
			MaxConcurrency:          jsii.Number(l.initial),
			ReportBatchItemFailures: jsii.Bool(true),
		}
		if w := l.settings.BatchingWindow; w > 0 {
			// MaximumBatchingWindowInSeconds: whole seconds.
			props.MaxBatchingWindow = awscdk.Duration_Seconds(jsii.Number(w.Round(time.Second).Seconds()))
		}
		src := awslambdaeventsources.NewSqsEventSource(l.lane.Queue, props)
		c.Alias.AddEventSource(src)
		c.Sources[l.lane.Name] = src
		c.InitialConcurrency[l.lane.Name] = l.initial
	}
	if EngineTimeout(cfg.CompileTimeoutSeconds) < 10*time.Second {
		panic(fmt.Sprintf("farmstack: compileTimeoutSeconds %d leaves %s per compile", cfg.CompileTimeoutSeconds, EngineTimeout(cfg.CompileTimeoutSeconds)))
	}
	return c
}

// release declares the function's current version and CompileAlias on it
// and, with compileDeployment canary, the CodeDeploy deployment group that
// moves the alias to each new version: a new Puppet or worker in the image
// (or a new configuration) takes 10% of the compiles for 10 minutes first,
// and goes back to the old version if it errs (docs/operations.md,
// Upgrading the compile image). The SQS event sources invoke the alias,
// and Lambda applies the alias's weights to their invocations too.
//
// Old versions are kept (RETAIN): the one before is what the alias goes
// back to, also after a deployment finished. They pile up, one per
// release; docs/operations.md says how to delete old ones.
func (c *Compile) release(cfg Config) {
	fn := c.Function
	c.Version = fn.CurrentVersion()
	c.Alias = awslambda.NewAlias(c.Construct, jsii.String("Live"), &awslambda.AliasProps{
		AliasName:   jsii.String(CompileAlias),
		Version:     c.Version,
		Description: jsii.String("the version that compiles: both event sources invoke it"),
	})
	if cfg.CompileDeployment != DeployCanary {
		return
	}
	// The new version's errors: invocations through the alias carry the
	// version that ran as ExecutedVersion. (Version.MetricErrors names
	// the version by ARN in Resource, which Lambda never publishes.)
	// Any error rolls back, as any error pages (CompileErrors): a healthy
	// farm's baseline is none. Compiles that fail as catalogs are batch
	// item failures, not Errors: a Puppet that compiles nothing right
	// shows in the dashboard's catalog outcomes and the dead-letter
	// queues, not here.
	errs := awscloudwatch.NewMetric(&awscloudwatch.MetricProps{
		Namespace: jsii.String("AWS/Lambda"), MetricName: jsii.String("Errors"),
		DimensionsMap: &map[string]*string{
			"FunctionName":    fn.FunctionName(),
			"Resource":        awscdk.Fn_Join(jsii.String(":"), &[]*string{fn.FunctionName(), jsii.String(CompileAlias)}),
			"ExecutedVersion": c.Version.Version(),
		},
		Statistic: jsii.String("Sum"), Period: awscdk.Duration_Minutes(jsii.Number(1)),
	})
	c.CanaryErrors = awscloudwatch.NewAlarm(c.Construct, jsii.String("CanaryErrors"), &awscloudwatch.AlarmProps{
		Metric:             errs,
		AlarmName:          jsii.String(cfg.Name("compile-canary-errors")),
		AlarmDescription:   jsii.String("The compile function's current version failed invocations through the alias " + CompileAlias + ": during a deployment CodeDeploy moves the alias back"),
		Threshold:          jsii.Number(0),
		EvaluationPeriods:  jsii.Number(1),
		ComparisonOperator: awscloudwatch.ComparisonOperator_GREATER_THAN_THRESHOLD,
		TreatMissingData:   awscloudwatch.TreatMissingData_NOT_BREACHING,
	})
	c.Deployment = awscodedeploy.NewLambdaDeploymentGroup(c.Construct, jsii.String("Deployment"), &awscodedeploy.LambdaDeploymentGroupProps{
		Application: awscodedeploy.NewLambdaApplication(c.Construct, jsii.String("Application"), &awscodedeploy.LambdaApplicationProps{
			ApplicationName: jsii.String(cfg.Name("compile")),
		}),
		DeploymentGroupName: jsii.String(cfg.Name("compile")),
		Alias:               c.Alias,
		DeploymentConfig:    CanaryConfig(),
		Alarms:              &[]awscloudwatch.IAlarm{c.CanaryErrors},
		AutoRollback: &awscodedeploy.AutoRollbackConfig{
			FailedDeployment: jsii.Bool(true), StoppedDeployment: jsii.Bool(true), DeploymentInAlarm: jsii.Bool(true),
		},
	})
}

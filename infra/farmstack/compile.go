package farmstack

import (
	"fmt"
	"maps"
	"strconv"
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2"
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

// Compile is the compile Lambda (functions/compile) and its event sources.
type Compile struct {
	Construct constructs.Construct // the construct holding the resources
	Function  awslambda.Function
	// Sources by lane name, for the scaler (their mapping IDs and ARNs).
	Sources map[string]awslambdaeventsources.SqsEventSource
	// Initial MaximumConcurrency by lane name: the lane's minimum; the
	// scaler moves it within [min, max].
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

	for _, l := range []struct {
		lane     *Lane
		min      int
		settings scaling.Lane
	}{
		{q.Urgent, cfg.UrgentConcurrencyMin, scaling.Urgent},
		{q.Bulk, cfg.BulkConcurrencyMin, scaling.Bulk},
	} {
		props := &awslambdaeventsources.SqsEventSourceProps{
			BatchSize:               jsii.Number(l.settings.BatchSize),
			MaxConcurrency:          jsii.Number(l.min),
			ReportBatchItemFailures: jsii.Bool(true),
		}
		if w := l.settings.BatchingWindow; w > 0 {
			// MaximumBatchingWindowInSeconds: whole seconds.
			props.MaxBatchingWindow = awscdk.Duration_Seconds(jsii.Number(w.Round(time.Second).Seconds()))
		}
		src := awslambdaeventsources.NewSqsEventSource(l.lane.Queue, props)
		fn.AddEventSource(src)
		c.Sources[l.lane.Name] = src
		c.InitialConcurrency[l.lane.Name] = l.min
	}
	if EngineTimeout(cfg.CompileTimeoutSeconds) < 10*time.Second {
		panic(fmt.Sprintf("farmstack: compileTimeoutSeconds %d leaves %s per compile", cfg.CompileTimeoutSeconds, EngineTimeout(cfg.CompileTimeoutSeconds)))
	}
	return c
}

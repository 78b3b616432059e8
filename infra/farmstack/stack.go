package farmstack

import (
	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"

	"github.com/compilefarm/compilefarm/pkg/dynamostate"
)

// Props locate what the stack builds from disk.
type Props struct {
	Config Config
	// RepoRoot is the repository root: the Docker build context of the
	// compile function's and the fleet's images.
	RepoRoot string
	// ScalerAssetDir holds the scaler's bootstrap (infra/assets/scaler).
	ScalerAssetDir string
}

// FarmStack is one stage of the farm: compilefarm-<stage>.
type FarmStack struct {
	awscdk.Stack
	Config        Config
	Storage       *Storage
	Queues        *Queues
	PuppetDB      *PuppetDB // nil without puppetdbUrls
	Compile       *Compile  // nil with compileFunction=false
	Fleet         *Fleet    // nil with fleet=false
	Scaling       *Scaling  // nil with compileFunction=false
	Observability *Observability
}

// NewFarmStack declares the stage's stack. With account and region (every
// protected stage has them) the stack has that environment, and a deploy
// with credentials of another account or region fails; without them it is
// environment-agnostic and deploys where the CLI's credentials point.
// Either way it does no lookups: synth needs no AWS access.
func NewFarmStack(scope constructs.Construct, p Props) *FarmStack {
	cfg := p.Config
	props := &awscdk.StackProps{
		StackName:   jsii.String(cfg.StackName()),
		Description: jsii.String("compilefarm " + cfg.Stage + ": serverless Puppet compile farm (infra/)"),
		// protect: `cdk destroy` and a stack delete fail until it is
		// turned off.
		TerminationProtection: jsii.Bool(cfg.Protect),
	}
	if cfg.Account != "" {
		props.Env = &awscdk.Environment{Account: jsii.String(cfg.Account), Region: jsii.String(cfg.Region)}
	}
	stack := awscdk.NewStack(scope, jsii.String(cfg.StackName()), props)
	if cfg.Account != "" && len(cfg.AvailabilityZones) > 0 {
		// A stack with an environment answers the VPC's question for the
		// region's zones with a context lookup (AWS credentials at synth,
		// a cdk.context.json entry); the named zones are the answer, given
		// as that lookup's context value before anything asks.
		stack.Node().SetContext(jsii.String(availabilityZonesContextKey(cfg.Account, cfg.Region)), jsii.Strings(cfg.AvailabilityZones...))
	}
	awscdk.Tags_Of(stack).Add(jsii.String("compilefarm:stage"), jsii.String(cfg.Stage), nil)
	s := &FarmStack{Stack: stack, Config: cfg}
	timeout := awscdk.Duration_Seconds(jsii.Number(cfg.CompileTimeoutSeconds))
	s.Storage = NewStorage(stack, "Storage", cfg)
	s.Queues = NewQueues(stack, "Queues", cfg, timeout)
	s.PuppetDB = NewPuppetDB(stack, "PuppetDB", cfg)
	if cfg.CompileFunction {
		s.Compile = NewCompile(stack, "Compile", cfg, CompileProps{RepoRoot: p.RepoRoot, Storage: s.Storage, Queues: s.Queues, PuppetDB: s.PuppetDB})
		s.Scaling = NewScaling(stack, "Scaling", cfg, ScalingProps{AssetDir: p.ScalerAssetDir, Queues: s.Queues, Compile: s.Compile})
	}
	if cfg.Fleet {
		s.Fleet = NewFleet(stack, "Fleet", cfg, FleetProps{RepoRoot: p.RepoRoot, Storage: s.Storage, Queues: s.Queues, PuppetDB: s.PuppetDB})
	}
	s.Observability = NewObservability(stack, "Observability", cfg, ObservabilityProps{Queues: s.Queues, Compile: s.Compile, Scaling: s.Scaling, Fleet: s.Fleet, PuppetDB: s.PuppetDB})
	s.outputs()
	return s
}

// availabilityZonesContextKey is the context key under which the CDK keeps
// the result of its availability-zones lookup for an account and region
// (ContextProvider.getKey: the provider, then the props sorted by name).
func availabilityZonesContextKey(account, region string) string {
	return "availability-zones:account=" + account + ":region=" + region
}

// outputs are what an operator passes to broker (README's walkthrough).
func (s *FarmStack) outputs() {
	out := func(id, desc string, v *string) {
		awscdk.NewCfnOutput(s.Stack, jsii.String(id), &awscdk.CfnOutputProps{Value: v, Description: jsii.String(desc)})
	}
	st, q := s.Storage, s.Queues
	out("Bucket", "--bucket", st.Bucket.BucketName())
	out("NodesTable", "--nodes-table", st.Table(dynamostate.RoleNodes).TableName())
	out("NodeIndexTable", "--node-index-table", st.Table(dynamostate.RoleNodeIndex).TableName())
	out("EnvironmentsTable", "--environments-table", st.Table(dynamostate.RoleEnvironments).TableName())
	out("CATable", "--ca-table", st.Table(dynamostate.RoleCA).TableName())
	if st.NextCATable != nil {
		out("CANextTable", "broker ca init --ca-table, before the deploy with caGeneration "+itoa(s.Config.CAGeneration+1), st.NextCATable.TableName())
	}
	if st.CAKey != nil {
		out("CAKmsKey", "--ca-key-kms", st.CAKey.KeyArn())
	} else {
		out("CAKeySecret", "--ca-key-secret", st.CAKeySecret.SecretArn())
	}
	out("UrgentQueueUrl", "--urgent-queue-url", q.Urgent.Queue.QueueUrl())
	out("BulkQueueUrl", "--bulk-queue-url", q.Bulk.Queue.QueueUrl())
	if s.PuppetDB != nil {
		out("PuppetDBOutboxQueueUrl", "--puppetdb-outbox-queue", s.PuppetDB.Outbox.QueueUrl())
		out("PuppetDBDeadLetterQueueUrl", "--puppetdb-dead-letter-queue", s.PuppetDB.DLQ.QueueUrl())
	}
	if s.Compile != nil {
		out("CompileFunction", "the compile Lambda", s.Compile.Function.FunctionName())
		out("ScalerFunction", "the scaler Lambda", s.Scaling.Function.FunctionName())
	}
	if s.Fleet != nil {
		out("LoadBalancerDns", "puppet agent --server", s.Fleet.LoadBalancer.LoadBalancerDnsName())
		out("Cluster", "the fleet's ECS cluster", s.Fleet.Cluster.ClusterName())
		if s.Fleet.EndpointService != nil {
			out("EndpointServiceName", "the PrivateLink service consumers' interface endpoints name", s.Fleet.EndpointService.VpcEndpointServiceName())
		}
	}
}

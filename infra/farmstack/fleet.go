package farmstack

import (
	"maps"
	"strconv"
	"strings"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsapplicationautoscaling"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsec2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsecrassets"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsecs"
	"github.com/aws/aws-cdk-go/awscdk/v2/awselasticloadbalancingv2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslogs"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"

	"github.com/compilefarm/compilefarm/pkg/dynamostate"
)

// Ports of a fleet task.
const (
	FrontDoorPort = 8140 // the front door (TLS), on the NLB
	PCPPort       = 8142 // the PCP broker's port (serve's --pcp-listen), on the NLB
	MetricsPort   = 9140 // /metrics: a container port, never on the NLB
)

// Load balancer timings.
const (
	// TCPIdleTimeoutSeconds is the NLB's idle timeout for a TCP flow
	// (default 350 s). PCP clients (pxp-agent) hold one WebSocket open for
	// days and keep it alive with pings a few minutes apart; an agent's
	// catalog request can also sit silent while its first compile runs.
	// 600 s stays well above both, so the NLB never cuts an idle but live
	// connection (it would do so silently, without a RST to either side).
	TCPIdleTimeoutSeconds = 600
	// DeregistrationDelaySeconds: how long a draining task keeps its
	// existing connections before ECS stops it. A catalog request can
	// wait up to first-compile-wait (60 s) for a compile; 75 s lets it
	// finish. broker serve then gets SIGTERM and shuts down within 10 s.
	DeregistrationDelaySeconds = 75
	// CPUTargetPercent is the fleet's target-tracking CPU utilization.
	CPUTargetPercent = 60
)

// GoMemLimitPercent is the share of the task's memory given to broker
// serve as GOMEMLIMIT. Without a limit Go's collector lets the heap grow to
// twice the live data (GOGC 100): the front door's caches plus the PCP
// broker's connections (20,000 pxp-agents on a task) can then pass the
// task's memory, the task is OOM-killed and every agent it held reconnects
// at once. With it the collector works harder as the heap nears the limit.
// 85%, not 100%: the limit covers only the Go runtime's memory, and the
// rest of the container's cgroup counts too (the page cache of the work
// directory and of the logs being written, the kernel's socket buffers
// of 20,000 connections, memory the runtime has freed but not yet returned
// to the kernel).
const GoMemLimitPercent = 85

// GoMemLimit is the fleet container's GOMEMLIMIT: GoMemLimitPercent of the
// task's memory, in MiB (the unit suffix the Go runtime reads).
func GoMemLimit(cfg Config) string { return itoa(cfg.FleetMemoryMiB*GoMemLimitPercent/100) + "MiB" }

// EMFInterval is how often each task writes its front door metrics as an
// embedded-metric-format line (serve's --emf-interval): CloudWatch's
// standard resolution, one data point a minute.
const EMFInterval = "60s"

// Fleet is the front door fleet: a Fargate service running
// `broker serve --backend aws` behind a Network Load Balancer that passes
// TLS through to the tasks (the front door terminates TLS itself: it checks
// agents' client certificates against the farm's CA).
type Fleet struct {
	Construct    constructs.Construct // the construct holding the resources
	Vpc          awsec2.Vpc
	Cluster      awsecs.Cluster
	Service      awsecs.FargateService
	LoadBalancer awselasticloadbalancingv2.NetworkLoadBalancer
	// LoadBalancerSecurityGroup admits allowedSources to the listeners.
	LoadBalancerSecurityGroup awsec2.SecurityGroup
	// EndpointService is the NLB's PrivateLink service; nil without
	// privateLinkPrincipals.
	EndpointService awsec2.VpcEndpointService
	TargetGroups    map[int]awselasticloadbalancingv2.NetworkTargetGroup // by listener port
	Logs            awslogs.LogGroup
}

// FleetProps are what the fleet is wired to.
type FleetProps struct {
	RepoRoot string // the Docker build context of broker/Dockerfile
	Storage  *Storage
	Queues   *Queues
	PuppetDB *PuppetDB // nil without puppetdbUrls
}

// PCPInboxPrefix is the name prefix of the fleet's PCP inbox queues (serve's
// --pcp-inbox-prefix): each task creates its own queue at start
// (sqsqueue.Inbox) and deletes it when it stops, so they are not resources
// of the stack.
func PCPInboxPrefix(cfg Config) string { return cfg.Name("pcp-") }

// PCPInboxActions are the SQS actions of sqsqueue.Inbox (DeleteMessage
// covers DeleteMessageBatch).
var PCPInboxActions = []string{
	"sqs:CreateQueue", "sqs:GetQueueUrl", "sqs:SendMessage",
	"sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:DeleteQueue",
}

// PCPInboxStatement allows PCPInboxActions on the stage's inbox queues
// only: arn:PARTITION:sqs:REGION:ACCOUNT:compilefarm-STAGE-pcp-*.
func PCPInboxStatement(scope constructs.Construct, cfg Config) awsiam.PolicyStatement {
	arn := awscdk.Stack_Of(scope).FormatArn(&awscdk.ArnComponents{
		Service:  jsii.String("sqs"),
		Resource: jsii.String(PCPInboxPrefix(cfg) + "*"),
	})
	return awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
		Sid:       jsii.String("PCPInboxes"),
		Actions:   jsii.Strings(PCPInboxActions...),
		Resources: &[]*string{arn},
	})
}

// NewFleet declares the VPC, the cluster, the service, the NLB and the
// service's autoscaling.
func NewFleet(scope constructs.Construct, id string, cfg Config, p FleetProps) *Fleet {
	f := &Fleet{Construct: constructs.NewConstruct(scope, jsii.String(id)), TargetGroups: map[int]awselasticloadbalancingv2.NetworkTargetGroup{}}
	st, q := p.Storage, p.Queues

	// Two AZs, tasks in private subnets behind one NAT gateway (one per AZ
	// for a protected stage, which then survives the loss of a zone), plus
	// free gateway endpoints so S3 and DynamoDB traffic, most of a task's,
	// does not go through the NAT.
	nats := 1
	if cfg.Protected() {
		nats = 2
	}
	vpcProps := &awsec2.VpcProps{
		VpcName:     jsii.String(cfg.Name("vpc")),
		NatGateways: jsii.Number(nats),
		GatewayEndpoints: &map[string]*awsec2.GatewayVpcEndpointOptions{
			"S3":       {Service: awsec2.GatewayVpcEndpointAwsService_S3()},
			"DynamoDB": {Service: awsec2.GatewayVpcEndpointAwsService_DYNAMODB()},
		},
	}
	if len(cfg.AvailabilityZones) > 0 {
		// Named zones: no Fn::GetAZs (which some emulators lack), and the
		// same zones whatever the account's zone mapping says.
		vpcProps.AvailabilityZones = jsii.Strings(cfg.AvailabilityZones...)
	} else {
		vpcProps.MaxAzs = jsii.Number(2) // the region's first two, by Fn::GetAZs
	}
	f.Vpc = awsec2.NewVpc(f.Construct, jsii.String("Vpc"), vpcProps)
	if p.PuppetDB != nil {
		// The outbox puts every PuppetDB command through SQS twice (sent,
		// received): terabytes a month for a large fleet, which an
		// interface endpoint carries for less than the NAT gateway would
		// ($0.01 against $0.045 a GB; docs/operations.md, PuppetDB).
		f.Vpc.AddInterfaceEndpoint(jsii.String("Sqs"), &awsec2.InterfaceVpcEndpointOptions{
			Service: awsec2.InterfaceVpcEndpointAwsService_SQS(),
			Subnets: &awsec2.SubnetSelection{SubnetType: awsec2.SubnetType_PRIVATE_WITH_EGRESS},
		})
	}
	f.Cluster = awsecs.NewCluster(f.Construct, jsii.String("Cluster"), &awsecs.ClusterProps{
		ClusterName: jsii.String(cfg.Name("fleet")),
		Vpc:         f.Vpc,
	})

	f.newLoadBalancer(cfg)

	f.Logs = awslogs.NewLogGroup(f.Construct, jsii.String("Logs"), &awslogs.LogGroupProps{
		LogGroupName:  jsii.String("/compilefarm/" + cfg.Stage + "/fleet"),
		Retention:     awslogs.RetentionDays_ONE_MONTH,
		RemovalPolicy: awscdk.RemovalPolicy_DESTROY,
	})
	task := awsecs.NewFargateTaskDefinition(f.Construct, jsii.String("Task"), &awsecs.FargateTaskDefinitionProps{
		Family:         jsii.String(cfg.Name("front-door")),
		Cpu:            jsii.Number(cfg.FleetCPU),
		MemoryLimitMiB: jsii.Number(cfg.FleetMemoryMiB),
		RuntimePlatform: &awsecs.RuntimePlatform{
			CpuArchitecture:       awsecs.CpuArchitecture_ARM64(),
			OperatingSystemFamily: awsecs.OperatingSystemFamily_LINUX(),
		},
	})
	// The certificate's names: the NLB's DNS name (what agents use as
	// --server) and the extra names from context (a CNAME in front of it).
	altNames := append([]*string{f.LoadBalancer.LoadBalancerDnsName()}, *jsii.Strings(cfg.DNSAltNames...)...)
	command := []*string{
		jsii.String("serve"), jsii.String("--backend"), jsii.String("aws"),
		jsii.String("--listen"), jsii.String("0.0.0.0:8140"),
		// /metrics only, on the task's address (for a scraper in the VPC;
		// no NLB listener and no security group rule open it). The
		// operator API stays on serve's loopback --admin-listen default:
		// operators use --backend aws or the front door with an operator
		// certificate.
		jsii.String("--metrics-listen"), jsii.String("0.0.0.0:9140"),
		jsii.String("--work"), jsii.String("/tmp/compilefarm-serve"),
		jsii.String("--bucket"), st.Bucket.BucketName(),
		jsii.String("--nodes-table"), st.Table(dynamostate.RoleNodes).TableName(),
		jsii.String("--node-index-table"), st.Table(dynamostate.RoleNodeIndex).TableName(),
		jsii.String("--environments-table"), st.Table(dynamostate.RoleEnvironments).TableName(),
		jsii.String("--urgent-queue-url"), q.Urgent.Queue.QueueUrl(),
		jsii.String("--bulk-queue-url"), q.Bulk.Queue.QueueUrl(),
		jsii.String("--ca-table"), st.Table(dynamostate.RoleCA).TableName(),
		// The PCP broker: its listener, where it records which task holds
		// each client (presence) and the run jobs, and the prefix of the
		// per-task SQS inboxes the tasks pass messages through.
		jsii.String("--pcp-listen"), jsii.String("0.0.0.0:" + itoa(PCPPort)),
		jsii.String("--presence-table"), st.Table(dynamostate.RolePresence).TableName(),
		jsii.String("--jobs-table"), st.Table(dynamostate.RoleJobs).TableName(),
		jsii.String("--pcp-inbox-prefix"), jsii.String(PCPInboxPrefix(cfg)),
		jsii.String("--dns-alt-names"), awscdk.Fn_Join(jsii.String(","), &altNames),
		// The front door's requests, 4xx/5xx, refusals, catalog outcomes
		// and latency: one embedded-metric-format line a minute on stderr,
		// which the awslogs driver ships and CloudWatch Logs turns into
		// metrics (namespace compilefarm, dimension Stage; Observability).
		jsii.String("--emf-interval"), jsii.String(EMFInterval),
		jsii.String("--emf-stage"), jsii.String(cfg.Stage),
	}
	env := &map[string]*string{"GOMEMLIMIT": jsii.String(GoMemLimit(cfg))}
	command = append(command, caKeyArgs(st)...)
	// On AWS the SDK finds every endpoint itself; an emulator (LocalStack:
	// awsEndpointURL) is one endpoint for all services.
	if cfg.AWSEndpointURL != "" {
		(*env)["AWS_ENDPOINT_URL"] = jsii.String(cfg.AWSEndpointURL)
	}
	// The PuppetDB sink and its drainer, the query refresh and
	// storeconfigs (puppetdb.go); the client identity and CA come in as
	// variables, from Secrets Manager when they are secrets.
	var secrets *map[string]awsecs.Secret
	if pdb := p.PuppetDB; pdb != nil {
		command = append(command, pdb.ServeArgs()...)
		// The queries compiles made of PuppetDB, which the tasks run again.
		command = append(command, jsii.String("--queries-table"), st.Table(dynamostate.RoleQueries).TableName())
		maps.Copy(*env, pdb.ServeEnvironment())
		if s := pdb.ServeSecrets(); len(s) > 0 {
			secrets = &s
		}
	}
	task.AddContainer(jsii.String("broker"), &awsecs.ContainerDefinitionOptions{
		ContainerName: jsii.String("broker"),
		Environment:   env,
		Secrets:       secrets,
		Image: awsecs.ContainerImage_FromAsset(jsii.String(p.RepoRoot), &awsecs.AssetImageProps{
			File:    jsii.String("broker/Dockerfile"),
			Exclude: jsii.Strings(AssetExcludes...),
			// ContainerImage_FromAsset does not follow RuntimePlatform.
			Platform: awsecrassets.Platform_LINUX_ARM64(),
		}),
		Command: &command,
		PortMappings: &[]*awsecs.PortMapping{
			{ContainerPort: jsii.Number(FrontDoorPort), Protocol: awsecs.Protocol_TCP, Name: jsii.String("front-door")},
			{ContainerPort: jsii.Number(PCPPort), Protocol: awsecs.Protocol_TCP, Name: jsii.String("pcp")},
			{ContainerPort: jsii.Number(MetricsPort), Protocol: awsecs.Protocol_TCP, Name: jsii.String("metrics")},
		},
		Logging: awsecs.LogDriver_AwsLogs(&awsecs.AwsLogDriverProps{
			StreamPrefix: jsii.String("broker"),
			LogGroup:     f.Logs,
		}),
		// More than the 10 s serve takes to shut down after SIGTERM.
		StopTimeout: awscdk.Duration_Seconds(jsii.Number(30)),
	})

	// What broker serve calls, on what it calls it (access.go: s3store,
	// dynamostate's tables, sqsqueue's compile queues, PCP inboxes and
	// PuppetDB outbox), and the CA key (kmskey's calls, or cakey's
	// GetSecretValue).
	role := task.TaskRole()
	grantFleet(role, cfg, st, q, p.PuppetDB)
	grantCAKey(role, st)

	f.Service = awsecs.NewFargateService(f.Construct, jsii.String("Service"), &awsecs.FargateServiceProps{
		ServiceName:    jsii.String(cfg.Name("front-door")),
		Cluster:        f.Cluster,
		TaskDefinition: task,
		// No DesiredCount: Application Auto Scaling owns the count (below).
		// One in the template would reset a scaled-out fleet to it on every
		// deploy, mid-herd. Without it (and with the feature flag
		// @aws-cdk/aws-ecs:removeDefaultDesiredCount, on in aws-cdk-lib v2)
		// the template has none: CloudFormation starts a new service with
		// one task, registering the scalable target raises it to
		// fleetMinCount, and updates leave the count alone.
		MinHealthyPercent: jsii.Number(100),
		MaxHealthyPercent: jsii.Number(200),
		CircuitBreaker:    &awsecs.DeploymentCircuitBreaker{Rollback: jsii.Bool(true)},
		VpcSubnets:        &awsec2.SubnetSelection{SubnetType: awsec2.SubnetType_PRIVATE_WITH_EGRESS},
		AssignPublicIp:    jsii.Bool(false),
		// The first start of a task signs its server certificate and
		// loads the CA; give it time before the NLB's checks count.
		HealthCheckGracePeriod: awscdk.Duration_Seconds(jsii.Number(60)),
	})
	// The tasks admit the listeners' ports from the NLB's security group
	// only (and the health checks, which come from the NLB's addresses).
	// That holds with client IPs preserved (below): a rule naming the
	// NLB's security group admits what the NLB forwards whatever source
	// address the packet carries (AWS, "Security groups for your Network
	// Load Balancer"), so the tasks need no rule for allowedSources. One
	// would only add a path around the NLB for networks that route into
	// the VPC (a VPN, Direct Connect, a peering), past its checks.
	for _, port := range []int{FrontDoorPort, PCPPort} {
		f.Service.Connections().AllowFrom(f.LoadBalancer.Connections(), awsec2.Port_Tcp(jsii.Number(port)),
			jsii.String("from the NLB only"))
	}

	for _, port := range []int{FrontDoorPort, PCPPort} {
		ln := f.LoadBalancer.AddListener(jsii.String("Listener"+itoa(port)), &awselasticloadbalancingv2.BaseNetworkListenerProps{
			Port:           jsii.Number(port),
			Protocol:       awselasticloadbalancingv2.Protocol_TCP, // TLS passes through to the task
			TcpIdleTimeout: awscdk.Duration_Seconds(jsii.Number(TCPIdleTimeoutSeconds)),
		})
		tg := ln.AddTargets(jsii.String("Targets"+itoa(port)), &awselasticloadbalancingv2.AddNetworkTargetsProps{
			Port:     jsii.Number(port),
			Protocol: awselasticloadbalancingv2.Protocol_TCP,
			// Client IP preservation (off by default for ip targets): the
			// tasks see the agent's address, not the NLB's. The front door
			// logs it with every certificate request it accepts or refuses
			// (the CA's record of who asked for a name), every refusal at
			// capacity and every forbidden request; the PCP broker with
			// every connection and refusal. Without it those lines all name
			// the NLB's private addresses, and a limit per client could not
			// tell clients apart. (PrivateLink traffic always arrives from
			// the NLB's address.)
			PreserveClientIp: jsii.Bool(true),
			Targets: &[]awselasticloadbalancingv2.INetworkLoadBalancerTarget{
				f.Service.LoadBalancerTarget(&awsecs.LoadBalancerTargetOptions{
					ContainerName: jsii.String("broker"), ContainerPort: jsii.Number(port), Protocol: awsecs.Protocol_TCP,
				}),
			},
			// Both target groups check the front door: the task is healthy
			// when it serves /status/v1/simple over TLS (the health check
			// needs no client certificate: the front door only requests one).
			HealthCheck: &awselasticloadbalancingv2.HealthCheck{
				Protocol:                awselasticloadbalancingv2.Protocol_HTTPS,
				Port:                    jsii.String(itoa(FrontDoorPort)),
				Path:                    jsii.String("/status/v1/simple"),
				Interval:                awscdk.Duration_Seconds(jsii.Number(10)),
				HealthyThresholdCount:   jsii.Number(2),
				UnhealthyThresholdCount: jsii.Number(2),
			},
			DeregistrationDelay: awscdk.Duration_Seconds(jsii.Number(DeregistrationDelaySeconds)),
		})
		f.TargetGroups[port] = tg
	}

	// CPU target tracking: the front door's work (TLS, catalog and report
	// handling) is CPU bound; memory follows the per-task cache size.
	scaling := f.Service.AutoScaleTaskCount(&awsapplicationautoscaling.EnableScalingProps{
		MinCapacity: jsii.Number(cfg.FleetMinCount),
		MaxCapacity: jsii.Number(cfg.FleetMaxCount),
	})
	scaling.ScaleOnCpuUtilization(jsii.String("Cpu"), &awsecs.CpuUtilizationScalingProps{
		TargetUtilizationPercent: jsii.Number(CPUTargetPercent),
		ScaleOutCooldown:         awscdk.Duration_Seconds(jsii.Number(60)),
		ScaleInCooldown:          awscdk.Duration_Seconds(jsii.Number(300)),
	})
	return f
}

// caKeyArgs are serve's CA key flags: --ca-key-kms with the KMS key's ARN
// (the stack's key or caKmsKey; its ARN, not the alias: re-pointing the
// alias cannot change which key the fleet signs with), or --ca-key-secret
// with caKeySecret's ARN.
func caKeyArgs(st *Storage) []*string {
	if st.CAKey != nil {
		return []*string{jsii.String("--ca-key-kms"), st.CAKey.KeyArn()}
	}
	return []*string{jsii.String("--ca-key-secret"), st.CAKeySecret.SecretArn()}
}

// CAKeyActions are what a CA signing with a KMS key calls: Sign for
// certificates and CRLs, GetPublicKey and DescribeKey when it opens the
// key. Nothing that reads, exports or changes a key.
var CAKeyActions = []string{"kms:Sign", "kms:GetPublicKey", "kms:DescribeKey"}

// grantCAKey lets role use the CA's key: CAKeyActions on the KMS key only,
// or GetSecretValue on caKeySecret's secret (its KMS key, if the site
// encrypted it with its own, needs kms:Decrypt from the site: the stack
// cannot know it). The KMS key's statement is the role's, the same for the
// stack's key and caKmsKey's: both key policies leave the key's use to
// the account's IAM policies (the stack's is KMS's default; caKmsKey's
// must be, docs/operations.md), and the stack cannot change a key policy
// it does not own.
func grantCAKey(role awsiam.IRole, st *Storage) {
	if st.CAKey != nil {
		role.AddToPrincipalPolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
			Sid:       jsii.String("CAKey"),
			Actions:   jsii.Strings(CAKeyActions...),
			Resources: &[]*string{st.CAKey.KeyArn()},
		}))
		return
	}
	role.AddToPrincipalPolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
		Sid:       jsii.String("CAKeySecret"),
		Actions:   jsii.Strings("secretsmanager:GetSecretValue"),
		Resources: jsii.Strings(*st.CAKeySecret.SecretArn()),
	}))
}

// newLoadBalancer declares the NLB and its security group: 8140 and 8142
// from allowedSources only, out to the tasks only; internet-facing unless
// internal; a PrivateLink endpoint service with privateLinkPrincipals.
func (f *Fleet) newLoadBalancer(cfg Config) {
	// AllowAllOutbound false: the NLB's only outbound rules are to the
	// tasks' security group (the service's AllowFrom, in NewFleet), which
	// also carry the health checks (subject to outbound rules, not
	// inbound ones).
	f.LoadBalancerSecurityGroup = awsec2.NewSecurityGroup(f.Construct, jsii.String("NlbSecurityGroup"), &awsec2.SecurityGroupProps{
		Vpc:              f.Vpc,
		Description:      jsii.String("compilefarm " + cfg.Stage + ": the front door's NLB, 8140 and 8142 from allowedSources"),
		AllowAllOutbound: jsii.Bool(false),
	})
	for _, peer := range allowedPeers(f.Construct, cfg) {
		for _, port := range []int{FrontDoorPort, PCPPort} {
			f.LoadBalancerSecurityGroup.AddIngressRule(peer, awsec2.Port_Tcp(jsii.Number(port)), jsii.String("allowedSources"), nil)
		}
	}
	props := &awselasticloadbalancingv2.NetworkLoadBalancerProps{
		// No LoadBalancerName or TargetGroupName: those are limited to 32
		// characters, too few for compilefarm-<stage>-...; CloudFormation
		// names them after the stack (which carries the stage).
		Vpc: f.Vpc,
		// internal: private addresses only, in the private subnets, for
		// agents that reach the VPC by VPN, Direct Connect, a peering or
		// PrivateLink. Changing it replaces the NLB (a new DNS name).
		InternetFacing:   jsii.Bool(!cfg.Internal),
		CrossZoneEnabled: jsii.Bool(true),
		// protect: agents know the farm by the NLB's DNS name (or a CNAME
		// to it); a new NLB is a new name.
		DeletionProtection: jsii.Bool(cfg.Protect),
		// AWS attaches security groups to an NLB only when it is created:
		// an NLB made without one never gets one (so this construct's ID
		// is new: a stack from before had an NLB without, which
		// CloudFormation now replaces).
		SecurityGroups: &[]awsec2.ISecurityGroup{f.LoadBalancerSecurityGroup},
	}
	if len(cfg.PrivateLinkPrincipals) > 0 {
		// PrivateLink traffic comes from the consumers' endpoints, in
		// their VPCs; who may connect is decided by the endpoint service
		// (the principals that may create an endpoint, each connection
		// accepted by hand), and each consumer's endpoint security group
		// narrows it on their side. Inbound rules for their addresses
		// would have to be guessed here.
		props.EnforceSecurityGroupInboundRulesOnPrivateLinkTraffic = jsii.Bool(false)
	}
	f.LoadBalancer = awselasticloadbalancingv2.NewNetworkLoadBalancer(f.Construct, jsii.String("FrontDoorNlb"), props)
	if len(cfg.PrivateLinkPrincipals) > 0 {
		principals := make([]awsiam.ArnPrincipal, len(cfg.PrivateLinkPrincipals))
		for i, p := range cfg.PrivateLinkPrincipals {
			principals[i] = awsiam.NewArnPrincipal(jsii.String(p))
		}
		f.EndpointService = awsec2.NewVpcEndpointService(f.Construct, jsii.String("EndpointService"), &awsec2.VpcEndpointServiceProps{
			VpcEndpointServiceLoadBalancers: &[]awsec2.IVpcEndpointServiceLoadBalancer{f.LoadBalancer},
			AcceptanceRequired:              jsii.Bool(true),
			AllowedPrincipals:               &principals,
		})
	}
}

// allowedPeers are the NLB's sources: allowedSources, or 0.0.0.0/0 with a
// synth warning (only a disposable stage may leave them out: Validate).
func allowedPeers(scope constructs.Construct, cfg Config) []awsec2.IPeer {
	if len(cfg.AllowedSources) == 0 {
		awscdk.Annotations_Of(scope).AddWarningV2(jsii.String("compilefarm:openFrontDoor"), jsii.String(
			"the NLB admits 8140 and 8142 from 0.0.0.0/0: the CA's certificate requests (unauthenticated) and PCP are open to the internet; "+
				"set allowedSources (CIDRs, prefix lists) in the stage's block of infra/cdk.json"))
		return []awsec2.IPeer{awsec2.Peer_AnyIpv4()}
	}
	peers := make([]awsec2.IPeer, len(cfg.AllowedSources))
	for i, src := range cfg.AllowedSources {
		if strings.HasPrefix(src, "pl-") {
			peers[i] = awsec2.Peer_PrefixList(jsii.String(src))
		} else {
			peers[i] = awsec2.Peer_Ipv4(jsii.String(src))
		}
	}
	return peers
}

func itoa(n int) string { return strconv.Itoa(n) }

package farmstack

import (
	"strings"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"
	"github.com/cdklabs/cdk-nag-go/cdknag/v2"

	"github.com/compilefarm/compilefarm/pkg/farm"
)

// cdk-nag (issue 23, item 6): the AWS Solutions rule pack runs on the
// synthesized stack in the infra tests (nag_test.go), which fail on any
// finding not suppressed here. Every suppression names the construct it
// applies to by its path under the stack, the rule, for the granular rules
// (IAM4, IAM5) the exact findings, and why: a finding that is cheap and
// right to fix is fixed in the stack instead (the queues' TLS-only
// policies and DLQs, the bucket's TLS and public access block, the tables'
// point-in-time recovery already pass).
//
// Paths follow the constructs as the stack builds them; a change that
// moves or renames one makes its finding reappear (TestNag) or leaves a
// suppression unused (TestNagSuppressionsUsed), and the entry here is
// adjusted with it.

// NagSuppression accepts one cdk-nag finding of the stack.
type NagSuppression struct {
	Path string // the construct, under the stack: "Fleet/FrontDoorNlb/Resource"
	Rule string // "AwsSolutions-ELB2"; "CdkNagValidationFailure" for a rule that cannot read a value
	// AppliesTo are the findings of a granular rule it covers (IAM5's
	// "Resource::..."; CdkNagValidationFailure's rule ID); none: every
	// finding of the rule on the construct.
	AppliesTo []string
	Reason    string
}

// NagSuppressions are the stack's suppressions. Some name what depends
// on the stage (the PCP inbox prefix) or on access.go (the bucket prefixes
// each role reads or writes).
func NagSuppressions(s *FarmStack) []NagSuppression {
	cfg := s.Config
	bucket := "<" + *s.Stack.GetLogicalId(s.Storage.Bucket.Node().DefaultChild().(awscdk.CfnElement)) + ".Arn>"
	objects := func(a RoleAccess) []string {
		seen := map[farm.Space]bool{}
		var out []string
		for _, sp := range append(append([]farm.Space{}, a.Content.Read...), a.Content.Write...) {
			if !seen[sp] {
				seen[sp] = true
				out = append(out, "Resource::"+bucket+"/"+string(sp)+"/*")
			}
		}
		return out
	}
	const (
		objectsReason = "IAM5: the wildcard is the object keys under one farm space's prefix (access.go): blobs are named by " +
			"their SHA-256 and names by what agents send, so no finer resource exists; the actions are only GetObject/PutObject"
		lambdaLogs = "IAM4: AWSLambdaBasicExecutionRole is what the Lambda L2 attaches for the function's own log writing " +
			"(logs:CreateLogStream/PutLogEvents); it grants nothing on the farm's data"
		ec23 = "EC23 cannot read the ingress source, an intrinsic (the VPC's CIDR block, Fn::GetAtt): no rule admits 0.0.0.0/0"
	)
	// A stage with an environment (account, region) names them in ARNs.
	inboxes := "arn:<AWS::Partition>:sqs:<AWS::Region>:<AWS::AccountId>:"
	if cfg.Account != "" {
		inboxes = "arn:aws:sqs:" + cfg.Region + ":" + cfg.Account + ":"
	}
	out := []NagSuppression{
		// The compile function.
		{"Compile/Function/ServiceRole/DefaultPolicy/Resource", "AwsSolutions-IAM5", objects(CompileAccess(true)), objectsReason},
		{"Compile/Function/ServiceRole/Resource", "AwsSolutions-IAM4",
			[]string{"Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole"}, lambdaLogs},
		{"Compile/Function/ServiceRole/Resource", "AwsSolutions-IAM4",
			[]string{"Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSLambdaVPCAccessExecutionRole"},
			"IAM4: with puppetdbSubnetIds the function runs in the operator's subnets and needs the EC2 network interface " +
				"actions this AWS policy holds (what the L2 function adds itself for a VPC); they take no resource before the interface exists"},
		// The scaler.
		{"Scaling/Function/ServiceRole/Resource", "AwsSolutions-IAM4",
			[]string{"Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole"}, lambdaLogs},
		{"Scaling/Function/ServiceRole/DefaultPolicy/Resource", "AwsSolutions-IAM5", []string{"Resource::*"},
			"IAM5: cloudwatch:GetMetricData (the queues' age and in-flight counts) supports no resource-level permission; " +
				"it only reads metrics (TestWildcardResources pins that it is the only action on *)"},
		// The fleet.
		{"Fleet/Task/TaskRole/DefaultPolicy/Resource", "AwsSolutions-IAM5", objects(FleetAccess(true)), objectsReason},
		{"Fleet/Task/TaskRole/DefaultPolicy/Resource", "AwsSolutions-IAM5", []string{"Resource::" + inboxes + PCPInboxPrefix(cfg) + "*"},
			"IAM5: the wildcard is the name prefix of the PCP inbox queues each task creates at start and deletes when it " +
				"stops (sqsqueue.Inbox): they are not the stack's, so their names are not known at synth"},
		{"Fleet/Task/ExecutionRole/DefaultPolicy/Resource", "AwsSolutions-IAM5", []string{"Resource::*"},
			"IAM5: ecr:GetAuthorizationToken, which ECS calls to pull the image asset, supports no resource-level " +
				"permission (TestWildcardResources pins that it is the only action on *)"},
		{"Fleet/Task/Resource", "AwsSolutions-ECS2", nil,
			"ECS2: the container's plain variables hold no secret (GOMEMLIMIT, an emulator's endpoint, PuppetDB's CA certificate); " +
				"PuppetDB's client key and CA secret come from Secrets Manager (ServeSecrets)"},
		{"Fleet/FrontDoorNlb/Resource", "AwsSolutions-ELB2", nil,
			"ELB2: an NLB writes access logs only for TLS listeners; its listeners are TCP (TLS passes through to the tasks, " +
				"which check client certificates), so there would be nothing to write"},
		{"Fleet/Cluster/Resource", "AwsSolutions-ECS4", nil,
			"ECS4: the tasks write the front door's metrics themselves (embedded metric format) and the dashboard shows the " +
				"service's CPU and memory from ECS's standard metrics; Container Insights would add per-task metrics at a " +
				"charge per metric, which a site turns on where it wants them"},
		{"Fleet/Vpc/Resource", "AwsSolutions-VPC7", nil,
			"VPC7: the VPC carries only the stack's tasks and endpoints; the front door logs every connection's certname and " +
				"refusal itself, and flow logs (charged per GB ingested) are the site's to add to the VPC where an audit needs them"},
		{"Fleet/Vpc/Sqs/SecurityGroup/Resource", "CdkNagValidationFailure", []string{"AwsSolutions-EC23"}, ec23},
		// Storage.
		{"Storage/Content/Resource", "AwsSolutions-S1", nil,
			"S1: server access logs need a second bucket (itself unlogged); every request to this one is the stack's two " +
				"roles', which each task counts per operation (awscalls, on /metrics), and CloudTrail data events record " +
				"them where an audit needs it"},
		// The compile image's canary (compileDeployment=canary).
		{"Compile/Deployment/ServiceRole/Resource", "AwsSolutions-IAM4",
			[]string{"Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSCodeDeployRoleForLambdaLimited"},
			"IAM4: CodeDeploy's own role for Lambda deployments (what the L2 deployment group attaches): it shifts the " +
				"alias's weights and reads the rollback alarms, on functions and aliases CodeDeploy is told of; its " +
				"actions are CodeDeploy's to keep current as its service changes"},
	}
	if len(cfg.AllowedSources) == 0 {
		out = append(out, NagSuppression{"Fleet/NlbSecurityGroup/Resource", "AwsSolutions-EC23", nil,
			"EC23: only on a disposable stage without allowedSources (synth warns): a protected stage does not synth " +
				"without the sources its agents come from, and then admits only those (docs/operations.md, Network)"})
	}
	return out
}

// ApplyNag adds the AWS Solutions checks to the stack, as an aspect that
// runs when the stack is synthesized, and NagSuppressions on the
// constructs the stack has (a context leaves some out: fleet=false has no
// Fleet/...). logIgnores also annotates each suppressed finding as info,
// which TestNagSuppressionsUsed reads.
func ApplyNag(s *FarmStack, logIgnores bool) {
	for _, n := range NagSuppressions(s) {
		c := findConstruct(s.Stack, n.Path)
		if c == nil {
			continue
		}
		sup := &cdknag.NagPackSuppression{Id: jsii.String(n.Rule), Reason: jsii.String(n.Reason)}
		if len(n.AppliesTo) > 0 {
			applies := make([]interface{}, len(n.AppliesTo))
			for i, a := range n.AppliesTo {
				applies[i] = a
			}
			sup.AppliesTo = &applies
		}
		cdknag.NagSuppressions_AddResourceSuppressions(c, &[]*cdknag.NagPackSuppression{sup}, jsii.Bool(false))
	}
	awscdk.Aspects_Of(s.Stack).Add(cdknag.NewAwsSolutionsChecks(&cdknag.NagPackProps{
		Reports: jsii.Bool(false), LogIgnores: jsii.Bool(logIgnores),
	}), nil)
}

// findConstruct returns the construct at path under root, or nil.
func findConstruct(root constructs.IConstruct, path string) constructs.IConstruct {
	c := root
	for _, id := range strings.Split(path, "/") {
		if c = c.Node().TryFindChild(jsii.String(id)); c == nil {
			return nil
		}
	}
	return c
}

// Package cfnsupport says which parts of a synthesized CloudFormation
// template LocalStack can deploy, by tier, as LocalStack documents it. It
// is shared by `localstack/run.sh deploy` (through localstack/lsfarm),
// which refuses to deploy a template the chosen LocalStack cannot run, and
// by the CDK app's tests, which keep the stack within these lists.
//
// Sources (read 2026-11-26):
//   - CloudFormation resource types, "Community image" and "Pro image"
//     tables: https://docs.localstack.cloud/aws/services/cloudformation/
//     (unsupported types are ignored today; a future release fails the
//     deployment unless CFN_IGNORE_UNSUPPORTED_RESOURCE_TYPES=1; the same
//     page lists Fn::GetAZs as not supported).
//   - Services per tier (Free: S3, DynamoDB, SQS, Lambda, EventBridge,
//     Scheduler, CloudWatch, IAM, Secrets Manager, KMS, SSM, EC2; Base and
//     up: ECR, ECS, ELB/ELBv2, Application Auto Scaling):
//     https://docs.localstack.cloud/aws/licensing/
//   - Lambda container images are pulled from ECR (a Base-tier service);
//     LocalStack's tutorial lists LocalStack Pro as a prerequisite:
//     https://docs.localstack.cloud/aws/tutorials/lambda-ecr-container-images/
package cfnsupport

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
)

// Tier is what a LocalStack instance can deploy.
type Tier int

const (
	// Free is LocalStack's free tier (the former Community image).
	Free Tier = iota
	// Pro is a licensed LocalStack (Base tier or above; the Pro image).
	Pro
)

func (t Tier) String() string {
	if t == Pro {
		return "LocalStack Pro (Base tier or above)"
	}
	return "LocalStack Free (Community)"
}

// ParseTier reads "free", "community", "pro" or "base".
func ParseTier(s string) (Tier, error) {
	switch strings.ToLower(s) {
	case "free", "community":
		return Free, nil
	case "pro", "base", "ultimate":
		return Pro, nil
	}
	return Free, fmt.Errorf("unknown LocalStack tier %q (want free or pro)", s)
}

// Community lists the resource types of the documentation's "Community
// image" table (create and delete supported).
var Community = set(
	"AWS::Amplify::Branch",
	"AWS::ApiGateway::Account", "AWS::ApiGateway::ApiKey", "AWS::ApiGateway::BasePathMapping",
	"AWS::ApiGateway::Deployment", "AWS::ApiGateway::DomainName", "AWS::ApiGateway::GatewayResponse",
	"AWS::ApiGateway::Method", "AWS::ApiGateway::Model", "AWS::ApiGateway::RequestValidator",
	"AWS::ApiGateway::Resource", "AWS::ApiGateway::RestApi", "AWS::ApiGateway::Stage",
	"AWS::ApiGateway::UsagePlan", "AWS::ApiGateway::UsagePlanKey",
	"AWS::AutoScaling::AutoScalingGroup", "AWS::AutoScaling::LaunchConfiguration",
	"AWS::CDK::Metadata",
	"AWS::CertificateManager::Certificate",
	"AWS::CloudFormation::Macro", "AWS::CloudFormation::Stack",
	"AWS::CloudFormation::WaitCondition", "AWS::CloudFormation::WaitConditionHandle",
	"AWS::CloudWatch::Alarm", "AWS::CloudWatch::CompositeAlarm",
	"AWS::DynamoDB::GlobalTable", "AWS::DynamoDB::Table",
	"AWS::EC2::DHCPOptions", "AWS::EC2::Instance", "AWS::EC2::InternetGateway", "AWS::EC2::KeyPair",
	"AWS::EC2::NatGateway", "AWS::EC2::NetworkAcl", "AWS::EC2::Route", "AWS::EC2::RouteTable",
	"AWS::EC2::SecurityGroup", "AWS::EC2::Subnet", "AWS::EC2::SubnetRouteTableAssociation",
	"AWS::EC2::TransitGateway", "AWS::EC2::TransitGatewayAttachment", "AWS::EC2::VPC",
	"AWS::EC2::VPCGatewayAttachment",
	"AWS::ECR::Repository",
	"AWS::Elasticsearch::Domain",
	"AWS::Events::ApiDestination", "AWS::Events::Connection", "AWS::Events::EventBus",
	"AWS::Events::EventBusPolicy", "AWS::Events::Rule",
	"AWS::IAM::AccessKey", "AWS::IAM::Group", "AWS::IAM::InstanceProfile", "AWS::IAM::ManagedPolicy",
	"AWS::IAM::Policy", "AWS::IAM::Role", "AWS::IAM::ServiceLinkedRole", "AWS::IAM::User",
	"AWS::KMS::Alias", "AWS::KMS::Key",
	"AWS::Kinesis::Stream", "AWS::Kinesis::StreamConsumer", "AWS::KinesisFirehose::DeliveryStream",
	"AWS::Lambda::Alias", "AWS::Lambda::CodeSigningConfig", "AWS::Lambda::EventInvokeConfig",
	"AWS::Lambda::EventSourceMapping", "AWS::Lambda::Function", "AWS::Lambda::LayerVersion",
	"AWS::Lambda::LayerVersionPermission", "AWS::Lambda::Permission", "AWS::Lambda::Url",
	"AWS::Lambda::Version",
	"AWS::Logs::LogGroup", "AWS::Logs::LogStream", "AWS::Logs::SubscriptionFilter",
	"AWS::OpenSearchService::Domain",
	"AWS::Redshift::Cluster",
	"AWS::ResourceGroups::Group",
	"AWS::Route53::HealthCheck", "AWS::Route53::RecordSet",
	"AWS::S3::Bucket", "AWS::S3::BucketPolicy",
	"AWS::SNS::Subscription", "AWS::SNS::Topic", "AWS::SNS::TopicPolicy",
	"AWS::SQS::Queue", "AWS::SQS::QueuePolicy",
	"AWS::SSM::MaintenanceWindow", "AWS::SSM::MaintenanceWindowTarget", "AWS::SSM::MaintenanceWindowTask",
	"AWS::SSM::Parameter", "AWS::SSM::PatchBaseline",
	"AWS::Scheduler::Schedule", "AWS::Scheduler::ScheduleGroup",
	"AWS::SecretsManager::ResourcePolicy", "AWS::SecretsManager::RotationSchedule",
	"AWS::SecretsManager::Secret", "AWS::SecretsManager::SecretTargetAttachment",
	"AWS::ServiceDiscovery::HttpNamespace", "AWS::ServiceDiscovery::PrivateDnsNamespace",
	"AWS::ServiceDiscovery::PublicDnsNamespace", "AWS::ServiceDiscovery::Service",
	"AWS::StepFunctions::Activity", "AWS::StepFunctions::StateMachine",
	"AWS::Timestream::Database", "AWS::Timestream::Table",
)

// ProOnly lists the types of the documentation's "Pro image" table that a
// compile farm's stack may use (the fleet: VPC extras, ECS, the load
// balancer, auto scaling; CDK's custom resources). The table has more
// (Cognito, RDS, Glue, ...); add them here when the stack needs one.
var ProOnly = set(
	"AWS::ApplicationAutoScaling::ScalableTarget", "AWS::ApplicationAutoScaling::ScalingPolicy",
	"AWS::CloudFormation::CustomResource",
	"AWS::EC2::EIP", "AWS::EC2::LaunchTemplate", "AWS::EC2::PrefixList",
	"AWS::EC2::SecurityGroupEgress", "AWS::EC2::SecurityGroupIngress",
	"AWS::EC2::VPCEndpoint", "AWS::EC2::VpcEndpoint", "AWS::EC2::VPCEndpointService", "AWS::EC2::VPCCidrBlock",
	"AWS::ECS::CapacityProvider", "AWS::ECS::Cluster", "AWS::ECS::ClusterCapacityProviderAssociations",
	"AWS::ECS::Service", "AWS::ECS::TaskDefinition",
	"AWS::EFS::AccessPoint", "AWS::EFS::FileSystem", "AWS::EFS::MountTarget",
	"AWS::ElasticLoadBalancingV2::Listener", "AWS::ElasticLoadBalancingV2::ListenerRule",
	"AWS::ElasticLoadBalancingV2::LoadBalancer", "AWS::ElasticLoadBalancingV2::TargetGroup",
	"AWS::Route53::HostedZone",
)

// Ignored lists types that neither table has but that a deployment may
// carry because nothing refers to their attributes and nothing reads them
// back locally: LocalStack skips them (with
// CFN_IGNORE_UNSUPPORTED_RESOURCE_TYPES=1, which
// localstack/docker-compose.yml sets, so a future LocalStack still does).
// A dashboard only draws; a metric filter only feeds an alarm, which then
// stays INSUFFICIENT_DATA.
var Ignored = set(
	"AWS::CloudWatch::Dashboard",
	"AWS::Logs::MetricFilter",
)

func set(types ...string) map[string]bool {
	m := make(map[string]bool, len(types))
	for _, t := range types {
		m[t] = true
	}
	return m
}

// Supported reports whether LocalStack of tier t deploys resource type typ.
// Custom::* (CDK's Lambda-backed custom resources) count as
// AWS::CloudFormation::CustomResource: Pro only.
func Supported(t Tier, typ string) bool {
	if strings.HasPrefix(typ, "Custom::") {
		typ = "AWS::CloudFormation::CustomResource"
	}
	if Community[typ] {
		return true
	}
	return t == Pro && ProOnly[typ]
}

// Finding is one reason a template does not fit a tier.
type Finding struct {
	Resource string // logical ID ("" for template-wide findings)
	Type     string
	Problem  string
	// Warning findings do not stop a deployment.
	Warning bool
}

func (f Finding) String() string {
	kind := "error"
	if f.Warning {
		kind = "warning"
	}
	if f.Resource == "" {
		return fmt.Sprintf("%s: %s", kind, f.Problem)
	}
	return fmt.Sprintf("%s: %s (%s): %s", kind, f.Resource, f.Type, f.Problem)
}

// Check reads a synthesized template (JSON) and returns what keeps tier t
// from deploying it, sorted by logical ID.
func Check(t Tier, template []byte) ([]Finding, error) {
	var tpl struct {
		Resources map[string]struct {
			Type       string         `json:"Type"`
			Properties map[string]any `json:"Properties"`
		} `json:"Resources"`
	}
	if err := json.Unmarshal(template, &tpl); err != nil {
		return nil, fmt.Errorf("read template: %w", err)
	}
	var out []Finding
	for id, r := range tpl.Resources {
		switch {
		case Ignored[r.Type]:
			out = append(out, Finding{id, r.Type, "not emulated by LocalStack; skipped (CFN_IGNORE_UNSUPPORTED_RESOURCE_TYPES=1)", true})
			continue
		case !Supported(t, r.Type):
			need := "not in LocalStack's documented CloudFormation resource types"
			if Supported(Pro, r.Type) {
				need = "needs LocalStack Pro (Base tier or above)"
			}
			out = append(out, Finding{Resource: id, Type: r.Type, Problem: need})
			continue
		}
		if r.Type == "AWS::Lambda::Function" && t == Free && isImageFunction(r.Properties) {
			out = append(out, Finding{Resource: id, Type: r.Type,
				Problem: "a container-image function: its image is pushed to and pulled from ECR, which needs LocalStack Pro (Base tier or above)"})
		}
	}
	if strings.Contains(string(template), `"Fn::GetAZs"`) {
		out = append(out, Finding{Problem: "the template uses Fn::GetAZs, which LocalStack's CloudFormation does not support (give the stack explicit availability zones, or an env with a region, for stage=local)"})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Resource < out[j].Resource })
	return out, nil
}

func isImageFunction(props map[string]any) bool {
	if props["PackageType"] == "Image" {
		return true
	}
	code, _ := props["Code"].(map[string]any)
	_, ok := code["ImageUri"]
	return ok
}

// Errors returns the findings that stop a deployment.
func Errors(fs []Finding) []Finding {
	var out []Finding
	for _, f := range fs {
		if !f.Warning {
			out = append(out, f)
		}
	}
	return out
}

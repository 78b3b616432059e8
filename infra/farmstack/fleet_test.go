package farmstack

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/jsii-runtime-go"
)

// TestFleetLoadBalancer: TCP listeners on 8140 and 8142 (TLS passes
// through), target groups checking the front door over HTTPS.
func TestFleetLoadBalancer(t *testing.T) {
	s := dev(t)
	for _, typ := range []string{"AWS::EC2::VPC", "AWS::ECS::Cluster", "AWS::ECS::Service", "AWS::ECS::TaskDefinition", "AWS::ElasticLoadBalancingV2::LoadBalancer"} {
		if n := len(s.resources(typ)); n != 1 {
			t.Errorf("%d %s, want 1", n, typ)
		}
	}
	_, lb := s.find(t, "AWS::ElasticLoadBalancingV2::LoadBalancer", "Type", "network")
	if lb["Scheme"] != "internet-facing" {
		t.Errorf("NLB Scheme = %v", lb["Scheme"])
	}
	listeners := s.resources("AWS::ElasticLoadBalancingV2::Listener")
	ports := map[float64]bool{}
	for id, r := range listeners {
		p := props(r)
		ports[num(p["Port"])] = true
		if p["Protocol"] != "TCP" {
			t.Errorf("listener %s Protocol = %v, want TCP (TLS passes through)", id, p["Protocol"])
		}
		if !containsAll(jsonString(p["ListenerAttributes"]), `"tcp.idle_timeout.seconds"`, `"600"`) || TCPIdleTimeoutSeconds < 360 {
			t.Errorf("listener %s ListenerAttributes = %s", id, jsonString(p["ListenerAttributes"]))
		}
	}
	if len(listeners) != 2 || !ports[8140] || !ports[8142] {
		t.Errorf("listener ports %v, want 8140 and 8142", ports)
	}
	tgs := s.resources("AWS::ElasticLoadBalancingV2::TargetGroup")
	if len(tgs) != 2 {
		t.Errorf("%d target groups, want 2", len(tgs))
	}
	for id, r := range tgs {
		p := props(r)
		if p["HealthCheckProtocol"] != "HTTPS" || p["HealthCheckPath"] != "/status/v1/simple" || p["HealthCheckPort"] != "8140" {
			t.Errorf("target group %s health check %v %v:%v", id, p["HealthCheckProtocol"], p["HealthCheckPort"], p["HealthCheckPath"])
		}
		if p["Protocol"] != "TCP" || p["TargetType"] != "ip" {
			t.Errorf("target group %s Protocol/TargetType = %v/%v", id, p["Protocol"], p["TargetType"])
		}
		if !containsAll(jsonString(p["TargetGroupAttributes"]), `"deregistration_delay.timeout_seconds"`, `"75"`) {
			t.Errorf("target group %s attributes %s", id, jsonString(p["TargetGroupAttributes"]))
		}
	}
	check(t, "CPU target tracking", func() {
		s.tpl.HasResourceProperties(jsii.String("AWS::ApplicationAutoScaling::ScalingPolicy"), map[string]interface{}{
			"PolicyType": "TargetTrackingScaling",
			"TargetTrackingScalingPolicyConfiguration": map[string]interface{}{
				"PredefinedMetricSpecification": map[string]interface{}{"PredefinedMetricType": "ECSServiceAverageCPUUtilization"},
				"TargetValue":                   CPUTargetPercent,
				"ScaleInCooldown":               300, "ScaleOutCooldown": 60,
			},
		})
	})
}

// TestFleetTask: the container runs broker serve with the stack's
// resources, flags serve knows, and the NLB's DNS name among the
// certificate's names; the metrics port is not on the NLB.
func TestFleetTask(t *testing.T) {
	s := synth(t, map[string]string{"dnsAltNames": "puppet.example.com, farm.example.com", "fleetCpu": "2048", "fleetMemoryMiB": "4096", "fleetMinCount": "3"})
	_, task := s.find(t, "AWS::ECS::TaskDefinition", "Cpu", "2048")
	if task["Memory"] != "4096" || !containsAll(jsonString(task["RuntimePlatform"]), `"ARM64"`) {
		t.Errorf("task Memory %v RuntimePlatform %s", task["Memory"], jsonString(task["RuntimePlatform"]))
	}
	// D3: Application Auto Scaling owns the task count. A DesiredCount in
	// the template would reset a scaled-out fleet to it on every deploy;
	// without one, ECS starts a new service with one task and registering
	// the scalable target raises it to MinCapacity.
	_, svc := s.find(t, "AWS::ECS::Service", "LaunchType", "FARGATE")
	if dc, ok := svc["DesiredCount"]; ok {
		t.Errorf("the service sets DesiredCount %v: every deploy would reset the scaled fleet to it", dc)
	}
	_, target := firstID(s.resources("AWS::ApplicationAutoScaling::ScalableTarget"))
	if p := props(target); num(p["MinCapacity"]) != 3 || num(p["MaxCapacity"]) != 10 || p["ScalableDimension"] != "ecs:service:DesiredCount" {
		t.Errorf("scalable target %s, want ecs:service:DesiredCount from 3 to 10", jsonString(p))
	}
	cds := task["ContainerDefinitions"].([]interface{})
	if len(cds) != 1 {
		t.Fatalf("%d containers", len(cds))
	}
	c := cds[0].(map[string]interface{})
	cmd := c["Command"].([]interface{})
	if cmd[0] != "serve" {
		t.Errorf("command %s does not run serve", jsonString(cmd))
	}
	flags := map[string]interface{}{}
	for i := 1; i+1 < len(cmd); i += 2 {
		f, ok := cmd[i].(string)
		if !ok || !strings.HasPrefix(f, "--") {
			t.Fatalf("command %s: argument %d is not a flag", jsonString(cmd), i)
		}
		flags[strings.TrimPrefix(f, "--")] = cmd[i+1]
	}
	// Every flag is one broker serve defines.
	known := map[string]bool{}
	files, _ := filepath.Glob(filepath.Join(repoRoot, "broker", "*.go"))
	re := regexp.MustCompile(`fs\.[A-Za-z0-9]+\((?:&[^,]+, )?"([a-z0-9-]+)"`)
	for _, f := range files {
		b, _ := os.ReadFile(f)
		for _, m := range re.FindAllStringSubmatch(string(b), -1) {
			known[m[1]] = true
		}
	}
	for f := range flags {
		if _, pending := pendingBrokerFlags[f]; !known[f] && !pending {
			t.Errorf("the container passes --%s, which broker does not define", f)
		}
	}
	for f, why := range pendingBrokerFlags {
		if known[f] {
			t.Errorf("broker defines --%s now: remove it from pendingBrokerFlags (%s)", f, why)
		}
	}
	bucketID, _ := firstID(s.resources("AWS::S3::Bucket"))
	keyID, _ := firstID(s.resources("AWS::KMS::Key"))
	for flag, ref := range map[string]string{
		"backend": `"aws"`, "bucket": bucketID, "ca-key-kms": keyID,
		"metrics-listen": "9140", "listen": "8140",
		// The PCP broker on the port the NLB forwards, its inboxes where
		// the task role may create them (TestLeastPrivilege).
		"pcp-listen": `"0.0.0.0:8142"`, "pcp-inbox-prefix": `"compilefarm-dev-pcp-"`,
		// The front door's metrics to CloudWatch (Observability's widgets).
		"emf-interval": `"60s"`, "emf-stage": `"dev"`,
	} {
		if !containsAll(jsonString(flags[flag]), ref) {
			t.Errorf("--%s = %s, want %s", flag, jsonString(flags[flag]), ref)
		}
	}
	for _, role := range []string{"nodes", "node-index", "environments", "ca", "presence", "jobs"} {
		id, _ := s.find(t, "AWS::DynamoDB::Table", "TableName", "compilefarm-dev-"+role)
		fl := map[string]string{"nodes": "nodes-table", "node-index": "node-index-table", "environments": "environments-table", "ca": "ca-table",
			"presence": "presence-table", "jobs": "jobs-table"}[role]
		if !containsAll(jsonString(flags[fl]), id) {
			t.Errorf("--%s = %s, want a reference to %s", fl, jsonString(flags[fl]), id)
		}
	}
	for _, lane := range []string{"urgent", "bulk"} {
		id, _ := s.find(t, "AWS::SQS::Queue", "QueueName", "compilefarm-dev-"+lane)
		if !containsAll(jsonString(flags[lane+"-queue-url"]), id) {
			t.Errorf("--%s-queue-url = %s", lane, jsonString(flags[lane+"-queue-url"]))
		}
	}
	lbID, _ := firstID(s.resources("AWS::ElasticLoadBalancingV2::LoadBalancer"))
	if alt := jsonString(flags["dns-alt-names"]); !containsAll(alt, lbID, "DNSName", "puppet.example.com", "farm.example.com") {
		t.Errorf("--dns-alt-names = %s", alt)
	}
	// Both NLB ports reach the same container port: 8142 the PCP broker.
	lbs := jsonString(svc["LoadBalancers"])
	for _, port := range []string{"8140", "8142"} {
		if !containsAll(lbs, `"ContainerName":"broker","ContainerPort":`+port) {
			t.Errorf("service LoadBalancers %s: no target on container port %s", lbs, port)
		}
	}
	if !containsAll(jsonString(c["PortMappings"]), `"ContainerPort":8142`) {
		t.Errorf("PortMappings %s without 8142", jsonString(c["PortMappings"]))
	}
	// The metrics port is a container port, but no listener or security
	// group rule opens it.
	if !containsAll(jsonString(c["PortMappings"]), `"ContainerPort":9140`) {
		t.Errorf("PortMappings %s without 9140", jsonString(c["PortMappings"]))
	}
	for id, r := range s.resources("AWS::ElasticLoadBalancingV2::Listener") {
		if num(props(r)["Port"]) == MetricsPort {
			t.Errorf("listener %s exposes the metrics port", id)
		}
	}
	for _, typ := range []string{"AWS::EC2::SecurityGroup", "AWS::EC2::SecurityGroupIngress"} {
		for id, r := range s.resources(typ) {
			if strings.Contains(jsonString(props(r)), "9140") {
				t.Errorf("%s %s opens the metrics port: %s", typ, id, jsonString(props(r)))
			}
		}
	}
}

// pendingBrokerFlags are flags the stack passes to broker serve before
// broker defines them, each with who adds it; TestFleetTask fails once
// broker does, so that the entry goes.
var pendingBrokerFlags = map[string]string{}

// TestNoFleet: fleet=false leaves out the VPC, ECS and the NLB.
func TestNoFleet(t *testing.T) {
	s := synth(t, map[string]string{"fleet": "false"})
	for _, typ := range []string{"AWS::EC2::VPC", "AWS::ECS::Cluster", "AWS::ECS::Service", "AWS::ECS::TaskDefinition",
		"AWS::ElasticLoadBalancingV2::LoadBalancer", "AWS::ElasticLoadBalancingV2::Listener", "AWS::ElasticLoadBalancingV2::TargetGroup",
		"AWS::Logs::MetricFilter", "AWS::ApplicationAutoScaling::ScalableTarget"} {
		if n := len(s.resources(typ)); n != 0 {
			t.Errorf("fleet=false: %d %s", n, typ)
		}
	}
	for _, typ := range []string{"AWS::S3::Bucket", "AWS::SQS::Queue", "AWS::DynamoDB::Table", "AWS::Lambda::EventSourceMapping", "AWS::CloudWatch::Dashboard", "AWS::Events::Rule"} {
		if len(s.resources(typ)) == 0 {
			t.Errorf("fleet=false: no %s", typ)
		}
	}
}

func firstID(rs map[string]map[string]interface{}) (string, map[string]interface{}) {
	for id, r := range rs {
		return id, r
	}
	return "", nil
}

// TestAvailabilityZones: named zones replace Fn::GetAZs.
func TestAvailabilityZones(t *testing.T) {
	if s := dev(t); !strings.Contains(jsonString(s.json["Resources"]), "Fn::GetAZs") {
		t.Error("without availabilityZones the VPC does not pick zones with Fn::GetAZs")
	}
	s := synth(t, map[string]string{"availabilityZones": "eu-west-1a,eu-west-1b"})
	if strings.Contains(jsonString(s.json["Resources"]), "Fn::GetAZs") {
		t.Error("with availabilityZones the template still uses Fn::GetAZs")
	}
	zones := map[string]bool{}
	for _, r := range s.resources("AWS::EC2::Subnet") {
		zones[props(r)["AvailabilityZone"].(string)] = true
	}
	if len(zones) != 2 || !zones["eu-west-1a"] || !zones["eu-west-1b"] {
		t.Errorf("subnet zones %v", zones)
	}
}

// TestFleetEndpointURL: the fleet container gets AWS_ENDPOINT_URL only when
// awsEndpointURL is set (an emulator's address, e.g. LocalStack's on its
// Docker network); on AWS the SDK finds the endpoints itself.
func TestFleetEndpointURL(t *testing.T) {
	container := func(s *synthed) map[string]interface{} {
		t.Helper()
		_, task := firstID(s.resources("AWS::ECS::TaskDefinition"))
		cds, _ := props(task)["ContainerDefinitions"].([]interface{})
		if len(cds) != 1 {
			t.Fatalf("%d containers", len(cds))
		}
		return cds[0].(map[string]interface{})
	}
	if env := jsonString(container(dev(t))["Environment"]); strings.Contains(env, "AWS_ENDPOINT_URL") {
		t.Errorf("without awsEndpointURL the container's environment is %s", env)
	}
	const url = "http://compilefarm-localstack:4566"
	env, _ := container(synth(t, map[string]string{"awsEndpointURL": url}))["Environment"].([]interface{})
	found := false
	for _, e := range env {
		e := e.(map[string]interface{})
		if e["Name"] == "AWS_ENDPOINT_URL" {
			found = true
			if e["Value"] != url {
				t.Errorf("AWS_ENDPOINT_URL = %v, want %s", e["Value"], url)
			}
		}
	}
	if !found {
		t.Errorf("awsEndpointURL=%s: the container's environment is %s", url, jsonString(env))
	}
}

// TestFleetMemory (D7): the container's GOMEMLIMIT is 85% of the task's
// memory, so Go's collector works harder as the heap nears the task's
// limit instead of letting the caches and 20,000 PCP connections pass it
// (an OOM kill, then every agent reconnecting at once).
func TestFleetMemory(t *testing.T) {
	for _, c := range []struct {
		ctx  map[string]string
		want string
	}{{nil, "1740MiB"}, {map[string]string{"fleetCpu": "2048", "fleetMemoryMiB": "4096"}, "3481MiB"}} {
		s := synth(t, c.ctx)
		_, task := firstID(s.resources("AWS::ECS::TaskDefinition"))
		cds, _ := props(task)["ContainerDefinitions"].([]interface{})
		if len(cds) != 1 {
			t.Fatalf("%d containers", len(cds))
		}
		var got interface{}
		for _, e := range asList(cds[0].(map[string]interface{})["Environment"]) {
			if e := e.(map[string]interface{}); e["Name"] == "GOMEMLIMIT" {
				got = e["Value"]
			}
		}
		if got != c.want {
			t.Errorf("%v: GOMEMLIMIT = %v, want %s (85%% of the task's %v MiB)", c.ctx, got, c.want, props(task)["Memory"])
		}
	}
}

// TestFleetNetwork (item 3, D1): the NLB has a security group admitting
// 8140 and 8142 from allowedSources only (CIDRs and prefix lists); a
// disposable stage without them admits 0.0.0.0/0 with a synth warning, a
// protected one does not synth (TestNetworkConfig). The tasks admit 8140
// and 8142 from the NLB's security group only, which holds with client
// IPs preserved (the target groups do, for the front door's and the PCP
// broker's logs). internal makes the NLB internal.
func TestFleetNetwork(t *testing.T) {
	s := synth(t, protectedStage("prd"))
	lbID, lb := firstID(s.resources("AWS::ElasticLoadBalancingV2::LoadBalancer"))
	lbp := props(lb)
	if lbp["Scheme"] != "internet-facing" {
		t.Errorf("Scheme %v, want internet-facing by default", lbp["Scheme"])
	}
	lbSG := sgRef(t, lbp["SecurityGroups"], "the NLB")
	want := map[string]bool{}
	for _, src := range []string{"CidrIp=203.0.113.0/24", "SourcePrefixListId=pl-0123456789abcdef0"} {
		for _, port := range []string{"8140", "8142"} {
			want[src+" tcp "+port] = true
		}
	}
	if got := s.sgRules(lbSG, "Ingress"); !reflect.DeepEqual(got, want) {
		t.Errorf("the NLB's security group admits %v, want %v", keysOf(got), keysOf(want))
	}
	// Out of the NLB only to the tasks: the listeners' ports, 8140 also
	// the health checks' (subject to the NLB's outbound rules).
	_, svc := firstID(s.resources("AWS::ECS::Service"))
	svcSG := sgRef(t, digMap(props(svc), "NetworkConfiguration", "AwsvpcConfiguration")["SecurityGroups"], "the service")
	wantOut := map[string]bool{"DestinationSecurityGroupId=" + svcSG + " tcp 8140": true, "DestinationSecurityGroupId=" + svcSG + " tcp 8142": true}
	if got := s.sgRules(lbSG, "Egress"); !reflect.DeepEqual(got, wantOut) {
		t.Errorf("the NLB's security group lets out %v, want %v", keysOf(got), keysOf(wantOut))
	}
	wantIn := map[string]bool{"SourceSecurityGroupId=" + lbSG + " tcp 8140": true, "SourceSecurityGroupId=" + lbSG + " tcp 8142": true}
	if got := s.sgRules(svcSG, "Ingress"); !reflect.DeepEqual(got, wantIn) {
		t.Errorf("the tasks' security group admits %v, want %v (the NLB's security group only)", keysOf(got), keysOf(wantIn))
	}
	for id, r := range s.resources("AWS::ElasticLoadBalancingV2::TargetGroup") {
		if !containsAll(jsonString(props(r)["TargetGroupAttributes"]), `{"Key":"preserve_client_ip.enabled","Value":"true"}`) {
			t.Errorf("target group %s attributes %s: client IPs not preserved", id, jsonString(props(r)["TargetGroupAttributes"]))
		}
	}
	if n := len(s.resources("AWS::EC2::VPCEndpointService")); n != 0 {
		t.Errorf("%d endpoint services without privateLinkPrincipals", n)
	}
	_ = lbID

	// A disposable stage without allowedSources: open, with a warning.
	d := dev(t)
	_, dlb := firstID(d.resources("AWS::ElasticLoadBalancingV2::LoadBalancer"))
	open := map[string]bool{"CidrIp=0.0.0.0/0 tcp 8140": true, "CidrIp=0.0.0.0/0 tcp 8142": true}
	if got := d.sgRules(sgRef(t, props(dlb)["SecurityGroups"], "the NLB"), "Ingress"); !reflect.DeepEqual(got, open) {
		t.Errorf("dev without allowedSources: the NLB admits %v, want %v", keysOf(got), keysOf(open))
	}
	check(t, "the open NLB's synth warning", func() {
		assertions.Annotations_FromStack(d.stack.Stack).HasWarning(jsii.String("*"), assertions.Match_StringLikeRegexp(jsii.String("allowedSources")))
	})

	// internal: for sites that reach AWS by VPN, Direct Connect or
	// PrivateLink; with privateLinkPrincipals an endpoint service.
	ctx := protectedStage("prd")
	ctx["internal"], ctx["privateLinkPrincipals"] = "true", "arn:aws:iam::210987654321:root"
	i := synth(t, ctx)
	_, ilb := firstID(i.resources("AWS::ElasticLoadBalancingV2::LoadBalancer"))
	if p := props(ilb); p["Scheme"] != "internal" ||
		!containsAll(jsonString(p), `"EnforceSecurityGroupInboundRulesOnPrivateLinkTraffic":"off"`) {
		t.Errorf("internal, privateLinkPrincipals: NLB %s", jsonString(p))
	}
	esID, es := firstID(i.resources("AWS::EC2::VPCEndpointService"))
	if p := props(es); p["AcceptanceRequired"] != true || !containsAll(jsonString(p["NetworkLoadBalancerArns"]), `"Ref":"`) {
		t.Errorf("endpoint service %s", jsonString(p))
	}
	_, perm := firstID(i.resources("AWS::EC2::VPCEndpointServicePermissions"))
	if p := props(perm); jsonString(p["AllowedPrincipals"]) != `["arn:aws:iam::210987654321:root"]` || !containsAll(jsonString(p["ServiceId"]), esID) {
		t.Errorf("endpoint service permissions %s", jsonString(p))
	}
	if !containsAll(jsonString(i.json["Outputs"]), "EndpointServiceName") {
		t.Errorf("no EndpointServiceName output: %s", jsonString(i.json["Outputs"]))
	}
}

// sgRef returns the logical ID of the one security group a SecurityGroups
// property names.
func sgRef(t *testing.T, v interface{}, what string) string {
	t.Helper()
	l := asList(v)
	if len(l) != 1 {
		t.Fatalf("%s has security groups %s, want one", what, jsonString(v))
	}
	if m, ok := l[0].(map[string]interface{}); ok {
		if ga, ok := m["Fn::GetAtt"].([]interface{}); ok && len(ga) == 2 && ga[1] == "GroupId" {
			return ga[0].(string)
		}
	}
	t.Fatalf("%s's security group %s is not one of the stack's", what, jsonString(l[0]))
	return ""
}

// sgRules returns the rules of direction dir ("Ingress" or "Egress") of the
// security group sgID, inline and as separate resources, as "PEER=VALUE
// PROTOCOL PORT" (a security group peer by logical ID); CDK's placeholder
// that denies all egress is left out.
func (s *synthed) sgRules(sgID, dir string) map[string]bool {
	var rules []interface{}
	if sg, ok := s.resources("AWS::EC2::SecurityGroup")[sgID]; ok {
		rules = append(rules, asList(props(sg)["SecurityGroup"+dir])...)
	}
	for _, r := range s.resources("AWS::EC2::SecurityGroup" + dir) {
		p := props(r)
		if jsonString(p["GroupId"]) == `{"Fn::GetAtt":["`+sgID+`","GroupId"]}` {
			rules = append(rules, p)
		}
	}
	out := map[string]bool{}
	for _, r := range rules {
		r := r.(map[string]interface{})
		if r["CidrIp"] == "255.255.255.255/32" && r["IpProtocol"] == "icmp" {
			continue // "Disallow all traffic"
		}
		peer := ""
		for _, k := range []string{"CidrIp", "CidrIpv6", "SourcePrefixListId", "DestinationPrefixListId", "SourceSecurityGroupId", "DestinationSecurityGroupId"} {
			if v, ok := r[k]; ok {
				if m, ok := v.(map[string]interface{}); ok {
					if ga, ok := m["Fn::GetAtt"].([]interface{}); ok {
						v = ga[0]
					}
				}
				peer = fmt.Sprintf("%s=%v", k, v)
			}
		}
		port := fmt.Sprint(r["FromPort"])
		if r["ToPort"] != r["FromPort"] {
			port += "-" + fmt.Sprint(r["ToPort"])
		}
		out[fmt.Sprintf("%s %v %s", peer, r["IpProtocol"], port)] = true
	}
	return out
}

// digMap follows keys through nested objects.
func digMap(m map[string]interface{}, keys ...string) map[string]interface{} {
	for _, k := range keys {
		m, _ = m[k].(map[string]interface{})
	}
	return m
}

func keysOf(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

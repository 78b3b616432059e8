package farmstack

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/jsii-runtime-go"
)

// pdbFull: everything set, compiles in a VPC with a security group of the
// stack's, storeconfigs puppetdb.
func pdbFull() map[string]string {
	return map[string]string{
		"puppetdbUrls": testURLs, "puppetdbIdentitySecret": testIdentityARN, "puppetdbCaSecret": testCAARN,
		"puppetdbVpcId": "vpc-0123456789abcdef0", "puppetdbSubnetIds": "subnet-0123456789abcdef0, subnet-0fedcba9876543210",
		"puppetdbQueryRefresh": "2m", "storeconfigs": "puppetdb",
	}
}

// pdbInline: the smallest setting, URL and the CA's PEM: the fleet
// presents the front door's certificate, compiles run outside a VPC.
func pdbInline(t *testing.T) map[string]string {
	return map[string]string{"puppetdbUrls": "https://puppetdb.example.com:8081", "puppetdbCa": testCAPEM(t)}
}

// container returns the fleet's one container definition.
func (s *synthed) container(t *testing.T) map[string]interface{} {
	t.Helper()
	_, task := firstID(s.resources("AWS::ECS::TaskDefinition"))
	cds, _ := props(task)["ContainerDefinitions"].([]interface{})
	if len(cds) != 1 {
		t.Fatalf("%d containers", len(cds))
	}
	return cds[0].(map[string]interface{})
}

// flags returns the container command's flags and values (serve FLAG VALUE...).
func (s *synthed) flags(t *testing.T) map[string]interface{} {
	t.Helper()
	cmd := s.container(t)["Command"].([]interface{})
	flags := map[string]interface{}{}
	for i := 1; i+1 < len(cmd); i += 2 {
		f, ok := cmd[i].(string)
		if !ok || !strings.HasPrefix(f, "--") {
			t.Fatalf("command %s: argument %d is not a flag", jsonString(cmd), i)
		}
		if _, dup := flags[strings.TrimPrefix(f, "--")]; dup {
			t.Errorf("command passes %s twice", f)
		}
		flags[strings.TrimPrefix(f, "--")] = cmd[i+1]
	}
	return flags
}

// compileEnv returns the compile function's properties and environment.
func (s *synthed) compileEnv(t *testing.T) (map[string]interface{}, map[string]interface{}) {
	t.Helper()
	_, fn := s.find(t, "AWS::Lambda::Function", "FunctionName", "compilefarm-dev-compile")
	return fn, fn["Environment"].(map[string]interface{})["Variables"].(map[string]interface{})
}

// getAttID is the logical ID in {"Fn::GetAtt": [ID, ...]}.
func getAttID(v interface{}) string {
	m, _ := v.(map[string]interface{})
	ga, _ := m["Fn::GetAtt"].([]interface{})
	if len(ga) == 0 {
		return ""
	}
	id, _ := ga[0].(string)
	return id
}

var puppetdbFlags = []string{"puppetdb", "puppetdb-ca", "puppetdb-cert", "puppetdb-key", "puppetdb-query-refresh", "storeconfigs",
	"puppetdb-outbox-queue", "puppetdb-dead-letter-queue"}

// TestNoPuppetDB: without puppetdbUrls nothing of PuppetDB is in the
// stack: no FIFO queue, alarm, output, flag, variable, VPC placement or
// SQS endpoint (storeconfigs farm, the default, given or not).
func TestNoPuppetDB(t *testing.T) {
	for _, ctx := range []map[string]string{nil, {"storeconfigs": "farm"}} {
		s := synth(t, ctx)
		for id, r := range s.resources("AWS::SQS::Queue") {
			p := props(r)
			if p["FifoQueue"] != nil || strings.Contains(jsonString(p["QueueName"]), "puppetdb") {
				t.Errorf("%v: queue %s %v", ctx, id, p["QueueName"])
			}
		}
		for _, r := range s.resources("AWS::CloudWatch::Alarm") {
			if n, _ := props(r)["AlarmName"].(string); strings.Contains(n, "puppetdb") {
				t.Errorf("%v: alarm %s", ctx, n)
			}
		}
		if outs := jsonString(s.json["Outputs"]); strings.Contains(outs, "PuppetDB") {
			t.Errorf("%v: outputs %s", ctx, outs)
		}
		flags := s.flags(t)
		for _, f := range puppetdbFlags {
			if _, ok := flags[f]; ok {
				t.Errorf("%v: the container passes --%s", ctx, f)
			}
		}
		if c := s.container(t); c["Secrets"] != nil || strings.Contains(jsonString(c["Environment"]), "PUPPETDB") {
			t.Errorf("%v: container secrets %s environment %s", ctx, jsonString(c["Secrets"]), jsonString(c["Environment"]))
		}
		fn, env := s.compileEnv(t)
		for k := range env {
			if strings.Contains(k, "PUPPETDB") || k == EnvStoreconfigs {
				t.Errorf("%v: the compile function gets %s", ctx, k)
			}
		}
		if fn["VpcConfig"] != nil {
			t.Errorf("%v: compile function VpcConfig %s", ctx, jsonString(fn["VpcConfig"]))
		}
		if n := len(s.resources("AWS::EC2::VPCEndpoint")); n != 2 {
			t.Errorf("%v: %d VPC endpoints, want the 2 gateway endpoints", ctx, n)
		}
	}
}

// TestPuppetDBOutbox: a high-throughput FIFO outbox (deduplication and
// throughput per message group), content-based deduplication, SSE,
// retention 14 days, the visibility timeout, and a FIFO dead-letter queue
// behind a redrive at OutboxMaxReceives.
func TestPuppetDBOutbox(t *testing.T) {
	s := synth(t, pdbFull())
	if n := len(s.resources("AWS::SQS::Queue")); n != 6 {
		t.Errorf("%d queues, want 6 (the lanes', the outbox and its DLQ)", n)
	}
	dlqID, dlq := s.find(t, "AWS::SQS::Queue", "QueueName", "compilefarm-dev-puppetdb-dlq.fifo")
	outboxID, q := s.find(t, "AWS::SQS::Queue", "QueueName", "compilefarm-dev-puppetdb-outbox.fifo")
	for name, p := range map[string]map[string]interface{}{"outbox": q, "dlq": dlq} {
		if p["FifoQueue"] != true || p["ContentBasedDeduplication"] != true || p["SqsManagedSseEnabled"] != true {
			t.Errorf("%s: FifoQueue %v ContentBasedDeduplication %v SqsManagedSseEnabled %v", name, p["FifoQueue"], p["ContentBasedDeduplication"], p["SqsManagedSseEnabled"])
		}
		if num(p["MessageRetentionPeriod"]) != 14*24*3600 {
			t.Errorf("%s: MessageRetentionPeriod %v, want 14 days", name, p["MessageRetentionPeriod"])
		}
	}
	if q["DeduplicationScope"] != "messageGroup" || q["FifoThroughputLimit"] != "perMessageGroupId" {
		t.Errorf("outbox DeduplicationScope %v FifoThroughputLimit %v, want high-throughput FIFO", q["DeduplicationScope"], q["FifoThroughputLimit"])
	}
	if num(q["VisibilityTimeout"]) != OutboxVisibility.Seconds() || OutboxAgeAlarm <= OutboxVisibility {
		t.Errorf("outbox VisibilityTimeout %v, want %v (below the age alarm's %v)", q["VisibilityTimeout"], OutboxVisibility.Seconds(), OutboxAgeAlarm)
	}
	rp, _ := q["RedrivePolicy"].(map[string]interface{})
	if num(rp["maxReceiveCount"]) != 1000 || getAttID(rp["deadLetterTargetArn"]) != dlqID {
		t.Errorf("outbox RedrivePolicy %s, want maxReceiveCount 1000 to %s", jsonString(rp), dlqID)
	}
	// TLS only, as the other queues.
	policies := jsonString(s.resources("AWS::SQS::QueuePolicy"))
	for _, id := range []string{outboxID, dlqID} {
		if !containsAll(policies, `"aws:SecureTransport":"false"`, id) {
			t.Errorf("no TLS-only queue policy for %s", id)
		}
	}
	outs := jsonString(s.json["Outputs"])
	if !containsAll(outs, "PuppetDBOutboxQueueUrl", "PuppetDBDeadLetterQueueUrl", "--puppetdb-outbox-queue", "--puppetdb-dead-letter-queue") {
		t.Errorf("outputs %s", outs)
	}
}

// TestPuppetDBGrants: the outbox's SQS actions go to the fleet's task
// role only: send, receive, delete and change visibility on the outbox,
// send on the dead-letter queue (with queue attributes and URL, for the
// backlog gauges). The secrets are read by the ECS execution role (which
// injects them) and the compile function, not the task role.
func TestPuppetDBGrants(t *testing.T) {
	s := synth(t, pdbFull())
	outboxID, _ := s.find(t, "AWS::SQS::Queue", "QueueName", "compilefarm-dev-puppetdb-outbox.fifo")
	dlqID, _ := s.find(t, "AWS::SQS::Queue", "QueueName", "compilefarm-dev-puppetdb-dlq.fifo")
	_, task := firstID(s.resources("AWS::ECS::TaskDefinition"))
	taskRole, execRole := getAttID(props(task)["TaskRoleArn"]), getAttID(props(task)["ExecutionRoleArn"])
	fn, _ := s.compileEnv(t)
	fnRole := getAttID(fn["Role"])
	if taskRole == "" || execRole == "" || fnRole == "" {
		t.Fatalf("roles: task %q execution %q compile %q", taskRole, execRole, fnRole)
	}
	type grant struct{ actions, roles []string }
	grants := map[string]*grant{"outbox": {}, "dlq": {}, "identity": {}, "ca": {}}
	for _, r := range s.resources("AWS::IAM::Policy") {
		p := props(r)
		var roles []string
		for _, ref := range asList(p["Roles"]) {
			id, _ := ref.(map[string]interface{})["Ref"].(string)
			roles = append(roles, id)
		}
		for _, st := range asList(p["PolicyDocument"].(map[string]interface{})["Statement"]) {
			st := st.(map[string]interface{})
			for _, res := range asList(st["Resource"]) {
				var g *grant
				switch {
				case getAttID(res) == outboxID:
					g = grants["outbox"]
				case getAttID(res) == dlqID:
					g = grants["dlq"]
				case jsonString(res) == `"`+testIdentityARN+`"`:
					g = grants["identity"]
				case jsonString(res) == `"`+testCAARN+`"`:
					g = grants["ca"]
				default:
					continue
				}
				for _, a := range asList(st["Action"]) {
					g.actions = append(g.actions, a.(string))
				}
				g.roles = append(g.roles, roles...)
			}
		}
	}
	sorted := func(v []string) []string { v = slices.Clone(v); sort.Strings(v); return slices.Compact(v) }
	for name, want := range map[string]grant{
		"outbox": {[]string{"sqs:ChangeMessageVisibility", "sqs:DeleteMessage", "sqs:GetQueueAttributes",
			"sqs:ReceiveMessage", "sqs:SendMessage"}, []string{taskRole}},
		"dlq":      {[]string{"sqs:GetQueueAttributes", "sqs:SendMessage"}, []string{taskRole}},
		"identity": {[]string{"secretsmanager:DescribeSecret", "secretsmanager:GetSecretValue"}, sorted([]string{execRole, fnRole})},
		"ca":       {[]string{"secretsmanager:DescribeSecret", "secretsmanager:GetSecretValue"}, sorted([]string{execRole, fnRole})},
	} {
		g := grants[name]
		if got := sorted(g.actions); !slices.Equal(got, want.actions) {
			t.Errorf("%s: actions %v, want %v", name, got, want.actions)
		}
		if got := sorted(g.roles); !slices.Equal(got, want.roles) {
			t.Errorf("%s: granted to roles %v, want %v (task %s, execution %s, compile %s)", name, got, want.roles, taskRole, execRole, fnRole)
		}
	}
}

// brokerFlags are the flags broker defines (as TestFleetTask reads them).
func brokerFlags(t *testing.T) map[string]bool {
	t.Helper()
	known := map[string]bool{}
	files, _ := filepath.Glob(filepath.Join(repoRoot, "broker", "*.go"))
	re := regexp.MustCompile(`fs\.[A-Za-z0-9]+\((?:&[^,]+, )?"([a-z0-9-]+)"`)
	for _, f := range files {
		b, _ := os.ReadFile(f)
		for _, m := range re.FindAllStringSubmatch(string(b), -1) {
			known[m[1]] = true
		}
	}
	return known
}

// TestPuppetDBFleet: broker serve's PuppetDB flags, the identity and CA
// injected from their secrets (the identity's JSON fields) or the CA's PEM
// as a plain variable, and an SQS interface endpoint in the fleet's VPC.
func TestPuppetDBFleet(t *testing.T) {
	s := synth(t, pdbFull())
	flags := s.flags(t)
	outboxID, _ := s.find(t, "AWS::SQS::Queue", "QueueName", "compilefarm-dev-puppetdb-outbox.fifo")
	dlqID, _ := s.find(t, "AWS::SQS::Queue", "QueueName", "compilefarm-dev-puppetdb-dlq.fifo")
	queriesID, _ := s.find(t, "AWS::DynamoDB::Table", "TableName", "compilefarm-dev-queries")
	for flag, want := range map[string]string{
		"puppetdb": `"` + testURLs + `"`, "puppetdb-query-refresh": `"2m0s"`, "storeconfigs": `"puppetdb"`,
		"queries-table":         queriesID,
		"puppetdb-outbox-queue": outboxID, "puppetdb-dead-letter-queue": dlqID,
		"puppetdb-ca": `"env:COMPILEFARM_PUPPETDB_CA"`, "puppetdb-cert": `"env:COMPILEFARM_PUPPETDB_CERT"`, "puppetdb-key": `"env:COMPILEFARM_PUPPETDB_KEY"`,
	} {
		if got := jsonString(flags[flag]); !strings.Contains(got, want) {
			t.Errorf("--%s = %s, want %s", flag, got, want)
		}
	}
	secrets := map[string]string{}
	for _, sec := range asList(s.container(t)["Secrets"]) {
		sec := sec.(map[string]interface{})
		secrets[sec["Name"].(string)] = jsonString(sec["ValueFrom"])
	}
	for name, want := range map[string]string{
		EnvPuppetDBCert: `"` + testIdentityARN + `:cert::"`, EnvPuppetDBKey: `"` + testIdentityARN + `:key::"`, EnvPuppetDBCA: `"` + testCAARN + `"`,
	} {
		if secrets[name] != want {
			t.Errorf("container secret %s from %s, want %s", name, secrets[name], want)
		}
	}
	if len(secrets) != 3 {
		t.Errorf("container secrets %v", secrets)
	}
	if env := jsonString(s.container(t)["Environment"]); strings.Contains(env, "PUPPETDB") {
		t.Errorf("with the CA and identity in secrets, the container's environment is %s", env)
	}
	var interfaces []string
	for _, r := range s.resources("AWS::EC2::VPCEndpoint") {
		if p := props(r); p["VpcEndpointType"] == "Interface" {
			interfaces = append(interfaces, jsonString(p["ServiceName"]))
			if p["PrivateDnsEnabled"] != true {
				t.Errorf("interface endpoint %s without private DNS (the SDK would not use it)", jsonString(p["ServiceName"]))
			}
		}
	}
	if len(interfaces) != 1 || !strings.Contains(interfaces[0], `".sqs"`) {
		t.Errorf("interface endpoints %v, want SQS's", interfaces)
	}

	in := synth(t, pdbInline(t))
	flags = in.flags(t)
	for _, f := range []string{"puppetdb-cert", "puppetdb-key"} {
		if _, ok := flags[f]; ok {
			t.Errorf("without puppetdbIdentitySecret the container passes --%s (the default is the front door's certificate)", f)
		}
	}
	if flags["puppetdb-ca"] != "env:"+EnvPuppetDBCA || flags["storeconfigs"] != "farm" || flags["puppetdb-query-refresh"] != "5m0s" {
		t.Errorf("--puppetdb-ca %v --storeconfigs %v --puppetdb-query-refresh %v", flags["puppetdb-ca"], flags["storeconfigs"], flags["puppetdb-query-refresh"])
	}
	c := in.container(t)
	if c["Secrets"] != nil {
		t.Errorf("container secrets %s", jsonString(c["Secrets"]))
	}
	var ca interface{}
	for _, e := range asList(c["Environment"]) {
		if e := e.(map[string]interface{}); e["Name"] == EnvPuppetDBCA {
			ca = e["Value"]
		}
	}
	if ca != strings.TrimSpace(testCAPEM(t)) {
		t.Errorf("container %s = %v, want puppetdbCa's PEM", EnvPuppetDBCA, ca)
	}

	// Every PuppetDB flag is one broker defines, once broker has them (the
	// lead's side of issue 22; TestFleetTask checks the other flags).
	known := brokerFlags(t)
	var missing []string
	for _, f := range puppetdbFlags {
		if !known[f] {
			missing = append(missing, f)
		}
	}
	switch {
	case len(missing) == len(puppetdbFlags):
		t.Logf("broker defines none of the PuppetDB flags yet; the check that it defines all of %v starts when it defines one", puppetdbFlags)
	case len(missing) > 0:
		t.Errorf("the container passes --%s, which broker does not define", strings.Join(missing, ", --"))
	}
}

// TestPuppetDBCompileFunction: the compile function's PuppetDB variables
// (the key only as the secret's ARN, never its value), its VPC placement
// with a security group allowing egress to PuppetDB's ports and HTTPS
// only, or the operator's group; outside a VPC without subnets.
func TestPuppetDBCompileFunction(t *testing.T) {
	s := synth(t, pdbFull())
	fn, env := s.compileEnv(t)
	want := map[string]string{
		EnvPuppetDB: testURLs, EnvStoreconfigs: "puppetdb", EnvPuppetDBIdentitySecret: testIdentityARN, EnvPuppetDBCASecret: testCAARN,
	}
	for k, v := range want {
		if env[k] != v {
			t.Errorf("compile %s = %v, want %s", k, env[k], v)
		}
	}
	queriesID, _ := s.find(t, "AWS::DynamoDB::Table", "TableName", "compilefarm-dev-queries")
	if q := jsonString(env["COMPILEFARM_QUERIES_TABLE"]); !strings.Contains(q, queriesID) {
		t.Errorf("compile COMPILEFARM_QUERIES_TABLE = %s, want the queries table", q)
	}
	for _, k := range []string{EnvPuppetDBCert, EnvPuppetDBKey, EnvPuppetDBCA} {
		if _, ok := env[k]; ok {
			t.Errorf("compile function gets %s in plain text", k)
		}
	}
	vc, _ := fn["VpcConfig"].(map[string]interface{})
	if got := jsonString(vc["SubnetIds"]); got != `["subnet-0123456789abcdef0","subnet-0fedcba9876543210"]` {
		t.Errorf("VpcConfig.SubnetIds %s", got)
	}
	sgs := asList(vc["SecurityGroupIds"])
	if len(sgs) != 1 {
		t.Fatalf("VpcConfig.SecurityGroupIds %s", jsonString(sgs))
	}
	sgID := getAttID(sgs[0])
	sg, ok := s.resources("AWS::EC2::SecurityGroup")[sgID]
	if !ok {
		t.Fatalf("compile security group %s not in the template", jsonString(sgs[0]))
	}
	sp := props(sg)
	if sp["VpcId"] != "vpc-0123456789abcdef0" || sp["SecurityGroupIngress"] != nil {
		t.Errorf("compile security group VpcId %v ingress %s", sp["VpcId"], jsonString(sp["SecurityGroupIngress"]))
	}
	var ports []int
	for _, e := range asList(sp["SecurityGroupEgress"]) {
		e := e.(map[string]interface{})
		if e["IpProtocol"] != "tcp" || num(e["FromPort"]) != num(e["ToPort"]) {
			t.Errorf("egress rule %s: want one TCP port", jsonString(e))
		}
		ports = append(ports, int(num(e["FromPort"])))
	}
	sort.Ints(ports)
	if !slices.Equal(ports, []int{443, 8081}) {
		t.Errorf("compile security group egress ports %v, want PuppetDB's 8081 and 443", ports)
	}
	if got := PuppetDBPorts(strings.Split(testURLs, ",")); !slices.Equal(got, []int{443, 8081}) {
		t.Errorf("PuppetDBPorts(%s) = %v", testURLs, got)
	}
	roleID := getAttID(fn["Role"])
	if mp := jsonString(props(s.resources("AWS::IAM::Role")[roleID])["ManagedPolicyArns"]); !strings.Contains(mp, "service-role/AWSLambdaVPCAccessExecutionRole") {
		t.Errorf("compile role managed policies %s: no VPC access (its network interfaces)", mp)
	}

	ctx := pdbFull()
	ctx["puppetdbSecurityGroupId"] = "sg-0123456789abcdef0"
	g := synth(t, ctx)
	fn, _ = g.compileEnv(t)
	if got := jsonString(fn["VpcConfig"].(map[string]interface{})["SecurityGroupIds"]); got != `["sg-0123456789abcdef0"]` {
		t.Errorf("with puppetdbSecurityGroupId: SecurityGroupIds %s", got)
	}
	for id, r := range g.resources("AWS::EC2::SecurityGroup") {
		if containsAll(jsonString(props(r)), "vpc-0123456789abcdef0") {
			t.Errorf("with puppetdbSecurityGroupId the stack still makes security group %s", id)
		}
	}

	in := synth(t, pdbInline(t))
	fn, env = in.compileEnv(t)
	if fn["VpcConfig"] != nil {
		t.Errorf("without puppetdbSubnetIds: VpcConfig %s", jsonString(fn["VpcConfig"]))
	}
	if env[EnvPuppetDBCA] != strings.TrimSpace(testCAPEM(t)) || env[EnvStoreconfigs] != "farm" || env[EnvPuppetDB] != "https://puppetdb.example.com:8081" {
		t.Errorf("compile environment %s", jsonString(env))
	}
	for _, k := range []string{EnvPuppetDBIdentitySecret, EnvPuppetDBCASecret} {
		if _, ok := env[k]; ok {
			t.Errorf("without its secret the compile function gets %s", k)
		}
	}
	check(t, "no identity warning", func() {
		assertions.Annotations_FromStack(in.stack.Stack).HasWarning(jsii.String("*"),
			assertions.Match_StringLikeRegexp(jsii.String("puppetdbIdentitySecret is not set.*puppetdb_query")))
	})

	// The names, once functions/compile/main.go reads them (the query
	// helper's side of issue 22; TestCompileFunction checks the others).
	src, err := os.ReadFile(filepath.Join(repoRoot, "functions", "compile", "main.go"))
	if err != nil {
		t.Fatal(err)
	}
	var unread []string
	names := []string{EnvPuppetDB, EnvPuppetDBCA, EnvPuppetDBCASecret, EnvPuppetDBIdentitySecret, EnvStoreconfigs}
	for _, k := range names {
		if !strings.Contains(string(src), `"`+k+`"`) {
			unread = append(unread, k)
		}
	}
	switch {
	case len(unread) == len(names):
		t.Logf("functions/compile/main.go reads none of %v yet; the check that it reads all starts when it reads one", names)
	case len(unread) > 0:
		t.Errorf("the compile function gets %v, which functions/compile/main.go does not read", unread)
	}
}

// TestPuppetDBAlarms: the outbox's age over OutboxAgeAlarm and a
// non-empty dead-letter queue alarm to the alarm topic; the dashboard
// graphs the backlog and its age.
func TestPuppetDBAlarms(t *testing.T) {
	ctx := pdbFull()
	ctx["alarmEmail"] = "ops@example.com"
	s := synth(t, ctx)
	topicID, _ := firstID(s.resources("AWS::SNS::Topic"))
	outboxID, _ := s.find(t, "AWS::SQS::Queue", "QueueName", "compilefarm-dev-puppetdb-outbox.fifo")
	dlqID, _ := s.find(t, "AWS::SQS::Queue", "QueueName", "compilefarm-dev-puppetdb-dlq.fifo")
	for name, w := range map[string]struct {
		metric, queue string
		threshold     float64
	}{
		"puppetdb-outbox-age":    {"ApproximateAgeOfOldestMessage", outboxID, 900},
		"puppetdb-dlq-not-empty": {"ApproximateNumberOfMessagesVisible", dlqID, 0},
	} {
		_, a := s.find(t, "AWS::CloudWatch::Alarm", "AlarmName", "compilefarm-dev-"+name)
		if a["MetricName"] != w.metric || a["Namespace"] != "AWS/SQS" || a["Statistic"] != "Maximum" || num(a["Threshold"]) != w.threshold ||
			a["ComparisonOperator"] != "GreaterThanThreshold" || !containsAll(jsonString(a["Dimensions"]), w.queue) {
			t.Errorf("%s alarm %s", name, jsonString(a))
		}
		if !containsAll(jsonString(a["AlarmActions"]), topicID) || !containsAll(jsonString(a["OKActions"]), topicID) {
			t.Errorf("%s alarm actions %s / %s without the topic", name, jsonString(a["AlarmActions"]), jsonString(a["OKActions"]))
		}
	}
	if OutboxAgeAlarm != 15*time.Minute {
		t.Errorf("OutboxAgeAlarm %s", OutboxAgeAlarm)
	}
	_, d := s.find(t, "AWS::CloudWatch::Dashboard", "DashboardName", "compilefarm-dev-farm")
	body := strings.ReplaceAll(jsonString(d["DashboardBody"]), `\"`, `"`)
	for _, want := range []string{`"title":"PuppetDB outbox backlog (commands)"`, `"title":"PuppetDB outbox oldest command age (s)"`,
		`"ApproximateNumberOfMessagesNotVisible"`, `"NumberOfMessagesSent"`, `"NumberOfMessagesDeleted"`} {
		if !strings.Contains(body, want) {
			t.Errorf("the dashboard has no %s", want)
		}
	}
	// Both alarms are in the alarm status widget.
	alarmsWidget := body[strings.Index(body, `"title":"Alarms"`)-200:]
	for _, name := range []string{"OutboxAge", "OutboxDlq"} {
		if !strings.Contains(alarmsWidget, name) {
			t.Errorf("the alarm status widget has no %s alarm", name)
		}
	}
}

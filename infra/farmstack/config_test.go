package farmstack

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/jsii-runtime-go"
)

// configFrom reads the configuration from ctx on top of infra/cdk.json's
// context, as the CLI gives it.
func configFrom(t *testing.T, ctx map[string]interface{}) (Config, error) {
	t.Helper()
	return configFromOnly(t, withCDKContext(ctx))
}

// configFromOnly reads the configuration from ctx alone.
func configFromOnly(t *testing.T, ctx map[string]interface{}) (Config, error) {
	t.Helper()
	app := awscdk.NewApp(&awscdk.AppProps{Context: &ctx, Outdir: jsii.String(t.TempDir())})
	return ConfigFromContext(app)
}

func TestConfigFromContext(t *testing.T) {
	c, err := configFrom(t, map[string]interface{}{})
	dev := Defaults()
	dev.Retain, dev.Protect, dev.AutoDeleteObjects = false, false, true // infra/cdk.json's dev block
	if err != nil || !reflect.DeepEqual(c, dev) {
		t.Errorf("no context: %+v, %v; want the defaults with cdk.json's dev block", c, err)
	}
	c, err = configFrom(t, map[string]interface{}{
		"account": testAccount, "region": "us-east-1", "allowedSources": "0.0.0.0/0",
		"stage": "prod", "dnsAltNames": " puppet.example.com,,farm.example.com ", "urgentConcurrencyMax": 30.0,
		"bulkConcurrencyMin": "2", "bulkConcurrencyMax": "4", "compileMemoryMiB": "3008", "compileTimeoutSeconds": "600",
		"fleetMinCount": "12", "fleetCpu": "2048", "fleetMemoryMiB": "4096", "fleet": "true", "alarmEmail": "ops@example.com",
		"compileFunction": "false", "availabilityZones": "us-east-1a, us-east-1b", "awsEndpointURL": "http://compilefarm-localstack:4566",
	})
	if err != nil {
		t.Fatal(err)
	}
	want := Defaults()
	want.Stage, want.DNSAltNames = "prod", []string{"puppet.example.com", "farm.example.com"}
	want.UrgentConcurrencyMax, want.BulkConcurrencyMin, want.BulkConcurrencyMax = 30, 2, 4
	want.CompileMemoryMiB, want.CompileTimeoutSeconds = 3008, 600
	want.FleetMinCount, want.FleetMaxCount, want.FleetCPU, want.FleetMemoryMiB = 12, 12, 2048, 4096
	want.AlarmEmail = "ops@example.com"
	want.CompileFunction, want.AvailabilityZones = false, []string{"us-east-1a", "us-east-1b"}
	want.AWSEndpointURL = "http://compilefarm-localstack:4566"
	want.Account, want.Region, want.AllowedSources = testAccount, "us-east-1", []string{"0.0.0.0/0"}
	if !reflect.DeepEqual(c, want) {
		t.Errorf("got  %+v\nwant %+v", c, want)
	}
	if !c.Protected() {
		t.Error("stage prod with the defaults is not Protected")
	}
	for _, bad := range []map[string]interface{}{
		{"stage": "Dev"}, {"stage": "dev_1"}, {"urgentConcurrencyMax": "1"}, {"bulkConcurrencyMax": "1001"},
		{"urgentConcurrencyMax": "1001"}, {"bulkConcurrencyMin": "10", "bulkConcurrencyMax": "5"}, {"compileTimeoutSeconds": "901"},
		{"compileMemoryMiB": "lots"}, {"fleet": "maybe"}, {"compileFunction": "no way"}, {"availabilityZones": "us-east-1a"}, {"fleetMinCount": "0"}, {"fleetMinCount": "5", "fleetMaxCount": "4"}, {"fleetDesiredCount": "2"},
		{"awsEndpointURL": "compilefarm-localstack:4566"}, {"awsEndpointURL": "http://"},
	} {
		if _, err := configFrom(t, bad); err == nil {
			t.Errorf("context %v: no error", bad)
		}
	}
}

// TestStageBlocks: a stage's values come from -c, else from its block in
// "stages" (infra/cdk.json), else from the defaults; a protected stage
// (retain or protect, the defaults, whatever its name) must name its
// account and region, and with them its zones.
func TestStageBlocks(t *testing.T) {
	blocks := map[string]interface{}{
		"eu": map[string]interface{}{"account": testAccount, "region": "eu-central-1", "availabilityZones": []interface{}{"eu-central-1a", "eu-central-1b"},
			"dnsAltNames": "puppet.example.com", "fleetCpu": 2048.0, "fleetMemoryMiB": 4096.0, "allowedSources": []interface{}{"198.51.100.0/24", "pl-0123456789abcdef0"}},
		"scratch": map[string]interface{}{"retain": false, "protect": false},
	}
	c, err := configFromOnly(t, map[string]interface{}{"stage": "eu", StagesKey: blocks, "dnsAltNames": "farm.example.com"})
	if err != nil {
		t.Fatal(err)
	}
	if c.Account != testAccount || c.Region != "eu-central-1" || !reflect.DeepEqual(c.AvailabilityZones, []string{"eu-central-1a", "eu-central-1b"}) ||
		c.FleetCPU != 2048 || c.FleetMemoryMiB != 4096 || !reflect.DeepEqual(c.AllowedSources, []string{"198.51.100.0/24", "pl-0123456789abcdef0"}) || !c.Retain || !c.Protect || c.AutoDeleteObjects {
		t.Errorf("stage eu from its block: %+v", c)
	}
	if !reflect.DeepEqual(c.DNSAltNames, []string{"farm.example.com"}) {
		t.Errorf("dnsAltNames %v: -c does not win over the block", c.DNSAltNames)
	}
	c, err = configFromOnly(t, map[string]interface{}{"stage": "scratch", StagesKey: blocks})
	if err != nil || c.Retain || c.Protect || !c.AutoDeleteObjects || c.Protected() || c.Account != "" {
		t.Errorf("stage scratch: %+v, %v", c, err)
	}
	for _, bad := range []struct {
		ctx  map[string]interface{}
		want string
	}{
		// Safe by default, whatever the name: no stage is special.
		{map[string]interface{}{}, "stage dev is protected (retain or protect, the defaults) and needs account"},
		{map[string]interface{}{"stage": "prd"}, "stage prd is protected"},
		{map[string]interface{}{"stage": "qa", "retain": "false"}, "stage qa is protected"},
		{map[string]interface{}{"stage": "qa", "protect": "false", "account": testAccount}, "needs region"},
		{map[string]interface{}{"stage": "qa", "account": testAccount, "region": testRegion, "allowedSources": "0.0.0.0/0"}, "needs availabilityZones too"},
		{map[string]interface{}{"stage": "qa", "account": testAccount, "region": testRegion, "availabilityZones": "us-east-1a,us-east-1b", "allowedSources": "0.0.0.0/0"},
			`"us-east-1a" is not a zone of region eu-west-1`},
		{map[string]interface{}{"stage": "qa", "account": "1234", "region": testRegion}, "12-digit"},
		{map[string]interface{}{"stage": "qa", "account": testAccount, "region": "Europe"}, `region "Europe"`},
		{map[string]interface{}{"stage": "qa", "retain": "false", "protect": "false", "account": testAccount}, "account and region go together"},
		{map[string]interface{}{"stage": "qa", "autoDeleteObjects": "true", "account": testAccount, "region": testRegion, "fleet": "false"}, "autoDeleteObjects with retain"},
		{map[string]interface{}{"stage": "scratch", StagesKey: map[string]interface{}{"scratch": map[string]interface{}{"retain": false, "protect": false, "alowedSources": "x"}}},
			"stages.scratch.alowedSources: alowedSources is not a context key"},
		{map[string]interface{}{StagesKey: "dev"}, "want an object of stage blocks"},
		{map[string]interface{}{StagesKey: map[string]interface{}{"dev": "retain"}}, "stages.dev: want an object"},
	} {
		_, err := configFromOnly(t, bad.ctx)
		if err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("context %v: error %v, want one saying %q", bad.ctx, err, bad.want)
		}
	}
	// The committed blocks: dev and local are disposable, prod is a
	// template the site fills in (it does not synth until then).
	for stage, protected := range map[string]bool{"dev": false, "local": false} {
		if c, err := configFrom(t, map[string]interface{}{"stage": stage}); err != nil || c.Protected() != protected {
			t.Errorf("infra/cdk.json's %s block: %+v, %v", stage, c, err)
		}
	}
	if _, err := configFrom(t, map[string]interface{}{"stage": "prod"}); err == nil || !strings.Contains(err.Error(), "needs account") {
		t.Errorf("infra/cdk.json's prod block as committed: %v, want the error naming account", err)
	}
}

// TestStageInNames: the stage is in the stack's and the named resources'
// names, so stages can share an account.
func TestStageInNames(t *testing.T) {
	s := synth(t, protectedStage("qa2"))
	if name := *s.stack.Stack.StackName(); name != "compilefarm-qa2" {
		t.Errorf("stack name %q", name)
	}
	for typ, key := range map[string]string{
		"AWS::DynamoDB::Table": "TableName", "AWS::SQS::Queue": "QueueName", "AWS::KMS::Alias": "AliasName",
		"AWS::CloudWatch::Alarm": "AlarmName", "AWS::CloudWatch::Dashboard": "DashboardName", "AWS::ECS::Cluster": "ClusterName",
		"AWS::ECS::Service": "ServiceName", "AWS::Events::Rule": "Name", "AWS::Logs::LogGroup": "LogGroupName",
	} {
		rs := s.resources(typ)
		if len(rs) == 0 {
			t.Errorf("no %s", typ)
		}
		for id, r := range rs {
			if n, _ := props(r)[key].(string); !strings.Contains(n, "qa2") {
				t.Errorf("%s %s: %s %q does not name the stage", typ, id, key, n)
			}
		}
	}
	for id, r := range s.resources("AWS::Lambda::Function") {
		n, _ := props(r)["FunctionName"].(string)
		if n != "" && !strings.HasPrefix(n, "compilefarm-qa2-") {
			t.Errorf("function %s name %q", id, n)
		}
	}
}

// TestContextKeysDocumented: every context key ConfigFromContext reads is
// in infra/README.md's table.
func TestContextKeysDocumented(t *testing.T) {
	src, err := os.ReadFile("config.go")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join("..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	keys := regexp.MustCompile(`(?:str|num|list|boolean|text|duration)\("([A-Za-z]+)"`).FindAllStringSubmatch(string(src), -1)
	if len(keys) < 10 {
		t.Fatalf("found only %d context keys in config.go", len(keys))
	}
	for _, k := range keys {
		if !strings.Contains(string(readme), "`"+k[1]+"`") {
			t.Errorf("context key %s is not in infra/README.md", k[1])
		}
	}
}

// TestPuppetDBConfig: the PuppetDB keys, and the errors that stop a synth:
// nothing without puppetdbUrls, https only, one CA setting, complete secret
// ARNs, VPC settings that go together, a compile identity for storeconfigs
// puppetdb.
func TestPuppetDBConfig(t *testing.T) {
	c, err := configFrom(t, map[string]interface{}{
		"puppetdbUrls": " https://puppetdb.example.com:8081, https://puppetdb2.example.com ", "puppetdbIdentitySecret": testIdentityARN,
		"puppetdbCaSecret": testCAARN, "puppetdbVpcId": "vpc-0123456789abcdef0", "puppetdbSubnetIds": "subnet-0123456789abcdef0,subnet-0fedcba9876543210",
		"puppetdbSecurityGroupId": "sg-0123456789abcdef0", "puppetdbQueryRefresh": "90s", "storeconfigs": "puppetdb",
	})
	if err != nil {
		t.Fatal(err)
	}
	want := PuppetDBConfig{
		URLs: []string{"https://puppetdb.example.com:8081", "https://puppetdb2.example.com"}, CASecret: testCAARN, IdentitySecret: testIdentityARN,
		VpcID: "vpc-0123456789abcdef0", SubnetIDs: []string{"subnet-0123456789abcdef0", "subnet-0fedcba9876543210"},
		SecurityGroupID: "sg-0123456789abcdef0", QueryRefresh: 90 * time.Second, Storeconfigs: "puppetdb",
	}
	if !reflect.DeepEqual(c.PuppetDB, want) {
		t.Errorf("got  %+v\nwant %+v", c.PuppetDB, want)
	}
	if d := Defaults().PuppetDB; d.Enabled() || d.QueryRefresh != 5*time.Minute || d.Storeconfigs != "farm" {
		t.Errorf("defaults %+v", d)
	}
	ca := testCAPEM(t)
	if c, err := configFrom(t, map[string]interface{}{"puppetdbUrls": "https://puppetdb.example.com", "puppetdbCa": ca}); err != nil || c.PuppetDB.CA != strings.TrimSpace(ca) {
		t.Errorf("puppetdbCa: %v, CA %q", err, c.PuppetDB.CA)
	}
	url := "https://puppetdb.example.com:8081"
	for _, bad := range []struct {
		ctx  map[string]interface{}
		want string
	}{
		{map[string]interface{}{"storeconfigs": "puppetdb"}, "storeconfigs puppetdb needs puppetdbUrls"},
		{map[string]interface{}{"storeconfigs": "exported"}, `storeconfigs "exported"`},
		{map[string]interface{}{"puppetdbCa": ca}, "puppetdbCa is set but puppetdbUrls is not"},
		{map[string]interface{}{"puppetdbSubnetIds": "subnet-0123456789abcdef0"}, "puppetdbSubnetIds is set but puppetdbUrls is not"},
		{map[string]interface{}{"puppetdbUrls": "http://puppetdb.example.com:8080"}, "http:// is refused on AWS"},
		{map[string]interface{}{"puppetdbUrls": url + ",http://127.0.0.1:8080"}, "http:// is refused on AWS"},
		{map[string]interface{}{"puppetdbUrls": "puppetdb.example.com:8081"}, "want https://HOST[:PORT]"},
		{map[string]interface{}{"puppetdbUrls": "https://user:pw@puppetdb.example.com"}, "without credentials"},
		{map[string]interface{}{"puppetdbUrls": url, "puppetdbCa": ca, "puppetdbCaSecret": testCAARN}, "not both"},
		{map[string]interface{}{"puppetdbUrls": url, "puppetdbCa": "not a certificate"}, "puppetdbCa: want PEM certificates"},
		{map[string]interface{}{"puppetdbUrls": url, "puppetdbCa": strings.Repeat(ca, 7)}, "put it in a secret"},
		{map[string]interface{}{"puppetdbUrls": url, "puppetdbCa": strings.ReplaceAll(ca, "CERTIFICATE", "PRIVATE KEY")}, "certificates only"},
		{map[string]interface{}{"puppetdbUrls": url, "puppetdbIdentitySecret": "compilefarm/dev/puppetdb-client"}, "complete ARN"},
		{map[string]interface{}{"puppetdbUrls": url, "puppetdbCaSecret": strings.TrimSuffix(testCAARN, "-XyZ789")}, "complete ARN"},
		{map[string]interface{}{"puppetdbUrls": url, "puppetdbQueryRefresh": "5"}, "not a duration"},
		{map[string]interface{}{"puppetdbUrls": url, "puppetdbQueryRefresh": "1s"}, "want 10s to 24h"},
		{map[string]interface{}{"puppetdbUrls": url, "puppetdbSubnetIds": "subnet-0123456789abcdef0"}, "puppetdbVpcId"},
		{map[string]interface{}{"puppetdbUrls": url, "puppetdbVpcId": "vpc-0123456789abcdef0"}, "go with puppetdbSubnetIds"},
		{map[string]interface{}{"puppetdbUrls": url, "puppetdbVpcId": "vpc-0123456789abcdef0", "puppetdbSubnetIds": "sub-1"}, "not a subnet id"},
		{map[string]interface{}{"puppetdbUrls": url, "puppetdbVpcId": "vpc-0123456789abcdef0", "puppetdbSubnetIds": "subnet-0123456789abcdef0",
			"puppetdbSecurityGroupId": "default"}, "not a security group id"},
		{map[string]interface{}{"puppetdbUrls": url, "puppetdbVpcId": "vpc-0123456789abcdef0", "puppetdbSubnetIds": "subnet-0123456789abcdef0",
			"compileFunction": "false"}, "compileFunction is false"},
		{map[string]interface{}{"puppetdbUrls": url, "storeconfigs": "puppetdb"}, "storeconfigs puppetdb needs puppetdbIdentitySecret"},
	} {
		_, err := configFrom(t, bad.ctx)
		if err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("context %v: error %v, want one saying %q", bad.ctx, err, bad.want)
		}
	}
	// storeconfigs puppetdb without the compile function: the fleet's
	// front door certificate is enough.
	if _, err := configFrom(t, map[string]interface{}{"puppetdbUrls": url, "storeconfigs": "puppetdb", "compileFunction": "false"}); err != nil {
		t.Errorf("storeconfigs puppetdb, compileFunction false: %v", err)
	}
}

// Secrets and URLs of the PuppetDB tests.
const (
	testIdentityARN = "arn:aws:secretsmanager:us-east-1:123456789012:secret:compilefarm/dev/puppetdb-client-AbCd12"
	testCAARN       = "arn:aws:secretsmanager:us-east-1:123456789012:secret:site/puppetdb-ca-XyZ789"
	testURLs        = "https://puppetdb.example.com:8081,https://puppetdb2.example.com"
)

var caPEM string

// testCAPEM is a self-signed CA certificate (made once per run).
func testCAPEM(t *testing.T) string {
	t.Helper()
	if caPEM != "" {
		return caPEM
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "Puppet CA: site"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	caPEM = string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
	return caPEM
}

// obsoleteFeatureFlags are the flags the CDK CLI leaves out of its count
// of unconfigured ones (aws-cdk's lib/commands/flags/obsolete-flags.js):
// they no longer do anything in aws-cdk-lib v2.
var obsoleteFeatureFlags = map[string]bool{
	"@aws-cdk/core:enableStackNameDuplicates": true,
	"@aws-cdk/aws-s3:grantWriteWithoutAcl":    true,
	"@aws-cdk/aws-kms:defaultKeyPolicies":     true,
}

// TestFeatureFlags: infra/cdk.json sets every feature flag of the pinned
// aws-cdk-lib to its recommended value, so `cdk synth` prints no "N feature
// flags are not configured" and no flag is left to flip once a stack
// exists (flipping one then can replace resources). It reads the flag
// report aws-cdk-lib writes into the cloud assembly and applies the CLI's
// own rule (FlagOperations.filterNeedsAttention: not configured, and the
// unconfigured behaviour is not the recommended value); a configured flag
// must hold the recommended value.
func TestFeatureFlags(t *testing.T) {
	s := dev(t)
	b, err := os.ReadFile(filepath.Join(s.out, "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	var manifest struct {
		Artifacts map[string]struct {
			Type       string `json:"type"`
			Properties struct {
				Flags map[string]struct {
					RecommendedValue        interface{}            `json:"recommendedValue"`
					UserValue               interface{}            `json:"userValue"`
					UnconfiguredBehavesLike map[string]interface{} `json:"unconfiguredBehavesLike"`
				} `json:"flags"`
			} `json:"properties"`
		} `json:"artifacts"`
	}
	if err := json.Unmarshal(b, &manifest); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, a := range manifest.Artifacts {
		if a.Type != "cdk:feature-flag-report" {
			continue
		}
		for name, f := range a.Properties.Flags {
			n++
			if obsoleteFeatureFlags[name] {
				continue
			}
			if f.UserValue == nil {
				unconfigured := f.UnconfiguredBehavesLike["v2"]
				if unconfigured == nil {
					unconfigured = false
				}
				if !reflect.DeepEqual(unconfigured, f.RecommendedValue) {
					t.Errorf("feature flag %s is not set in infra/cdk.json (recommended: %s, unset behaves like %s)",
						name, jsonString(f.RecommendedValue), jsonString(unconfigured))
				}
				continue
			}
			if !reflect.DeepEqual(f.UserValue, f.RecommendedValue) {
				t.Errorf("infra/cdk.json sets feature flag %s to %s, recommended: %s", name, jsonString(f.UserValue), jsonString(f.RecommendedValue))
			}
		}
	}
	if n < 50 {
		t.Errorf("the cloud assembly's feature flag report has %d flags: is it still written (aws-cdk-lib's cdk:feature-flag-report)?", n)
	}
}

// TestFargateSizes (D7): a CPU/memory pair Fargate does not offer fails at
// synth, naming the memory sizes the CPU allows, not at deploy.
func TestFargateSizes(t *testing.T) {
	for _, ok := range [][2]string{{"256", "512"}, {"256", "2048"}, {"512", "4096"}, {"1024", "8192"}, {"2048", "16384"}, {"4096", "30720"},
		{"8192", "16384"}, {"8192", "20480"}, {"8192", "61440"}, {"16384", "32768"}, {"16384", "122880"}} {
		if _, err := configFrom(t, map[string]interface{}{"fleetCpu": ok[0], "fleetMemoryMiB": ok[1]}); err != nil {
			t.Errorf("fleetCpu %s, fleetMemoryMiB %s: %v", ok[0], ok[1], err)
		}
	}
	for _, bad := range []struct{ cpu, mem, want string }{
		{"1024", "1024", "fleetCpu 1024 allows fleetMemoryMiB 2048, 3072, 4096, 5120, 6144, 7168, 8192"},
		{"256", "3072", "fleetCpu 256 allows fleetMemoryMiB 512, 1024, 2048"},
		{"2048", "4500", "fleetCpu 2048 allows fleetMemoryMiB 4096, 5120,"},
		{"8192", "18432", "fleetCpu 8192 allows fleetMemoryMiB 16384, 20480, 24576"}, // 4 GB steps
		{"1000", "2048", "fleetCpu 1000: Fargate offers 256, 512, 1024, 2048, 4096, 8192, 16384"},
	} {
		_, err := configFrom(t, map[string]interface{}{"fleetCpu": bad.cpu, "fleetMemoryMiB": bad.mem})
		if err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("fleetCpu %s, fleetMemoryMiB %s: error %v, want one saying %q", bad.cpu, bad.mem, err, bad.want)
		}
	}
}

// TestNetworkConfig: allowedSources, internal and privateLinkPrincipals,
// and the synth errors: a protected stage with a fleet names its sources
// (0.0.0.0/0 only when said), sources are IPv4 CIDRs or prefix lists.
func TestNetworkConfig(t *testing.T) {
	ctx := map[string]interface{}{}
	for k, v := range protectedStage("prd") {
		ctx[k] = v
	}
	ctx["internal"], ctx["privateLinkPrincipals"] = "true", "arn:aws:iam::210987654321:root, arn:aws:iam::210987654321:role/net/farm-consumer"
	c, err := configFrom(t, ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(c.AllowedSources, []string{"203.0.113.0/24", "pl-0123456789abcdef0"}) || !c.Internal ||
		!reflect.DeepEqual(c.PrivateLinkPrincipals, []string{"arn:aws:iam::210987654321:root", "arn:aws:iam::210987654321:role/net/farm-consumer"}) {
		t.Errorf("network config %+v", c)
	}
	prd := func(kv ...string) map[string]interface{} {
		m := map[string]interface{}{}
		for k, v := range protectedStage("prd") {
			m[k] = v
		}
		delete(m, "allowedSources")
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	for _, bad := range []struct {
		ctx  map[string]interface{}
		want string
	}{
		{prd(), "stage prd is protected and its NLB needs allowedSources"},
		{prd("allowedSources", "10.0.0.1"), `allowedSources: "10.0.0.1": want an IPv4 CIDR`},
		{prd("allowedSources", "10.0.0.1/8"), "host bits set: did you mean 10.0.0.0/8?"},
		{prd("allowedSources", "2001:db8::/32"), "want an IPv4 CIDR"},
		{prd("allowedSources", "pl-xyz"), "want an IPv4 CIDR"},
		{prd("allowedSources", "0.0.0.0/0", "privateLinkPrincipals", "*"), "want an IAM principal's ARN"},
	} {
		if _, err := configFrom(t, bad.ctx); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("context %v: error %v, want one saying %q", bad.ctx, err, bad.want)
		}
	}
	// Said explicitly, the internet is a source; without a fleet there is
	// no NLB to restrict.
	for _, ok := range []map[string]interface{}{prd("allowedSources", "0.0.0.0/0"), prd("fleet", "false")} {
		if _, err := configFrom(t, ok); err != nil {
			t.Errorf("context %v: %v", ok, err)
		}
	}
}

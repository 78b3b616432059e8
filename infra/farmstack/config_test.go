package farmstack

import (
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/jsii-runtime-go"
)

func configFrom(t *testing.T, ctx map[string]interface{}) (Config, error) {
	t.Helper()
	app := awscdk.NewApp(&awscdk.AppProps{Context: &ctx, Outdir: jsii.String(t.TempDir())})
	return ConfigFromContext(app)
}

func TestConfigFromContext(t *testing.T) {
	c, err := configFrom(t, map[string]interface{}{})
	if err != nil || !reflect.DeepEqual(c, Defaults()) {
		t.Errorf("no context: %+v, %v; want the defaults", c, err)
	}
	c, err = configFrom(t, map[string]interface{}{
		"stage": "prod", "dnsAltNames": " puppet.example.com,,farm.example.com ", "urgentConcurrencyMin": "3", "urgentConcurrencyMax": 30.0,
		"bulkConcurrencyMin": "2", "bulkConcurrencyMax": "4", "compileMemoryMiB": "3008", "compileTimeoutSeconds": "600",
		"fleetDesiredCount": "12", "fleetCpu": "2048", "fleetMemoryMiB": "4096", "fleet": "true", "alarmEmail": "ops@example.com",
		"compileFunction": "false", "availabilityZones": "us-east-1a, us-east-1b", "awsEndpointURL": "http://compilefarm-localstack:4566",
	})
	if err != nil {
		t.Fatal(err)
	}
	want := Defaults()
	want.Stage, want.DNSAltNames = "prod", []string{"puppet.example.com", "farm.example.com"}
	want.UrgentConcurrencyMin, want.UrgentConcurrencyMax, want.BulkConcurrencyMin, want.BulkConcurrencyMax = 3, 30, 2, 4
	want.CompileMemoryMiB, want.CompileTimeoutSeconds = 3008, 600
	want.FleetDesiredCount, want.FleetMaxCount, want.FleetCPU, want.FleetMemoryMiB = 12, 12, 2048, 4096
	want.AlarmEmail = "ops@example.com"
	want.CompileFunction, want.AvailabilityZones = false, []string{"us-east-1a", "us-east-1b"}
	want.AWSEndpointURL = "http://compilefarm-localstack:4566"
	if !reflect.DeepEqual(c, want) {
		t.Errorf("got  %+v\nwant %+v", c, want)
	}
	if !c.Prod() {
		t.Error("stage prod is not Prod")
	}
	for _, bad := range []map[string]interface{}{
		{"stage": "Dev"}, {"stage": "dev_1"}, {"urgentConcurrencyMin": "1"}, {"bulkConcurrencyMax": "1001"},
		{"urgentConcurrencyMin": "10", "urgentConcurrencyMax": "5"}, {"compileTimeoutSeconds": "901"},
		{"compileMemoryMiB": "lots"}, {"fleet": "maybe"}, {"compileFunction": "no way"}, {"availabilityZones": "us-east-1a"}, {"fleetDesiredCount": "0"}, {"fleetDesiredCount": "5", "fleetMaxCount": "4"},
		{"awsEndpointURL": "compilefarm-localstack:4566"}, {"awsEndpointURL": "http://"},
	} {
		if _, err := configFrom(t, bad); err == nil {
			t.Errorf("context %v: no error", bad)
		}
	}
}

// TestStageInNames: the stage is in the stack's and the named resources'
// names, so stages can share an account.
func TestStageInNames(t *testing.T) {
	s := synth(t, map[string]string{"stage": "qa2"})
	if name := *s.stack.Stack.StackName(); name != "compilefarm-qa2" {
		t.Errorf("stack name %q", name)
	}
	for typ, key := range map[string]string{
		"AWS::DynamoDB::Table": "TableName", "AWS::SQS::Queue": "QueueName", "AWS::SecretsManager::Secret": "Name",
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
	keys := regexp.MustCompile(`(?:str|num|list|boolean)\("([A-Za-z]+)"`).FindAllStringSubmatch(string(src), -1)
	if len(keys) < 10 {
		t.Fatalf("found only %d context keys in config.go", len(keys))
	}
	for _, k := range keys {
		if !strings.Contains(string(readme), "`"+k[1]+"`") {
			t.Errorf("context key %s is not in infra/README.md", k[1])
		}
	}
}

package farmstack

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/compilefarm/compilefarm/pkg/scaling"
)

// TestCompileFunction: the image function from functions/compile/Dockerfile
// with exactly the environment functions/compile/main.go reads.
func TestCompileFunction(t *testing.T) {
	s := dev(t)
	_, fn := s.find(t, "AWS::Lambda::Function", "FunctionName", "compilefarm-dev-compile")
	if fn["PackageType"] != "Image" || !containsAll(jsonString(fn["Code"]), "ImageUri") {
		t.Errorf("compile function is not an image: PackageType %v, Code %s", fn["PackageType"], jsonString(fn["Code"]))
	}
	// arm64, and its image asset is built for linux/arm64
	// (functions/compile/Dockerfile builds for the platform it is given).
	if jsonString(fn["Architectures"]) != `["arm64"]` {
		t.Errorf("Architectures = %s, want arm64", jsonString(fn["Architectures"]))
	}
	manifests, _ := filepath.Glob(filepath.Join(s.out, "*.assets.json"))
	platforms := map[string]bool{}
	for _, m := range manifests {
		b, err := os.ReadFile(m)
		if err != nil {
			t.Fatal(err)
		}
		var assets struct {
			DockerImages map[string]struct {
				Source struct {
					DockerFile string `json:"dockerFile"`
					Platform   string `json:"platform"`
				} `json:"source"`
			} `json:"dockerImages"`
		}
		if err := json.Unmarshal(b, &assets); err != nil {
			t.Fatalf("%s: %v", m, err)
		}
		for _, a := range assets.DockerImages {
			if a.Source.DockerFile == "functions/compile/Dockerfile" {
				platforms[a.Source.Platform] = true
			}
		}
	}
	if len(platforms) != 1 || !platforms["linux/arm64"] {
		t.Errorf("the compile function's image asset is built for %v, want linux/arm64", platforms)
	}
	dockerfile, err := os.ReadFile(filepath.Join(repoRoot, "functions", "compile", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	if !containsAll(string(dockerfile), "ARG TARGETARCH", "GOARCH=$TARGETARCH") || strings.Contains(string(dockerfile), "GOARCH=amd64") {
		t.Error("functions/compile/Dockerfile does not build the bootstrap for the image's platform (GOARCH=$TARGETARCH)")
	}
	if num(fn["MemorySize"]) != 2048 || num(fn["Timeout"]) != 300 {
		t.Errorf("MemorySize/Timeout = %v/%v, want the defaults 2048/300", fn["MemorySize"], fn["Timeout"])
	}
	src, err := os.ReadFile(filepath.Join(repoRoot, "functions", "compile", "main.go"))
	if err != nil {
		t.Fatal(err)
	}
	reads := map[string]bool{}
	for _, m := range regexp.MustCompile(`"(COMPILEFARM_[A-Z0-9_]+)"`).FindAllStringSubmatch(string(src), -1) {
		reads[m[1]] = true
	}
	env := fn["Environment"].(map[string]interface{})["Variables"].(map[string]interface{})
	for k := range env {
		if !reads[k] {
			t.Errorf("the compile function gets %s, which functions/compile/main.go does not read", k)
		}
	}
	for _, k := range []string{"COMPILEFARM_BUCKET", "COMPILEFARM_NODES_TABLE", "COMPILEFARM_NODE_INDEX_TABLE", "COMPILEFARM_ENVIRONMENTS_TABLE",
		"COMPILEFARM_URGENT_QUEUE_URL", "COMPILEFARM_BULK_QUEUE_URL", "COMPILEFARM_MAX_RECEIVES", "COMPILEFARM_COMPILE_TIMEOUT"} {
		if !reads[k] {
			t.Errorf("functions/compile/main.go no longer reads %s", k)
		}
		if _, ok := env[k]; !ok {
			t.Errorf("the compile function does not get %s", k)
		}
	}
	if env["COMPILEFARM_COMPILE_TIMEOUT"] != "2m0s" {
		t.Errorf("COMPILEFARM_COMPILE_TIMEOUT = %v", env["COMPILEFARM_COMPILE_TIMEOUT"])
	}
	// The image assets' build contexts leave out what the builds do not need.
	dirs, _ := filepath.Glob(filepath.Join(s.out, "asset.*", "functions", "compile", "Dockerfile"))
	if len(dirs) == 0 {
		t.Errorf("no image asset with functions/compile/Dockerfile in %s", s.out)
	}
	for _, d := range dirs {
		root := filepath.Dir(filepath.Dir(filepath.Dir(d)))
		for _, ex := range []string{".git", ".tools", "infra", "bin", "go.mod"} {
			_, err := os.Stat(filepath.Join(root, ex))
			if present := err == nil; present != (ex == "go.mod") {
				t.Errorf("image asset %s: %s present = %v", root, ex, present)
			}
		}
	}
}

// TestEngineTimeout: a full batch of compiles, of either lane, fits in the
// function's timeout.
func TestEngineTimeout(t *testing.T) {
	for _, fnTimeout := range []int{60, 120, 300, 900} {
		e := EngineTimeout(fnTimeout)
		for _, l := range []scaling.Lane{scaling.Urgent, scaling.Bulk} {
			if e > 2*time.Minute || time.Duration(l.BatchSize)*e+30*time.Second > time.Duration(fnTimeout)*time.Second {
				t.Errorf("EngineTimeout(%d) = %s: %d compiles of the %s lane do not fit", fnTimeout, e, l.BatchSize, l.Name)
			}
		}
	}
}

// TestEventSourceMappings: one per lane, with partial batch responses,
// the lane's batching (pkg/scaling's, which the simulation models), the
// urgent lane at its maximum and the bulk lane at its minimum to start
// from.
func TestEventSourceMappings(t *testing.T) {
	s := synth(t, map[string]string{"urgentConcurrencyMax": "40", "bulkConcurrencyMin": "3", "bulkConcurrencyMax": "9"})
	esms := s.resources("AWS::Lambda::EventSourceMapping")
	if len(esms) != 2 {
		t.Fatalf("%d event source mappings, want 2", len(esms))
	}
	want := map[string]struct{ batch, window, conc float64 }{
		"urgent": {float64(scaling.Urgent.BatchSize), scaling.Urgent.BatchingWindow.Seconds(), 40},
		"bulk":   {float64(scaling.Bulk.BatchSize), scaling.Bulk.BatchingWindow.Seconds(), 3},
	}
	for lane, w := range want {
		qID, _ := s.find(t, "AWS::SQS::Queue", "QueueName", "compilefarm-dev-"+lane)
		found := false
		for id, r := range esms {
			p := props(r)
			if !containsAll(jsonString(p["EventSourceArn"]), `"`+qID+`"`) {
				continue
			}
			found = true
			if jsonString(p["FunctionResponseTypes"]) != `["ReportBatchItemFailures"]` {
				t.Errorf("%s (%s) FunctionResponseTypes = %s", lane, id, jsonString(p["FunctionResponseTypes"]))
			}
			if num(p["BatchSize"]) != w.batch {
				t.Errorf("%s BatchSize = %v, want %v", lane, p["BatchSize"], w.batch)
			}
			gotWindow := 0.0
			if v, ok := p["MaximumBatchingWindowInSeconds"]; ok {
				gotWindow = num(v)
			}
			if gotWindow != w.window {
				t.Errorf("%s MaximumBatchingWindowInSeconds = %v, want %v", lane, gotWindow, w.window)
			}
			sc, _ := p["ScalingConfig"].(map[string]interface{})
			if num(sc["MaximumConcurrency"]) != w.conc {
				t.Errorf("%s MaximumConcurrency = %v, want %v", lane, sc["MaximumConcurrency"], w.conc)
			}
		}
		if !found {
			t.Errorf("no event source mapping on the %s queue", lane)
		}
	}
}

// TestNoCompileFunction: compileFunction=false leaves out the compile
// function, its event sources and the scaler that steers them; the queues
// and their DLQ and age alarms stay.
func TestNoCompileFunction(t *testing.T) {
	s := synth(t, map[string]string{"compileFunction": "false", "fleet": "false"})
	for _, typ := range []string{"AWS::Lambda::EventSourceMapping", "AWS::Events::Rule", "AWS::Lambda::Permission"} {
		if n := len(s.resources(typ)); n != 0 {
			t.Errorf("compileFunction=false: %d %s", n, typ)
		}
	}
	for id, r := range s.resources("AWS::Lambda::Function") {
		p := props(r)
		if p["PackageType"] == "Image" || p["FunctionName"] == "compilefarm-dev-compile" || p["FunctionName"] == "compilefarm-dev-scaler" {
			t.Errorf("compileFunction=false: function %s %v", id, p["FunctionName"])
		}
	}
	for _, r := range s.resources("AWS::CloudWatch::Alarm") {
		if n, _ := props(r)["AlarmName"].(string); !strings.HasSuffix(n, "-dlq-not-empty") && !strings.HasSuffix(n, "-queue-age") {
			t.Errorf("compileFunction=false: alarm %s", n)
		}
	}
	if n := len(s.resources("AWS::SQS::Queue")); n != 4 {
		t.Errorf("compileFunction=false: %d queues", n)
	}
	outs := jsonString(s.json["Outputs"])
	if !containsAll(outs, "UrgentQueueUrl", "BulkQueueUrl", "CATable", "CAKmsKey") || containsAll(outs, "CompileFunction") {
		t.Errorf("compileFunction=false: outputs %s", outs)
	}
}

// TestCompileRelease (issue 23, D12): the compile function is released
// like code. Both event sources invoke the alias live on the function's
// current version (kept when a newer one comes); with compileDeployment
// canary (the default) CodeDeploy moves the alias, 10% for 10 minutes
// first, rolling back on the new version's Errors alarm, a failure or a
// stop; with all-at-once (and on the local stage) the stack update moves
// it and there is no CodeDeploy.
func TestCompileRelease(t *testing.T) {
	s := dev(t)
	fnID, _ := s.find(t, "AWS::Lambda::Function", "FunctionName", "compilefarm-dev-compile")
	versions := s.resources("AWS::Lambda::Version")
	versionID, version := firstID(versions)
	if len(versions) != 1 || !containsAll(jsonString(props(version)["FunctionName"]), fnID) || version["DeletionPolicy"] != "Retain" {
		t.Fatalf("versions %s, want one of the compile function, retained", jsonString(versions))
	}
	aliasID, alias := s.find(t, "AWS::Lambda::Alias", "Name", CompileAlias)
	if !containsAll(jsonString(alias["FunctionName"]), fnID) || jsonString(alias["FunctionVersion"]) != `{"Fn::GetAtt":["`+versionID+`","Version"]}` {
		t.Errorf("alias %s, want the compile function's current version", jsonString(alias))
	}
	// Both mappings invoke the alias; the scaler finds the bulk one by
	// its UUID and its ARN (TestScaler), whatever function it invokes.
	for lane, id := range eventSourceMappings(t, s) {
		if f := jsonString(props(s.resources("AWS::Lambda::EventSourceMapping")[id])["FunctionName"]); !containsAll(f, aliasID, ":"+CompileAlias) {
			t.Errorf("%s event source mapping invokes %s, not the alias", lane, f)
		}
	}

	update, _ := s.resources("AWS::Lambda::Alias")[aliasID]["UpdatePolicy"].(map[string]interface{})
	cd, _ := update["CodeDeployLambdaAliasUpdate"].(map[string]interface{})
	appID, _ := s.find(t, "AWS::CodeDeploy::Application", "ApplicationName", "compilefarm-dev-compile")
	groupID, group := s.find(t, "AWS::CodeDeploy::DeploymentGroup", "DeploymentGroupName", "compilefarm-dev-compile")
	if jsonString(cd["ApplicationName"]) != `{"Ref":"`+appID+`"}` || jsonString(cd["DeploymentGroupName"]) != `{"Ref":"`+groupID+`"}` {
		t.Errorf("the alias's UpdatePolicy %s is not the deployment group's", jsonString(update))
	}
	alarmID, alarm := s.find(t, "AWS::CloudWatch::Alarm", "AlarmName", "compilefarm-dev-compile-canary-errors")
	rb := jsonString(group["AutoRollbackConfiguration"])
	if group["DeploymentConfigName"] != "CodeDeployDefault.LambdaCanary10Percent10Minutes" ||
		!containsAll(jsonString(group["AlarmConfiguration"]), `"Enabled":true`, `{"Ref":"`+alarmID+`"}`) ||
		!containsAll(rb, `"Enabled":true`, "DEPLOYMENT_FAILURE", "DEPLOYMENT_STOP_ON_REQUEST", "DEPLOYMENT_STOP_ON_ALARM") {
		t.Errorf("deployment group %s", jsonString(group))
	}
	// The new version's Errors through the alias, as Lambda publishes
	// them: FunctionName, Resource NAME:live, ExecutedVersion.
	dims := jsonString(alarm["Dimensions"])
	if alarm["Namespace"] != "AWS/Lambda" || alarm["MetricName"] != "Errors" || alarm["Statistic"] != "Sum" || num(alarm["Threshold"]) != 0 ||
		alarm["ComparisonOperator"] != "GreaterThanThreshold" ||
		!containsAll(dims, `{"Name":"ExecutedVersion","Value":{"Fn::GetAtt":["`+versionID+`","Version"]}}`,
			`{"Name":"FunctionName","Value":{"Ref":"`+fnID+`"}}`, `{"Name":"Resource","Value":{"Fn::Join":[":",[{"Ref":"`+fnID+`"},"live"]]}}`) {
		t.Errorf("canary alarm %s", jsonString(alarm))
	}

	for _, ctx := range []map[string]string{{"compileDeployment": DeployAllAtOnce}, {"stage": "local"}} {
		a := synth(t, ctx)
		aliasID, _ := a.find(t, "AWS::Lambda::Alias", "Name", CompileAlias)
		if _, ok := a.resources("AWS::Lambda::Alias")[aliasID]["UpdatePolicy"]; ok {
			t.Errorf("%v: the alias has an UpdatePolicy", ctx)
		}
		for _, typ := range []string{"AWS::CodeDeploy::Application", "AWS::CodeDeploy::DeploymentGroup"} {
			if n := len(a.resources(typ)); n != 0 {
				t.Errorf("%v: %d %s", ctx, n, typ)
			}
		}
		for _, r := range a.resources("AWS::CloudWatch::Alarm") {
			if n, _ := props(r)["AlarmName"].(string); strings.HasSuffix(n, "-canary-errors") {
				t.Errorf("%v: alarm %s", ctx, n)
			}
		}
	}
	for _, bad := range []string{"blue-green", "Canary"} {
		if _, err := configFrom(t, map[string]interface{}{"compileDeployment": bad}); err == nil || !strings.Contains(err.Error(), "compileDeployment") {
			t.Errorf("compileDeployment=%s: %v", bad, err)
		}
	}
}

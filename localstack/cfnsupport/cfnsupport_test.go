package cfnsupport

import (
	"strings"
	"testing"
)

func TestCheck(t *testing.T) {
	tpl := []byte(`{"Resources": {
	  "Bucket": {"Type": "AWS::S3::Bucket"},
	  "Nodes": {"Type": "AWS::DynamoDB::Table", "Properties": {"PointInTimeRecoverySpecification": {"PointInTimeRecoveryEnabled": true}}},
	  "Scaler": {"Type": "AWS::Lambda::Function", "Properties": {"Runtime": "provided.al2023", "Architectures": ["arm64"], "Code": {"S3Bucket": "b", "S3Key": "k.zip"}}},
	  "Compile": {"Type": "AWS::Lambda::Function", "Properties": {"PackageType": "Image", "Code": {"ImageUri": "x"}}},
	  "Dash": {"Type": "AWS::CloudWatch::Dashboard"},
	  "Service": {"Type": "AWS::ECS::Service"},
	  "Retention": {"Type": "Custom::LogRetention"},
	  "Odd": {"Type": "AWS::Made::Up"}
	}}`)
	got := func(tier Tier) string {
		fs, err := Check(tier, tpl)
		if err != nil {
			t.Fatal(err)
		}
		var lines []string
		for _, f := range fs {
			lines = append(lines, f.String())
		}
		return strings.Join(lines, "\n")
	}
	free := got(Free)
	for _, want := range []string{
		"error: Compile (AWS::Lambda::Function): a container-image function",
		"warning: Dash (AWS::CloudWatch::Dashboard)",
		"error: Odd (AWS::Made::Up): not in LocalStack's documented",
		"error: Retention (Custom::LogRetention): needs LocalStack Pro",
		"error: Service (AWS::ECS::Service): needs LocalStack Pro",
	} {
		if !strings.Contains(free, want) {
			t.Errorf("free tier findings lack %q:\n%s", want, free)
		}
	}
	for _, ok := range []string{"Bucket", "Nodes", "Scaler"} {
		if strings.Contains(free, ": "+ok+" (") {
			t.Errorf("free tier flags %s:\n%s", ok, free)
		}
	}
	pro := got(Pro)
	if want := "warning: Dash (AWS::CloudWatch::Dashboard): not emulated by LocalStack; skipped (CFN_IGNORE_UNSUPPORTED_RESOURCE_TYPES=1)\nerror: Odd (AWS::Made::Up): not in LocalStack's documented CloudFormation resource types"; pro != want {
		t.Errorf("pro tier findings:\n%s\nwant:\n%s", pro, want)
	}
	fs, _ := Check(Pro, []byte(`{"Resources": {"S": {"Type": "AWS::EC2::Subnet", "Properties": {"AvailabilityZone": {"Fn::Select": [0, {"Fn::GetAZs": ""}]}}}}}`))
	if len(Errors(fs)) != 1 || !strings.Contains(fs[0].Problem, "Fn::GetAZs") {
		t.Errorf("Fn::GetAZs: %v", fs)
	}
}

func TestParseTier(t *testing.T) {
	for in, want := range map[string]Tier{"free": Free, "Community": Free, "pro": Pro, "base": Pro} {
		if got, err := ParseTier(in); err != nil || got != want {
			t.Errorf("ParseTier(%q) = %v, %v", in, got, err)
		}
	}
	if _, err := ParseTier("gold"); err == nil {
		t.Error("ParseTier(gold): no error")
	}
}

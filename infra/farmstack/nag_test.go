package farmstack

import (
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/aws-cdk-go/awscdk/v2/cxapi"
	"github.com/aws/jsii-runtime-go"
	"github.com/cdklabs/cdk-nag-go/cdknag/v2"
)

// nagContexts are the contexts the AWS Solutions pack runs on: between
// them every construct the stack can have.
func nagContexts(t *testing.T) map[string]map[string]string {
	return map[string]map[string]string{
		"dev":                 nil,
		"prod":                withAlarmEmail(protectedStage("prod")),
		"PuppetDB":            pdbFull(),
		"PuppetDB inline":     pdbInline(t),
		"PuppetDB own group":  {"puppetdbUrls": testURLs, "puppetdbVpcId": "vpc-0123456789abcdef0", "puppetdbSubnetIds": "subnet-0123456789abcdef0", "puppetdbSecurityGroupId": "sg-0123456789abcdef0"},
		"emulator endpoint":   {"awsEndpointURL": "http://localstack:4566"},
		"no fleet":            {"fleet": "false"},
		"no compile function": {"compileFunction": "false"},
		"local":               {"stage": "local", "fleet": "false", "compileFunction": "false"},
	}
}

type nagResult struct {
	stack *FarmStack
	lines []string
}

// nagSynths caches nagSynth's results: a synthesis with the pack takes
// seconds, and TestNag and TestNagSuppressionsUsed read the same ones.
var nagSynths = map[string]nagResult{}

// nagSynth synthesizes the stack with ctx and the AWS Solutions pack,
// with NagSuppressions (ApplyNag) if suppress, and returns its
// annotations: level, path and message, one a line.
func nagSynth(t *testing.T, ctx map[string]string, suppress bool) (*FarmStack, []string) {
	t.Helper()
	id := fmt.Sprint(ctx, suppress) // fmt sorts map keys
	if r, ok := nagSynths[id]; ok {
		return r.stack, r.lines
	}
	var stack *FarmStack
	var lines []string
	defer func() { nagSynths[id] = nagResult{stack, lines} }()
	stack, _ = newStack(t, ctx, "nag-")
	synthesize(t, ctx, func() {
		if suppress {
			ApplyNag(stack, true)
		} else {
			awscdk.Aspects_Of(stack.Stack).Add(cdknag.NewAwsSolutionsChecks(&cdknag.NagPackProps{Reports: jsii.Bool(false)}), nil)
		}
		ann := assertions.Annotations_FromStack(stack.Stack)
		any := assertions.Match_AnyValue()
		for _, msgs := range []*[]*cxapi.SynthesisMessage{
			ann.FindError(jsii.String("*"), any), ann.FindWarning(jsii.String("*"), any), ann.FindInfo(jsii.String("*"), any),
		} {
			for _, m := range *msgs {
				data, _ := m.Entry.Data.(string)
				lines = append(lines, fmt.Sprintf("%s %s %s", strings.ToLower(string(m.Level)), *m.Id, strings.TrimSpace(data)))
			}
		}
	})
	sort.Strings(lines)
	return stack, lines
}

// nagFinding is a cdk-nag annotation: an AwsSolutions rule's finding, a
// rule that failed to validate, or a suppressed one (info).
var nagFinding = regexp.MustCompile(`^(error|warning) (\S+) ((?:AwsSolutions-|CdkNagValidationFailure)\S*)`)

// TestNag runs cdk-nag's AWS Solutions pack on the stack in each of
// nagContexts: any error or warning it reports, that NagSuppressions does
// not accept with a reason, fails.
func TestNag(t *testing.T) {
	// The pack runs: without the suppressions there are findings.
	if _, lines := nagSynth(t, nil, false); !slices.ContainsFunc(lines, nagFinding.MatchString) {
		t.Errorf("the AWS Solutions pack reports nothing on a stack without suppressions: %v", lines)
	}
	for name, ctx := range nagContexts(t) {
		_, lines := nagSynth(t, ctx, true)
		for _, l := range lines {
			if nagFinding.MatchString(l) {
				t.Errorf("%s: cdk-nag: %s", name, l)
			}
		}
	}
}

// TestNagSuppressionsUsed: every suppression (each of its findings apart)
// suppresses a finding in one of nagContexts at least: one whose
// construct moved, or whose finding was fixed, must go.
func TestNagSuppressionsUsed(t *testing.T) {
	type key struct{ path, rule, finding string }
	used := map[[2]int]bool{} // suppression, finding (0 without AppliesTo)
	var all []NagSuppression
	suppressed := regexp.MustCompile(`^info (\S+) CdkNagSuppression(?:\[(.*?)\])?: (\S+) was triggered but suppressed`)
	for _, ctx := range nagContexts(t) {
		stack, lines := nagSynth(t, ctx, true)
		sups := NagSuppressions(stack) // the stage is in some findings
		all = sups
		prefix := "/" + *stack.Stack.StackName() + "/"
		seen := map[key]bool{}
		for _, l := range lines {
			if m := suppressed.FindStringSubmatch(l); m != nil {
				seen[key{strings.TrimPrefix(m[1], prefix), m[3], m[2]}] = true
			}
		}
		for i, n := range sups {
			if len(n.AppliesTo) == 0 {
				used[[2]int{i, 0}] = used[[2]int{i, 0}] || seen[key{n.Path, n.Rule, ""}]
			}
			for j, f := range n.AppliesTo {
				used[[2]int{i, j}] = used[[2]int{i, j}] || seen[key{n.Path, n.Rule, f}]
			}
		}
	}
	if len(all) == 0 {
		t.Fatal("no suppressions")
	}
	for i, n := range all {
		rule := n.Rule // the reason starts with the rule's name: "IAM5: ..."
		if rule == "CdkNagValidationFailure" && len(n.AppliesTo) == 1 {
			rule = n.AppliesTo[0]
		}
		if len(n.Reason) < 40 || !strings.HasPrefix(n.Reason, strings.TrimPrefix(rule, "AwsSolutions-")+" ") && !strings.HasPrefix(n.Reason, strings.TrimPrefix(rule, "AwsSolutions-")+":") {
			t.Errorf("%s %s: the reason must say why, starting with the rule's name: %q", n.Path, n.Rule, n.Reason)
		}
		findings := n.AppliesTo
		if len(findings) == 0 {
			findings = []string{""}
		}
		for j, f := range findings {
			if !used[[2]int{i, j}] {
				t.Errorf("suppression %s %s %q suppresses nothing in any context: remove it", n.Path, n.Rule, f)
			}
		}
	}
}

// TestWildcardResources: the only actions any role of the stack has on
// every resource ("*") are those that take no resource (the suppressions
// of IAM5 on "Resource::*" rest on it).
func TestWildcardResources(t *testing.T) {
	want := map[string][]string{
		"execution": {"ecr:GetAuthorizationToken"},
		"scaler":    {"cloudwatch:GetMetricData"},
	}
	for name, ctx := range map[string]map[string]string{"dev": nil, "PuppetDB": pdbFull()} {
		s := synth(t, ctx)
		compile, task, exec := s.roles(t)
		var scaler string
		for _, r := range s.resources("AWS::Lambda::Function") {
			if p := props(r); p["FunctionName"] == "compilefarm-dev-scaler" {
				scaler = getAttID(p["Role"])
			}
		}
		for role, id := range map[string]string{"compile": compile, "task": task, "execution": exec, "scaler": scaler} {
			if id == "" {
				t.Errorf("%s: no %s role", name, role)
				continue
			}
			var got []string
			for a, res := range s.grantsOf(t, id).actions {
				if slices.Contains(res, `"*"`) {
					got = append(got, a)
				}
			}
			sort.Strings(got)
			if !slices.Equal(got, want[role]) {
				t.Errorf("%s: %s role's actions on *: %v, want %v", name, role, got, want[role])
			}
		}
	}
}

package farmstack

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/compilefarm/compilefarm/localstack/cfnsupport"
)

// localStackGaps are findings of localstack/run.sh's check that the stack is
// known to have on a tier, each with what would close the gap: a resource
// type (a finding on a resource of that type), or for a template-wide
// finding (no resource) a word of its text, e.g. "Fn::GetAZs". They are
// logged, not failed; every other finding the check would stop a deploy on
// fails the test, and so does an entry that no longer matches anything
// (remove it then). Empty today: the stack fits both tiers.
var localStackGaps = map[cfnsupport.Tier]map[string]string{
	cfnsupport.Free: {},
	cfnsupport.Pro:  {},
}

// localStackContexts are the CDK contexts `localstack/run.sh deploy`
// synthesizes with for each tier (with AWS_REGION=us-east-1 and no
// LOCALSTACK_FLEET or LOCALSTACK_CDK_CONTEXT): TestLocalStackResourceTypes
// compares them with what `run.sh context` prints, so the two cannot drift.
var localStackContexts = map[cfnsupport.Tier]map[string]string{
	cfnsupport.Free: {"stage": "local", "fleet": "false", "compileFunction": "false"},
	cfnsupport.Pro: {"stage": "local", "fleet": "true", "compileFunction": "true",
		"availabilityZones": "us-east-1a,us-east-1b", "awsEndpointURL": "http://compilefarm-localstack:4566"},
}

// runShContext is what `localstack/run.sh context` prints for tier: the
// context deploy passes to cdklocal synth, as a map.
func runShContext(t *testing.T, tier string) map[string]string {
	t.Helper()
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Fatalf("bash is needed to read localstack/run.sh's context: %v", err)
	}
	cmd := exec.Command(bash, filepath.Join(repoRoot, "localstack", "run.sh"), "context")
	var env []string
	for _, kv := range os.Environ() {
		switch strings.SplitN(kv, "=", 2)[0] {
		case "LOCALSTACK_TIER", "LOCALSTACK_FLEET", "LOCALSTACK_CDK_CONTEXT", "AWS_REGION", "AWS_DEFAULT_REGION":
			continue
		}
		env = append(env, kv)
	}
	cmd.Env = append(env, "LOCALSTACK_TIER="+tier, "AWS_REGION=us-east-1")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("localstack/run.sh context (LOCALSTACK_TIER=%s): %v", tier, err)
	}
	ctx := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			t.Fatalf("localstack/run.sh context: line %q is not key=value", line)
		}
		if _, dup := ctx[k]; dup {
			t.Errorf("localstack/run.sh context: %s given twice", k)
		}
		ctx[k] = v
	}
	return ctx
}

// TestLocalStackResourceTypes: the stack synthesized with exactly the
// context localstack/run.sh deploy uses for each tier passes run.sh's own
// check (localstack/cfnsupport, from the resource tables of
// https://docs.localstack.cloud/aws/services/cloudformation/): no resource
// type the tier does not document, no container-image function on Free, no
// Fn::GetAZs. Every error finding fails, as it would stop the deploy;
// warnings (types LocalStack skips) are logged.
func TestLocalStackResourceTypes(t *testing.T) {
	for _, c := range []struct {
		tier cfnsupport.Tier
		name string // run.sh's LOCALSTACK_TIER
	}{{cfnsupport.Free, "free"}, {cfnsupport.Pro, "pro"}} {
		t.Run(c.name, func(t *testing.T) {
			ctx := localStackContexts[c.tier]
			if got := runShContext(t, c.name); !reflect.DeepEqual(got, ctx) {
				t.Fatalf("localstack/run.sh deploy synthesizes %s with\n  %v\nthis test with\n  %v\n(update localStackContexts to what run.sh passes)", c.name, got, ctx)
			}
			s := synth(t, ctx)
			b, err := json.Marshal(s.json)
			if err != nil {
				t.Fatal(err)
			}
			findings, err := cfnsupport.Check(c.tier, b)
			if err != nil {
				t.Fatal(err)
			}
			used := map[string]bool{}
			for _, f := range findings {
				if f.Warning {
					t.Logf("skipped by LocalStack: %s", f)
					continue
				}
				if gap, fix, ok := knownGap(c.tier, f); ok {
					used[gap] = true
					t.Logf("known gap: %s; to close it: %s", f, fix)
					continue
				}
				t.Errorf("run.sh deploy would stop on: %s (localstack/cfnsupport lists what LocalStack documents)", f)
			}
			for gap := range localStackGaps[c.tier] {
				if !used[gap] {
					t.Errorf("localStackGaps[%s] lists %q, which the stack no longer has: remove it", c.name, gap)
				}
			}
		})
	}
}

// knownGap returns the localStackGaps entry that covers finding f.
func knownGap(tier cfnsupport.Tier, f cfnsupport.Finding) (gap, fix string, ok bool) {
	for gap, fix := range localStackGaps[tier] {
		if (f.Type != "" && f.Type == gap) || (f.Type == "" && strings.Contains(f.Problem, gap)) {
			return gap, fix, true
		}
	}
	return "", "", false
}

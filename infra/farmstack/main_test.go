package farmstack

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/jsii-runtime-go"
)

// The tests synthesize the stack with the jsii runtime (node on PATH) and
// inspect the template: with assertions (whose failures panic, turned into
// t.Errorf by check) and by walking the template's JSON. They run serially
// (jsii is not safe for concurrent use) and share one synthesis per context.

var (
	repoRoot, scalerDir, outRoot string
	synths                       = map[string]*synthed{}
	// cdkContext is infra/cdk.json's "context": what the CDK CLI gives the
	// app on every synth (the feature flags, the stage blocks), so that the
	// tests read the template a deploy would get.
	cdkContext map[string]interface{}
)

func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	defer jsii.Close()
	var err error
	if repoRoot, err = filepath.Abs("../.."); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	scalerDir = filepath.Join(repoRoot, "infra", "assets", "scaler")
	// The scaler's bootstrap is built by `make synth`; a placeholder is
	// enough to synthesize (the asset is only hashed and copied). It is
	// ignored by git (infra/.gitignore).
	if err := os.MkdirAll(scalerDir, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if _, err := os.Stat(filepath.Join(scalerDir, "bootstrap")); os.IsNotExist(err) {
		placeholder := "#!/bin/sh\necho 'placeholder scaler bootstrap (infra tests): run make synth' >&2\nexit 1\n"
		if err := os.WriteFile(filepath.Join(scalerDir, "bootstrap"), []byte(placeholder), 0o755); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	if cdkContext, err = readCDKContext(filepath.Join(repoRoot, "infra", "cdk.json")); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if outRoot, err = os.MkdirTemp("", "farmstack-test-"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(outRoot)
	return m.Run()
}

// readCDKContext returns the "context" object of a cdk.json.
func readCDKContext(path string) (map[string]interface{}, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var f struct {
		Context map[string]interface{} `json:"context"`
	}
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return f.Context, nil
}

// withCDKContext returns cdk.json's context with ctx on top (as `cdk -c`
// values override cdk.json's).
func withCDKContext(ctx map[string]interface{}) map[string]interface{} {
	out := make(map[string]interface{}, len(cdkContext)+len(ctx))
	for k, v := range cdkContext {
		out[k] = v
	}
	for k, v := range ctx {
		out[k] = v
	}
	return out
}

// synthed is one synthesis of the stack.
type synthed struct {
	stack *FarmStack
	tpl   assertions.Template
	json  map[string]interface{}
	out   string // the cloud assembly directory
}

// synth returns the stack synthesized with the CDK context ctx on top of
// cdk.json's (cached).
func synth(t *testing.T, ctx map[string]string) *synthed {
	t.Helper()
	keys := make([]string, 0, len(ctx))
	for k := range ctx {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var id strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&id, "%s=%s;", k, ctx[k])
	}
	if s, ok := synths[id.String()]; ok {
		return s
	}
	var s *synthed
	stack, out := newStack(t, ctx, "out-")
	synthesize(t, ctx, func() {
		tpl := assertions.Template_FromStack(stack.Stack, nil)
		s = &synthed{stack: stack, tpl: tpl, json: *tpl.ToJSON(), out: out}
	})
	synths[id.String()] = s
	return s
}

// newStack declares the stack with the CDK context ctx on top of
// cdk.json's, as the CLI does, in an app whose cloud assembly goes to a new
// directory under outRoot named with prefix; it returns the stack and that
// directory. Nothing is synthesized yet.
func newStack(t *testing.T, ctx map[string]string, prefix string) (stack *FarmStack, out string) {
	t.Helper()
	out, err := os.MkdirTemp(outRoot, prefix)
	if err != nil {
		t.Fatal(err)
	}
	given := map[string]interface{}{}
	for k, v := range ctx {
		given[k] = v
	}
	if len(ctx) > 0 {
		// Only the default stack's synthesis stages the image assets'
		// build contexts (copies of the repository in cdk.out, which
		// TestDockerfiles and TestCompileFunction read); the other
		// contexts' assets point at the repository itself. Staging is most
		// of a synthesis's time and all of its disk writes.
		given[cxapiDisableAssetStaging] = true
	}
	appCtx := withCDKContext(given)
	synthesize(t, ctx, func() {
		app := awscdk.NewApp(&awscdk.AppProps{Outdir: jsii.String(out), Context: &appCtx})
		cfg, err := ConfigFromContext(app)
		if err != nil {
			t.Fatalf("config from %v: %v", ctx, err)
		}
		stack = NewFarmStack(app, Props{Config: cfg, RepoRoot: repoRoot, ScalerAssetDir: scalerDir})
	})
	return stack, out
}

// cxapiDisableAssetStaging is the CDK's context key that leaves asset
// sources where they are (cxapi.DISABLE_ASSET_STAGING_CONTEXT, what the
// SAM CLI sets).
const cxapiDisableAssetStaging = "aws:cdk:disable-asset-staging"

// synthesize runs f, which declares or synthesizes the stack with ctx,
// turning a panic of the CDK (a validation error) into a test failure.
func synthesize(t *testing.T, ctx map[string]string, f func()) {
	t.Helper()
	defer func() {
		if r := recover(); r != nil {
			t.Fatalf("synth with %v: %v", ctx, r)
		}
	}()
	f()
}

func dev(t *testing.T) *synthed { return synth(t, nil) }

// check runs an assertion, turning its panic into a test error.
func check(t *testing.T, what string, f func()) {
	t.Helper()
	defer func() {
		if r := recover(); r != nil {
			t.Errorf("%s: %v", what, r)
		}
	}()
	f()
}

// resources returns the resources of type typ: logical ID to resource.
func (s *synthed) resources(typ string) map[string]map[string]interface{} {
	out := map[string]map[string]interface{}{}
	for id, r := range s.json["Resources"].(map[string]interface{}) {
		r := r.(map[string]interface{})
		if r["Type"] == typ {
			out[id] = r
		}
	}
	return out
}

// props returns a resource's Properties.
func props(r map[string]interface{}) map[string]interface{} {
	p, _ := r["Properties"].(map[string]interface{})
	return p
}

// find returns the logical ID and properties of the one resource of type
// typ whose property key equals value.
func (s *synthed) find(t *testing.T, typ, key, value string) (string, map[string]interface{}) {
	t.Helper()
	for id, r := range s.resources(typ) {
		if p := props(r); p != nil && p[key] == value {
			return id, p
		}
	}
	t.Fatalf("no %s with %s=%q", typ, key, value)
	return "", nil
}

// jsonString is v as JSON, for searching references in it.
func jsonString(v interface{}) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// num reads a template number (JSON decodes numbers as float64).
func num(v interface{}) float64 {
	switch v := v.(type) {
	case float64:
		return v
	case int:
		return float64(v)
	case string:
		var f float64
		fmt.Sscan(v, &f)
		return f
	}
	return -1
}

// containsAll reports whether s contains every one of subs.
func containsAll(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

// The account and region of the protected stages in the tests.
const (
	testAccount = "123456789012"
	testRegion  = "eu-west-1"
)

// protectedStage is the context of a stage that keeps the safe defaults
// (retain, protect): what its block in infra/cdk.json would hold.
func protectedStage(stage string) map[string]string {
	return map[string]string{"stage": stage, "account": testAccount, "region": testRegion,
		"availabilityZones": testRegion + "a," + testRegion + "b", "allowedSources": "203.0.113.0/24,pl-0123456789abcdef0"}
}

// withAlarmEmail is ctx with an alarm subscription.
func withAlarmEmail(ctx map[string]string) map[string]string {
	ctx["alarmEmail"] = "ops@example.com"
	return ctx
}

// manifest returns the cloud assembly's manifest.json.
func (s *synthed) manifest(t *testing.T) map[string]interface{} {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(s.out, "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]interface{}
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func deref(s *string) string {
	if s == nil {
		return "<nil>"
	}
	return *s
}

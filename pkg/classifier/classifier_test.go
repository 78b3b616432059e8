package classifier

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/compilefarm/compilefarm/pkg/farm"
)

func TestParse(t *testing.T) {
	tests := []struct {
		name    string
		yaml    string
		want    Classification
		wantErr string
	}{
		{"list of classes", "classes:\n  - ntp\n  - role::web\n", Classification{Classes: []string{"ntp", "role::web"}}, ""},
		{"one class as a string", "classes: ntp\n", Classification{Classes: []string{"ntp"}}, ""},
		{"hash of classes", "classes:\n  ntp:\n    servers: [a, b]\n  motd:\n", Classification{Classes: map[string]any{
			"ntp": map[string]any{"servers": []any{"a", "b"}}, "motd": nil}}, ""},
		{"parameters keep number kinds", "parameters:\n  i: 1\n  f: 1.0\n  g: 2.5\n  b: true\n  n: ~\n  s: '1'\n",
			Classification{Parameters: map[string]any{"i": json.Number("1"), "f": json.Number("1.0"), "g": json.Number("2.5"),
				"b": true, "n": nil, "s": "1"}}, ""},
		{"environment", "environment: staging\n", Classification{Environment: "staging"}, ""},
		{"ruby symbol keys", "---\n:classes:\n- base\n:environment: production\n", Classification{Classes: []string{"base"}, Environment: "production"}, ""},
		{"unknown keys ignored", "classes: []\nfoo: bar\n", Classification{}, ""},
		{"anchors and merge keys", "base: &b\n  x: 1\nparameters:\n  <<: *b\n  y: 2\n",
			Classification{Parameters: map[string]any{"x": json.Number("1"), "y": json.Number("2")}}, ""},
		{"empty output", "  \n", Classification{}, "Could not find node 'n1.example.test'; cannot compile"},
		{"not yaml", "classes: [unclosed\n", Classification{}, "Could not load external node results for n1.example.test"},
		{"not a hash", "- a\n- b\n", Classification{}, "the output is a list, not a hash"},
		{"classes a number", "classes: 3\n", Classification{}, "classes is a number, not a list or a hash"},
		{"class list holds a hash", "classes:\n  - {a: 1}\n", Classification{}, "classes lists a hash"},
		{"class parameters not a hash", "classes:\n  ntp: 3\n", Classification{}, "the parameters of class ntp are a number"},
		{"parameters a list", "parameters: [a]\n", Classification{}, "parameters is a list, not a hash"},
		{"bad environment", "environment: Prod-1\n", Classification{}, "environment \"Prod-1\" must be"},
		{"environment a list", "environment: [a]\n", Classification{}, "environment is a list"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse("n1.example.test", []byte(tt.yaml))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !errors.Is(err, ErrFailed) {
					t.Fatalf("Parse = %+v, %v; want an ErrFailed error containing %q", got, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Parse = %#v\nwant %#v", got, tt.want)
			}
		})
	}
}

func TestExec(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a shell script as the classifier; skipped with -short")
	}
	script, err := filepath.Abs("testdata/enc.sh")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		command string
		node    string
		timeout time.Duration
		want    Classification
		wantErr string
	}{
		{"answer", script, "web.example.test", 0, Classification{Classes: []string{"role::web"},
			Parameters: map[string]any{"tier": "gold"}, Environment: "staging"}, ""},
		{"fixed arguments come before the certname", script + " --cmdb  prod", "args.example.test", 0,
			Classification{Parameters: map[string]any{"argv": "--cmdb prod args.example.test"}}, ""},
		{"non-zero exit shows stderr", script, "fail.example.test", 0, Classification{},
			"Failed to find fail.example.test via exec: Execution of '" + script + " fail.example.test' returned 3: no such node in the CMDB"},
		{"timeout", script, "slow.example.test", 300 * time.Millisecond, Classification{},
			"Execution of '" + script + " slow.example.test' did not finish within 300ms (killed)"},
		{"empty answer", script, "empty.example.test", 0, Classification{}, "Could not find node 'empty.example.test'; cannot compile"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, err := NewExec(tt.command, tt.timeout)
			if err != nil {
				t.Fatal(err)
			}
			got, err := e.Classify(context.Background(), tt.node)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !errors.Is(err, ErrFailed) {
					t.Fatalf("Classify = %+v, %v; want an ErrFailed error containing %q", got, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Classify = %#v\nwant %#v", got, tt.want)
			}
		})
	}
}

func TestNewExecRefuses(t *testing.T) {
	tests := []struct{ name, command, wantErr string }{
		{"empty", "  ", "no command given"},
		{"relative", "enc.sh", "must be an absolute path"},
		{"missing", "/nonexistent/enc", "no such file"},
		{"not executable", mustAbs(t, "classifier.go"), "is not an executable file"},
		{"directory", mustAbs(t, "testdata"), "is not an executable file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewExec(tt.command, 0)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("NewExec(%q) = %v, want an error containing %q", tt.command, err, tt.wantErr)
			}
		})
	}
	if _, err := NewExec("enc.sh", 0); !errors.Is(err, farm.ErrInvalid) {
		t.Errorf("a relative command: %v, want farm.ErrInvalid", err)
	}
}

func mustAbs(t *testing.T, p string) string {
	t.Helper()
	a, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// BenchmarkExecClassify measures what the classifier costs a check-in on
// top of the command's own work: a fork and exec of a shell script that
// prints a small answer, and parsing it.
func BenchmarkExecClassify(b *testing.B) {
	script, err := filepath.Abs("testdata/enc.sh")
	if err != nil {
		b.Fatal(err)
	}
	e, err := NewExec(script, 0)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	for b.Loop() {
		if _, err := e.Classify(ctx, "web.example.test"); err != nil {
			b.Fatal(err)
		}
	}
}

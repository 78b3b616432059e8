// Package classifier runs an external node classifier (ENC) with Puppet's
// external_nodes contract: the command gets the node's certname as its last
// argument and prints a YAML hash with the node's classes (a list of names,
// or a hash of class name to parameters), parameters (top-scope variables)
// and environment (which wins over the agent's).
package classifier

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/compilefarm/compilefarm/pkg/farm"
)

// ErrFailed matches (errors.Is) every error of a classification that
// failed: the command could not run, exited non-zero, timed out, or printed
// something that is not a classification.
var ErrFailed = errors.New("node classifier failed")

// failure is such an error. Its message is Puppet's for the same failure,
// with the command's standard error, and nothing else.
type failure struct{ msg string }

func (f *failure) Error() string        { return f.msg }
func (f *failure) Is(target error) bool { return target == ErrFailed }

func failf(format string, args ...any) error { return &failure{msg: fmt.Sprintf(format, args...)} }

// Classification is what a classifier says of one node.
type Classification struct {
	// Classes is nil, a []string of class names, or a map[string]any of
	// class name to its parameters (a map[string]any, or nil for none).
	Classes any `json:"classes,omitempty"`
	// Parameters are top-scope variables; they win over facts of the same
	// name, as Puppet's node parameters do.
	Parameters map[string]any `json:"parameters,omitempty"`
	// Environment, when set, is the node's environment whatever the agent
	// asks for.
	Environment string `json:"environment,omitempty"`
}

// DefaultTimeout bounds one run of the command.
const DefaultTimeout = 10 * time.Second

// maxOutput bounds what is kept of the command's standard output; more is
// an error. maxStderr bounds what is kept of its standard error.
const (
	maxOutput = 4 << 20
	maxStderr = 4 << 10
)

// Exec classifies nodes by running a command, as Puppet's exec node
// terminus does. It is safe for concurrent use: each Classify runs the
// command once, in its own process group, killed when the timeout passes or
// ctx ends.
type Exec struct {
	argv    []string
	timeout time.Duration
}

// NewExec checks command (Puppet's external_nodes setting: an absolute
// path to an executable, then fixed arguments, separated by spaces) and
// returns a classifier that runs it with at most timeout per node (0:
// DefaultTimeout).
func NewExec(command string, timeout time.Duration) (*Exec, error) {
	argv := strings.Fields(command)
	if len(argv) == 0 {
		return nil, fmt.Errorf("external node classifier: no command given: %w", farm.ErrInvalid)
	}
	if !filepath.IsAbs(argv[0]) {
		return nil, fmt.Errorf("external node classifier %q must be an absolute path, as Puppet's external_nodes: %w", argv[0], farm.ErrInvalid)
	}
	fi, err := os.Stat(argv[0])
	if err != nil {
		return nil, fmt.Errorf("external node classifier: %w", err)
	}
	if fi.IsDir() || fi.Mode().Perm()&0o111 == 0 {
		return nil, fmt.Errorf("external node classifier %s is not an executable file: %w", argv[0], farm.ErrInvalid)
	}
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	return &Exec{argv: argv, timeout: timeout}, nil
}

// String is the command, as Puppet shows it in errors.
func (e *Exec) String() string { return strings.Join(e.argv, " ") }

// Classify runs the command for certname and parses what it prints. Every
// failure wraps ErrFailed with Puppet's message for it; an empty answer is
// a failure too (Puppet cannot compile a node its classifier does not know).
func (e *Exec) Classify(ctx context.Context, certname string) (Classification, error) {
	if err := farm.ValidateCertname(certname); err != nil {
		return Classification{}, err
	}
	argv := append(append([]string(nil), e.argv...), certname)
	shown := strings.Join(argv, " ")
	ctx, cancel := context.WithTimeout(ctx, e.timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = time.Second
	stdout := &limited{max: maxOutput}
	stderr := &limited{max: maxStderr}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.Stdin = nil
	err := cmd.Run()
	failed := func(format string, args ...any) error {
		return failf("Failed to find %s via exec: Execution of '%s' "+format, append([]any{certname, shown}, args...)...)
	}
	switch {
	case ctx.Err() == context.DeadlineExceeded:
		return Classification{}, failed("did not finish within %s (killed)%s", e.timeout, stderr.suffix())
	case ctx.Err() != nil:
		return Classification{}, fmt.Errorf("classify %s: %w", certname, ctx.Err())
	case err != nil:
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return Classification{}, failed("returned %d%s", ee.ExitCode(), stderr.suffix())
		}
		return Classification{}, failed("failed: %v", err)
	case stdout.over:
		return Classification{}, failf("Could not load external node results for %s: more than %d bytes of output", certname, maxOutput)
	}
	return Parse(certname, stdout.b.Bytes())
}

// Parse reads a classifier's answer for certname, as Puppet's exec node
// terminus does: a YAML hash whose keys may be strings or Ruby symbols
// (":classes"); unknown keys are ignored. Errors wrap ErrFailed.
func Parse(certname string, out []byte) (Classification, error) {
	bad := func(format string, args ...any) error {
		return failf("Could not load external node results for %s: "+format, append([]any{certname}, args...)...)
	}
	if len(bytes.TrimSpace(out)) == 0 {
		return Classification{}, failf("Could not find node '%s'; cannot compile: the external node classifier printed nothing", certname)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(out, &doc); err != nil {
		return Classification{}, bad("%v", err)
	}
	root, err := plain(&doc)
	if err != nil {
		return Classification{}, bad("%v", err)
	}
	top, ok := root.(map[string]any)
	if !ok {
		return Classification{}, bad("the output is a %s, not a hash", kind(root))
	}
	var c Classification
	for k, v := range top {
		switch strings.TrimPrefix(k, ":") {
		case "classes":
			if c.Classes, err = classes(v); err != nil {
				return Classification{}, bad("%v", err)
			}
		case "parameters":
			if v == nil {
				continue
			}
			p, ok := v.(map[string]any)
			if !ok {
				return Classification{}, bad("parameters is a %s, not a hash", kind(v))
			}
			if len(p) > 0 {
				c.Parameters = p
			}
		case "environment":
			if v == nil {
				continue
			}
			s, ok := v.(string)
			if !ok {
				return Classification{}, bad("environment is a %s, not a string", kind(v))
			}
			if err := farm.ValidateEnvironment(s); err != nil {
				return Classification{}, bad("%v", err)
			}
			c.Environment = s
		}
	}
	return c, nil
}

// classes checks the classes value: nil, a list of names, or a hash of
// name to parameters (a hash or nothing).
func classes(v any) (any, error) {
	switch x := v.(type) {
	case nil:
		return nil, nil
	case string:
		return []string{x}, nil // Puppet::Node#initialize takes a single name too
	case []any:
		names := make([]string, 0, len(x))
		for _, e := range x {
			s, ok := e.(string)
			if !ok || s == "" {
				return nil, fmt.Errorf("classes lists a %s; class names are strings", kind(e))
			}
			names = append(names, s)
		}
		if len(names) == 0 {
			return nil, nil
		}
		return names, nil
	case map[string]any:
		for name, params := range x {
			if name == "" {
				return nil, fmt.Errorf("classes has an empty class name")
			}
			if _, ok := params.(map[string]any); !ok && params != nil {
				return nil, fmt.Errorf("the parameters of class %s are a %s, not a hash", name, kind(params))
			}
		}
		if len(x) == 0 {
			return nil, nil
		}
		return x, nil
	}
	return nil, fmt.Errorf("classes is a %s, not a list or a hash", kind(v))
}

// plain turns a YAML node into JSON-compatible values: maps with string
// keys (a leading ':' of a Ruby symbol dropped for the top-level keys
// only, by the caller), lists, strings, booleans, nil, and json.Number for
// numbers, so that an Integer stays an Integer and a Float a Float.
func plain(n *yaml.Node) (any, error) {
	switch n.Kind {
	case yaml.DocumentNode:
		if len(n.Content) == 0 {
			return nil, nil
		}
		return plain(n.Content[0])
	case yaml.AliasNode:
		return plain(n.Alias)
	case yaml.SequenceNode:
		out := make([]any, 0, len(n.Content))
		for _, c := range n.Content {
			v, err := plain(c)
			if err != nil {
				return nil, err
			}
			out = append(out, v)
		}
		return out, nil
	case yaml.MappingNode:
		out := make(map[string]any, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Tag == "!!merge" {
				merged, err := plain(v)
				if err != nil {
					return nil, err
				}
				m, ok := merged.(map[string]any)
				if !ok {
					return nil, fmt.Errorf("line %d: a merge key needs a hash", k.Line)
				}
				for mk, mv := range m {
					if _, set := out[mk]; !set {
						out[mk] = mv
					}
				}
				continue
			}
			if k.Kind != yaml.ScalarNode {
				return nil, fmt.Errorf("line %d: keys must be strings", k.Line)
			}
			val, err := plain(v)
			if err != nil {
				return nil, err
			}
			out[k.Value] = val
		}
		return out, nil
	case yaml.ScalarNode:
		switch n.ShortTag() {
		case "!!null":
			return nil, nil
		case "!!bool":
			var b bool
			if err := n.Decode(&b); err != nil {
				return nil, fmt.Errorf("line %d: %w", n.Line, err)
			}
			return b, nil
		case "!!int":
			var i int64
			if err := n.Decode(&i); err != nil {
				return nil, fmt.Errorf("line %d: %w", n.Line, err)
			}
			return json.Number(strconv.FormatInt(i, 10)), nil
		case "!!float":
			var f float64
			if err := n.Decode(&f); err != nil {
				return nil, fmt.Errorf("line %d: %w", n.Line, err)
			}
			s := strconv.FormatFloat(f, 'g', -1, 64)
			if !strings.ContainsAny(s, ".eEn") { // keep 1.0 a Float; NaN and Inf are not JSON
				s += ".0"
			}
			if strings.ContainsAny(s, "nN") {
				return nil, fmt.Errorf("line %d: %q is not a number Puppet data can hold", n.Line, n.Value)
			}
			return json.Number(s), nil
		default: // strings, timestamps and other tags: the text
			return n.Value, nil
		}
	}
	return nil, fmt.Errorf("line %d: unsupported YAML", n.Line)
}

func kind(v any) string {
	switch v.(type) {
	case nil:
		return "nothing"
	case string:
		return "string"
	case []any:
		return "list"
	case map[string]any:
		return "hash"
	case bool:
		return "boolean"
	case json.Number:
		return "number"
	}
	return fmt.Sprintf("%T", v)
}

// limited keeps at most max bytes written to it and notes when more came.
type limited struct {
	b    bytes.Buffer
	max  int
	over bool
}

func (l *limited) Write(p []byte) (int, error) {
	if room := l.max - l.b.Len(); room < len(p) {
		l.over = true
		l.b.Write(p[:max(room, 0)])
		return len(p), nil
	}
	return l.b.Write(p)
}

// suffix renders what the command wrote to standard error for an error
// message: ": <stderr>" or nothing.
func (l *limited) suffix() string {
	s := strings.TrimSpace(l.b.String())
	if s == "" {
		return ""
	}
	if l.over {
		s += " ..."
	}
	return ": " + s
}

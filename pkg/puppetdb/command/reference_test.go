package command

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// The reference: testdata/reference.rb runs the PuppetDB termini of
// Debian's puppet-terminus-puppetdb (what Puppet Server sends PuppetDB) on
// the same input, and the tests compare its payloads with this package's,
// apart from producer_timestamp and producer.

const refHint = "ruby, puppet, Debian's puppet modules and puppet-terminus-puppetdb are needed: make deps puppetdb-deps"

// reference is the testdata/reference.rb process the package's tests
// share (loading Puppet costs seconds).
type reference struct {
	mu     sync.Mutex
	cmd    *exec.Cmd
	in     io.WriteCloser
	out    *bufio.Reader
	stderr bytes.Buffer
}

var shared struct {
	once sync.Once
	dir  string
	ref  *reference
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if r := shared.ref; r != nil {
		r.in.Close()
		if err := r.cmd.Wait(); err != nil {
			fmt.Fprintf(os.Stderr, "reference: %v\n%s", err, r.stderr.String())
			code = 1
		}
	}
	if shared.dir != "" {
		os.RemoveAll(shared.dir)
	}
	if engine.eng != nil {
		if err := engine.eng.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "close the farm's engine:", err)
			code = 1
		}
	}
	if engine.dir != "" {
		os.RemoveAll(engine.dir)
	}
	os.Exit(code)
}

// newReference returns the shared reference, started on first use.
func newReference(t *testing.T) *reference {
	t.Helper()
	if testing.Short() {
		t.Skip("runs Ruby Puppet and its PuppetDB termini; skipped with -short")
	}
	shared.once.Do(func() { shared.ref, shared.err = startReference() })
	if shared.err != nil {
		t.Fatalf("start the reference: %v (%s)", shared.err, refHint)
	}
	return shared.ref
}

func startReference() (*reference, error) {
	if _, err := os.Stat("/usr/lib/ruby/vendor_ruby/puppet/reports/puppetdb.rb"); err != nil {
		return nil, fmt.Errorf("the PuppetDB termini are missing: %w", err)
	}
	var err error
	if shared.dir, err = os.MkdirTemp("", "puppetdb-command-reference-"); err != nil {
		return nil, err
	}
	r := &reference{}
	r.cmd = exec.Command("ruby", "testdata/reference.rb", shared.dir)
	r.cmd.Stderr = &r.stderr
	if r.in, err = r.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	stdout, err := r.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	r.out = bufio.NewReaderSize(stdout, 1<<20)
	return r, r.cmd.Start()
}

// payload asks the reference for the payload of req.
func (r *reference) payload(t *testing.T, req any) []byte {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	line, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.in.Write(append(line, '\n')); err != nil {
		t.Fatalf("write to the reference: %v\n%s", err, r.stderr.String())
	}
	answer, err := r.out.ReadBytes('\n')
	if err != nil {
		t.Fatalf("read from the reference: %v\n%s", err, r.stderr.String())
	}
	var resp struct {
		Payload   *string  `json:"payload"`
		Error     string   `json:"error"`
		Backtrace []string `json:"backtrace"`
	}
	if err := json.Unmarshal(answer, &resp); err != nil {
		t.Fatalf("reference answered %q: %v", answer, err)
	}
	if resp.Payload == nil {
		t.Fatalf("reference: %s\n%s", resp.Error, strings.Join(resp.Backtrace, "\n"))
	}
	return []byte(*resp.Payload)
}

// referenceError asks the reference for the payload of req, which it must
// refuse, and returns its error.
func (r *reference) error(t *testing.T, req any) string {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	line, _ := json.Marshal(req)
	if _, err := r.in.Write(append(line, '\n')); err != nil {
		t.Fatalf("write to the reference: %v", err)
	}
	answer, err := r.out.ReadBytes('\n')
	if err != nil {
		t.Fatalf("read from the reference: %v", err)
	}
	var resp struct {
		Payload *string `json:"payload"`
		Error   string  `json:"error"`
	}
	if err := json.Unmarshal(answer, &resp); err != nil {
		t.Fatalf("reference answered %q: %v", answer, err)
	}
	if resp.Payload != nil {
		t.Fatalf("the reference accepted what it should refuse: %.300s", *resp.Payload)
	}
	return resp.Error
}

// sensitiveID is the object id Ruby writes into a stringified Sensitive.
var sensitiveID = regexp.MustCompile(`#<Sensitive \[value redacted\]:\d+>`)

// comparable decodes a payload for comparison: producer_timestamp and
// producer removed, numbers by value, Sensitive object ids blanked.
func comparable(t *testing.T, payload []byte) map[string]any {
	t.Helper()
	var v map[string]any
	dec := json.NewDecoder(bytes.NewReader(sensitiveID.ReplaceAll(payload, []byte("#<Sensitive [value redacted]:N>"))))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("payload is not JSON: %v\n%.500s", err, payload)
	}
	delete(v, "producer_timestamp")
	delete(v, "producer")
	return normalizeNumbers(v).(map[string]any)
}

func normalizeNumbers(v any) any {
	switch v := v.(type) {
	case json.Number:
		if isIntegerLiteral(string(v)) {
			return "int:" + string(v)
		}
		f, _ := v.Float64()
		return fmt.Sprintf("float:%g", f)
	case []any:
		for i := range v {
			v[i] = normalizeNumbers(v[i])
		}
	case map[string]any:
		for k := range v {
			v[k] = normalizeNumbers(v[k])
		}
	}
	return v
}

// sortBy sorts the list at key of v by each element's JSON text, or by
// the fields named.
func sortBy(v map[string]any, key string, fields ...string) {
	list, _ := v[key].([]any)
	text := func(e any) string {
		if len(fields) == 0 {
			b, _ := json.Marshal(e)
			return string(b)
		}
		var parts []string
		for _, f := range fields {
			b, _ := json.Marshal(e.(map[string]any)[f])
			parts = append(parts, string(b))
		}
		return strings.Join(parts, "\x00")
	}
	sort.SliceStable(list, func(i, j int) bool { return text(list[i]) < text(list[j]) })
}

// diff lists where got and want differ, by path.
func diff(path string, got, want any) []string {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			break
		}
		var out []string
		keys := map[string]bool{}
		for k := range w {
			keys[k] = true
		}
		for k := range g {
			keys[k] = true
		}
		for _, k := range sortedKeys(toAny(keys)) {
			gv, gok := g[k]
			wv, wok := w[k]
			switch {
			case !gok:
				out = append(out, fmt.Sprintf("%s.%s: missing, want %s", path, k, short(wv)))
			case !wok:
				out = append(out, fmt.Sprintf("%s.%s: %s, want none", path, k, short(gv)))
			default:
				out = append(out, diff(path+"."+k, gv, wv)...)
			}
		}
		return out
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			break
		}
		var out []string
		for i := range w {
			out = append(out, diff(fmt.Sprintf("%s[%d]", path, i), g[i], w[i])...)
		}
		return out
	}
	if !reflect.DeepEqual(got, want) {
		return []string{fmt.Sprintf("%s: %s, want %s", path, short(got), short(want))}
	}
	return nil
}

func toAny(m map[string]bool) map[string]any {
	out := make(map[string]any, len(m))
	for k := range m {
		out[k] = true
	}
	return out
}

func short(v any) string {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
	b := bytes.TrimSpace(buf.Bytes())
	if len(b) > 300 {
		return string(b[:300]) + "..."
	}
	return string(b)
}

// sameAsReference fails t with the differences between got and want.
func sameAsReference(t *testing.T, got, want map[string]any) {
	t.Helper()
	if d := diff("payload", got, want); len(d) > 0 {
		if len(d) > 40 {
			d = append(d[:40], fmt.Sprintf("... and %d more", len(d)-40))
		}
		t.Errorf("differs from the terminus's payload:\n%s", strings.Join(d, "\n"))
	}
}

// readFile reads a file of the repository's recordings.
func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// recorded is the repository's recordings of a real agent and server.
var recorded = filepath.Join("..", "..", "..", "testdata", "puppet-protocol")

// now is the producer timestamp of the tests' payloads.
var now = time.Date(2026, 11, 21, 22, 30, 0, 123456789, time.UTC)

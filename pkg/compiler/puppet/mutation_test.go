package puppet

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/compilefarm/compilefarm/internal/corpus"
	"github.com/compilefarm/compilefarm/pkg/compiler"
	"github.com/compilefarm/compilefarm/pkg/facts"
)

// The mutation test proves that recording misses no read: it compiles an
// environment of real Debian modules with a real agent's facts, then changes
// every fact leaf that the recorded reads say the catalog cannot depend on
// (facts.Changed is false), recompiles, and requires the very same catalog.

// debianModules is where Debian's puppet-module-* packages install modules
// (scripts/install-deps.sh installs the ones below).
const debianModules = "/usr/share/puppet/modules"

var mutationModules = []string{"stdlib", "ntp", "apache", "concat", "apt", "mysql", "inifile", "translate", "cron_core", "logrotate"}

const mutationCert = "agent1.example.test"

// mutationEnv builds the test environment in a fresh environmentpath:
// testdata/mutation/production plus copies of the Debian modules.
func mutationEnv(t testing.TB) string {
	t.Helper()
	envpath := t.TempDir()
	env := filepath.Join(envpath, "production")
	if err := os.CopyFS(env, os.DirFS("testdata/mutation/production")); err != nil {
		t.Fatal(err)
	}
	for _, m := range mutationModules {
		src, err := filepath.EvalSymlinks(filepath.Join(debianModules, m))
		if err != nil {
			t.Fatalf("Debian puppet module %q is not installed (%v): run scripts/install-deps.sh", m, err)
		}
		if err := os.CopyFS(filepath.Join(env, "modules", m), os.DirFS(src)); err != nil {
			t.Fatalf("copy module %s: %v", m, err)
		}
	}
	return envpath
}

var (
	versionRE     = regexp.MustCompile(`"version":\d+`)
	catalogUUIDRE = regexp.MustCompile(`"catalog_uuid":"[^"]*"`)
)

// blankVolatile blanks what differs between two compiles of the same
// inputs: the catalog version (a timestamp) and catalog_uuid.
func blankVolatile(b []byte) []byte {
	b = versionRE.ReplaceAll(b, []byte(`"version":0`))
	return catalogUUIDRE.ReplaceAll(b, []byte(`"catalog_uuid":""`))
}

// firstDiff shows where two catalogs first differ.
func firstDiff(a, b []byte) string {
	i := 0
	for i < len(a) && i < len(b) && a[i] == b[i] {
		i++
	}
	from := max(0, i-120)
	return fmt.Sprintf("at byte %d:\n  base:    …%s…\n  mutated: …%s…", i, a[from:min(len(a), i+120)], b[from:min(len(b), i+120)])
}

// leaf is a fact leaf: a scalar, an array, or an empty hash.
type leaf struct {
	path  []string
	value any
}

func (l leaf) String() string { return strings.Join(l.path, ".") }

// factLeaves lists the leaves of v in a stable order.
func factLeaves(v map[string]any, prefix []string) []leaf {
	keys := make([]string, 0, len(v))
	for k := range v {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var out []leaf
	for _, k := range keys {
		p := append(slices.Clone(prefix), k)
		if m, ok := v[k].(map[string]any); ok && len(m) > 0 {
			out = append(out, factLeaves(m, p)...)
			continue
		}
		out = append(out, leaf{path: p, value: v[k]})
	}
	return out
}

// withPath returns a copy of values with path set to value, or deleted when
// del is true (copying only the hashes along the path).
func withPath(values map[string]any, path []string, value any, del bool) map[string]any {
	out := make(map[string]any, len(values))
	for k, v := range values {
		out[k] = v
	}
	k := path[0]
	if len(path) == 1 {
		if del {
			delete(out, k)
		} else {
			out[k] = value
		}
		return out
	}
	child, _ := out[k].(map[string]any)
	if child == nil {
		child = map[string]any{}
	}
	out[k] = withPath(child, path[1:], value, del)
	return out
}

// Mutations of a leaf.
type mutation int

const (
	changeValue mutation = iota
	changeType
	deleteLeaf
)

func (m mutation) String() string {
	return [...]string{"change value", "change type", "delete"}[m]
}

// newValue is a different value of the same JSON type.
func newValue(v any) any {
	switch x := v.(type) {
	case string:
		return x + "-mutated"
	case json.Number:
		if x == "0" || x == "-0" {
			return json.Number("1")
		}
		return json.Number(string(x) + "1") // 12 → 121, 0.52 → 0.521: same kind of number
	case bool:
		return !x
	case nil:
		return "mutated"
	case []any:
		return append(slices.Clone(x), "mutated")
	case map[string]any:
		return map[string]any{"mutated": "x"}
	default:
		panic(fmt.Sprintf("unexpected fact value %T", v))
	}
}

// newType is a value of another JSON type that renders alike where it can
// (2 → "2", true → "true").
func newType(v any) any {
	switch x := v.(type) {
	case string:
		return json.Number("42")
	case json.Number:
		return string(x)
	case bool:
		return fmt.Sprint(x)
	case nil:
		return json.Number("0")
	case []any:
		return map[string]any{"mutated": slices.Clone(x)}
	case map[string]any:
		return []any{}
	default:
		panic(fmt.Sprintf("unexpected fact value %T", v))
	}
}

func mutate(values map[string]any, l leaf, m mutation) map[string]any {
	switch m {
	case changeValue:
		return withPath(values, l.path, newValue(l.value), false)
	case changeType:
		return withPath(values, l.path, newType(l.value), false)
	default:
		return withPath(values, l.path, nil, true)
	}
}

// probe is one mutated compile.
type probe struct {
	what  string
	facts map[string]any
}

// mutationRun compiles one node of an environment with one engine.
type mutationRun struct {
	t        *testing.T
	e        *Engine
	envpath  string
	cert     string   // the node compiled
	modules  int      // how many modules the environment has, for the log
	rotation [2]int   // probe unread leaf j alone iff j%rotation[1] == rotation[0] (a node's share of a corpus)
	off      []string // recording hooks switched off
	base     []byte   // the catalog with the agent's facts, volatile fields blanked
	reads    *facts.ReadRecord
	compiles *atomic.Int64
}

func (r *mutationRun) compile(ctx context.Context, values map[string]any) ([]byte, *facts.ReadRecord, error) {
	r.compiles.Add(1)
	res, err := r.e.compile(ctx, compiler.Request{
		Certname: r.cert, Environment: "production", CodeID: "mutation",
		EnvironmentPath: r.envpath, Facts: values,
	}, r.off)
	if err != nil {
		return nil, nil, err
	}
	return blankVolatile(res.Catalog), res.Reads, nil
}

// start compiles the agent's facts on every worker (cold, then warm) and
// checks that the catalog and the reads are stable.
func (r *mutationRun) start(values map[string]any) {
	t := r.t
	t.Helper()
	workers := len(r.e.workers)
	type out struct {
		cat   []byte
		reads *facts.ReadRecord
		err   error
	}
	// Cold: each worker parses the environment once.
	first := make([]out, workers)
	var wg sync.WaitGroup
	for i := range first {
		wg.Go(func() {
			c, rd, err := r.compile(t.Context(), values)
			first[i] = out{c, rd, err}
		})
	}
	wg.Wait()
	for _, o := range first {
		if o.err != nil {
			t.Fatalf("compile with the agent's facts: %v", o.err)
		}
	}
	cat, reads, err := r.compile(t.Context(), values) // warm
	if err != nil {
		t.Fatalf("warm compile: %v", err)
	}
	if reads == nil {
		t.Fatal("the worker recorded no reads")
	}
	for i, o := range first {
		if !bytes.Equal(o.cat, cat) {
			t.Fatalf("recompiling with the same facts changed the catalog (compile %d) %s", i, firstDiff(o.cat, cat))
		}
		a, _ := json.Marshal(o.reads)
		b, _ := json.Marshal(reads)
		if !bytes.Equal(a, b) {
			t.Fatalf("cold and warm compiles read different facts:\n cold: %s\n warm: %s", a, b)
		}
	}
	if changed, err := facts.Changed(reads.Reads, values); err != nil || changed {
		t.Fatalf("facts.Changed(reads, same facts) = %v, %v; want false", changed, err)
	}
	r.base, r.reads = cat, reads
}

// run compiles the probes two at a time (one per worker) and returns those
// whose catalog differs from the base catalog (a compile error counts as a
// difference), with the difference.
func (r *mutationRun) run(probes []probe) map[string]string {
	ctx := r.t.Context()
	missed := map[string]string{}
	var mu sync.Mutex
	next := make(chan probe)
	var wg sync.WaitGroup
	for range len(r.e.workers) {
		wg.Go(func() {
			for p := range next {
				cat, _, err := r.compile(ctx, p.facts)
				var diff string
				switch {
				case err != nil:
					diff = "compile failed: " + err.Error()
				case !bytes.Equal(cat, r.base):
					diff = firstDiff(r.base, cat)
				default:
					continue
				}
				mu.Lock()
				missed[p.what] = diff
				mu.Unlock()
			}
		})
	}
	for _, p := range probes {
		next <- p
	}
	close(next)
	wg.Wait()
	return missed
}

// unread splits the leaves of values into those whose mutation m some
// read sees (facts.Changed reports it) and those whose mutation m none
// does. A leaf's value may be unread while its deletion is seen (a read of
// its parent's key set).
func unread(t *testing.T, reads []facts.Read, values map[string]any, m mutation) (covered, free []leaf) {
	t.Helper()
	for _, l := range factLeaves(values, nil) {
		changed, err := facts.Changed(reads, mutate(values, l, m))
		if err != nil {
			t.Fatal(err)
		}
		if changed {
			covered = append(covered, l)
		} else {
			free = append(free, l)
		}
	}
	return covered, free
}

var mutationFull = flag.Bool("mutation.full", false, "mutation test: give every unread fact leaf all three mutations one by one (about 3x the compiles)")

// TestMutation is the proof that the recorded reads are complete, on real
// modules and a real agent's facts, and that the proof has teeth.
func TestMutation(t *testing.T) {
	if testing.Short() {
		t.Skip("runs Ruby Puppet; skipped with -short")
	}
	start := time.Now()
	values := agentFacts(t)
	r := &mutationRun{t: t, e: newEngine(t, Options{Workers: 2}), envpath: mutationEnv(t), cert: mutationCert,
		modules: len(mutationModules), rotation: [2]int{0, 1}, compiles: new(atomic.Int64)}
	r.start(values)
	t.Run("unread facts", func(t *testing.T) {
		r := *r
		r.t = t
		testUnreadFacts(&r, values)
	})
	// Each hook that keeps a read from going unnoticed, switched off in
	// turn: some fact the catalog depends on goes unrecorded, and changing
	// the unread leaves changes the catalog. (The erb and convert hooks
	// only make recording finer: without them a template or a 3.x function
	// counts as reading everything it was given.)
	for _, hook := range findingHooks {
		t.Run("without hook "+hook, func(t *testing.T) {
			r := *r
			r.t = t
			r.off = []string{hook}
			if leaf, ok := findMissedRead(&r, values); ok {
				t.Logf("with hook %s off, the mutation test finds the missed read of %s", hook, leaf)
			} else {
				t.Errorf("with hook %s off, changing every unread leaf left the catalog alone: the mutation test would not notice this hook missing", hook)
			}
		})
	}
	t.Logf("%d compiles in %s", r.compiles.Load(), time.Since(start).Round(time.Millisecond))
}

// findingHooks are the recording hooks without which reads go missing
// (the others only make recording finer: without erb or convert, a
// template or a 3.x function counts as reading everything it was given).
var findingHooks = []string{"topscope", "qualified", "facts", "tohash", "iterate", "hashargs"}

// TestMutationCorpus is the same proof over the corpus of real Debian
// modules (internal/corpus): every node of every role, each probing its
// share of its unread leaves one by one (all of them together, for each
// mutation, on every node); and, for each recording hook, a node whose
// catalog changes when the hook is off.
func TestMutationCorpus(t *testing.T) {
	if testing.Short() {
		t.Skip("runs Ruby Puppet over Debian's puppet modules; skipped with -short")
	}
	start := time.Now()
	envpath, err := corpus.Build(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	nodes, err := corpus.Nodes()
	if err != nil {
		t.Fatal(err)
	}
	e := newEngine(t, Options{Workers: 2})
	compiles := new(atomic.Int64)
	runs := make([]*mutationRun, len(nodes))
	for i, n := range nodes {
		t.Run(n.Certname, func(t *testing.T) {
			r := &mutationRun{t: t, e: e, envpath: envpath, cert: n.Certname, modules: len(corpus.Modules),
				rotation: [2]int{i, len(nodes)}, compiles: compiles}
			r.start(n.Facts)
			testUnreadFacts(r, n.Facts)
			runs[i] = r
		})
	}
	for _, hook := range findingHooks {
		t.Run("without hook "+hook, func(t *testing.T) {
			for i, r := range runs {
				if r == nil {
					continue
				}
				r := *r
				r.t, r.off = t, []string{hook}
				if leaf, ok := findMissedRead(&r, nodes[i].Facts); ok {
					t.Logf("with hook %s off, the mutation test finds the missed read of %s on %s", hook, leaf, r.cert)
					return
				}
			}
			t.Errorf("with hook %s off, no corpus node's catalog changed with all its unread leaves: the corpus does not exercise it", hook)
		})
	}
	t.Logf("%d nodes, %d compiles in %s", len(nodes), compiles.Load(), time.Since(start).Round(time.Millisecond))
}

func testUnreadFacts(r *mutationRun, values map[string]any) {
	t := r.t
	reads := r.reads.Reads
	if r.reads.AlwaysRecompile {
		t.Fatalf("catalog marked always-recompile: %s", r.reads.Why)
	}
	covered, free := unread(t, reads, values, changeValue)
	t.Logf("%d modules; facts: %d top-level, %d leaves; %d reads cover %d leaves, %d leaves unread",
		r.modules, len(values), len(covered)+len(free), len(reads), len(covered), len(free))
	if len(free) < 100 || len(covered) < 10 {
		t.Fatalf("implausible split: %d covered, %d unread leaves (reads: %v)", len(covered), len(free), reads)
	}

	// Every mutation of a leaf that the recompile rule does not see must
	// leave the catalog alone. One by one, each leaf gets one mutation
	// (change value, change type, delete in turn, by its position; all
	// three with -mutation.full; a corpus node only its share of the
	// leaves), and all of them together get each mutation.
	var probes []probe
	unseen := map[mutation][]leaf{}
	for _, m := range []mutation{changeValue, changeType, deleteLeaf} {
		_, unseen[m] = unread(t, reads, values, m)
	}
	for i, l := range factLeaves(values, nil) {
		for _, m := range []mutation{changeValue, changeType, deleteLeaf} {
			if !slices.ContainsFunc(unseen[m], func(u leaf) bool { return slices.Equal(u.path, l.path) }) {
				continue
			}
			if *mutationFull || (int(m) == i%3 && i%r.rotation[1] == r.rotation[0]) {
				probes = append(probes, probe{what: fmt.Sprintf("%s of %s", m, l), facts: mutate(values, l, m)})
			}
		}
	}
	oneByOne := len(probes)
	for _, m := range []mutation{changeValue, changeType, deleteLeaf} {
		all := values
		for _, l := range unseen[m] {
			all = mutate(all, l, m)
		}
		if changed, err := facts.Changed(reads, all); err != nil || changed {
			t.Fatalf("facts.Changed after %s of all %d leaves whose %[1]s it does not see alone = %v, %v; want false", m, len(unseen[m]), changed, err)
		}
		probes = append(probes, probe{what: fmt.Sprintf("%s of all %d leaves where it is unseen", m, len(unseen[m])), facts: all})
	}
	// Facts never read at all, at any depth: delete them.
	neverRead := values
	var names []string
	for name := range values {
		if !slices.ContainsFunc(reads, func(rd facts.Read) bool { return len(rd.Path) == 0 || rd.Path[0] == name }) {
			neverRead = withPath(neverRead, []string{name}, nil, true)
			names = append(names, name)
		}
	}
	probes = append(probes, probe{what: fmt.Sprintf("deleting the %d never-read facts", len(names)), facts: neverRead})
	// A new fact, at top level and inside a hash that is read in parts.
	added := withPath(withPath(values, []string{"mutation_test_new_fact"}, "x", false), []string{"os", "mutation_test_new_key"}, "x", false)
	if changed, err := facts.Changed(reads, added); err != nil || changed {
		t.Fatalf("facts.Changed after adding unread facts = %v, %v; want false", changed, err)
	}
	probes = append(probes, probe{what: "adding facts nobody reads", facts: added})

	before := r.compiles.Load()
	for what, diff := range r.run(probes) {
		t.Errorf("missed read: %s changed the catalog %s", what, diff)
	}
	t.Logf("%d mutated compiles: %d one by one, %d all together", r.compiles.Load()-before, oneByOne, len(probes)-oneByOne)
	t.Logf("never-read top-level facts: %d of %d", len(names), len(values))

	// And the other way round: changing what a read observed is reported.
	for _, rd := range reads {
		var mutated map[string]any
		v, ok := facts.Lookup(values, rd.Path)
		switch {
		case len(rd.Path) == 0:
			mutated = withPath(values, []string{"mutation_test_new_fact"}, "x", false)
		case rd.Kind == facts.ReadKeys && ok:
			mutated = withPath(values, append(slices.Clone(rd.Path), "mutation_test_new_key"), "x", false)
		case rd.Kind == facts.ReadHash && ok:
			mutated = withPath(values, rd.Path, "not a hash", false)
		case !ok:
			mutated = withPath(values, rd.Path, "now present", false)
		case rd.Kind == facts.ReadPresent:
			mutated = withPath(values, rd.Path, nil, true)
		default:
			mutated = withPath(values, rd.Path, newValue(v), false)
		}
		if changed, err := facts.Changed(reads, mutated); err != nil || !changed {
			t.Errorf("facts.Changed after changing read %s %v = %v, %v; want true", rd.Kind, rd.Path, changed, err)
		}
	}
	if n := r.e.readMismatches.Load(); n != 0 {
		t.Errorf("%d reads observed other values than facts.Observe computes", n)
	}
}

// findMissedRead compiles with r.off switched off and looks for a missed
// read: all unread leaves changed at once change the catalog, and
// bisecting (both halves at once, one per worker) finds one leaf whose
// change alone does. It returns that leaf, or false when changing all of
// them left the catalog alone.
func findMissedRead(r *mutationRun, values map[string]any) (string, bool) {
	t := r.t
	cat, reads, err := r.compile(t.Context(), values)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(cat, r.base) {
		t.Fatalf("switching recording hooks off changed the catalog %s", firstDiff(r.base, cat))
	}
	if reads == nil {
		t.Fatal("no reads recorded")
	}
	_, free := unread(t, reads.Reads, values, changeValue)
	changeAll := func(leaves []leaf) map[string]any {
		all := values
		for _, l := range leaves {
			all = mutate(all, l, changeValue)
		}
		return all
	}
	if len(r.run([]probe{{what: "all", facts: changeAll(free)}})) == 0 {
		return "", false
	}
	suspects := free
	for len(suspects) > 1 {
		halves := [][]leaf{suspects[:len(suspects)/2], suspects[len(suspects)/2:]}
		missed := r.run([]probe{{what: "0", facts: changeAll(halves[0])}, {what: "1", facts: changeAll(halves[1])}})
		switch {
		case missed["0"] != "":
			suspects = halves[0]
		case missed["1"] != "":
			suspects = halves[1]
		default:
			t.Fatalf("with hook %s off, the catalog depends on leaves of both halves of %v together only", r.off, suspects)
		}
	}
	return suspects[0].String(), true
}

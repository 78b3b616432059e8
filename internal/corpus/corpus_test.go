package corpus

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/compilefarm/compilefarm/pkg/facts"
)

// leaves flattens values into its leaves (scalars, arrays, empty hashes)
// by path, each path's elements joined with "\x00".
func leaves(values map[string]any) map[string]any {
	out := map[string]any{}
	var walk func(prefix []string, v any)
	walk = func(prefix []string, v any) {
		if m, ok := v.(map[string]any); ok && len(m) > 0 {
			for k, c := range m {
				walk(append(slices.Clone(prefix), k), c)
			}
			return
		}
		out[strings.Join(prefix, "\x00")] = v
	}
	for k, v := range values {
		walk([]string{k}, v)
	}
	return out
}

func splitPath(p string) []string { return strings.Split(p, "\x00") }

func showPath(p string) string { return strings.ReplaceAll(p, "\x00", ".") }

func loadNodes(t *testing.T) []Node {
	t.Helper()
	nodes, err := Nodes()
	if err != nil {
		t.Fatal(err)
	}
	return nodes
}

// zeroSizeMount reports whether path is under a mountpoint of size 0,
// which Churn leaves alone.
func zeroSizeMount(values map[string]any, path []string) bool {
	if len(path) != 3 || path[0] != "mountpoints" {
		return false
	}
	size, _ := facts.Lookup(values, []string{"mountpoints", path[1], "size_bytes"})
	n, ok := num(size)
	return ok && n == 0
}

func TestNodes(t *testing.T) {
	nodes := loadNodes(t)
	if len(nodes) < 16 {
		t.Errorf("%d nodes, want at least 16", len(nodes))
	}
	roles := map[string]int{}
	for _, n := range nodes {
		roles[n.Role]++
		if got := n.Facts["clientcert"]; got != n.Certname {
			t.Errorf("%s: clientcert %v", n.Certname, got)
		}
		if got, _ := facts.Lookup(n.Facts, []string{"networking", "fqdn"}); got != n.Certname {
			t.Errorf("%s: networking.fqdn %v", n.Certname, got)
		}
		// Every node keeps the recorded agent's facts, plus the ones gen
		// adds (role, domain, uptime, processors beyond the recorded two).
		for _, f := range []string{"os", "networking", "memory", "mountpoints", "load_averages", "apt_package_updates",
			"system_uptime", "uptime", "uptime_days", "uptime_hours", "uptime_seconds", "role", "domain"} {
			if _, ok := n.Facts[f]; !ok {
				t.Errorf("%s: fact %s missing", n.Certname, f)
			}
		}
		if _, ok := n.Facts["processorcount"].(json.Number); !ok {
			t.Errorf("%s: processorcount is %T, want json.Number", n.Certname, n.Facts["processorcount"])
		}
		if _, ok := usedChanges[n.Role]; !ok {
			t.Errorf("%s: role %s has no UsedChange", n.Certname, n.Role)
		}
	}
	if len(roles) < 12 {
		t.Errorf("%d roles (%v), want at least 12", len(roles), roles)
	}
	for role := range usedChanges {
		if roles[role] == 0 {
			t.Errorf("UsedChange has role %s, which no node has", role)
		}
	}

	// Fresh maps on every call.
	again := loadNodes(t)
	nodes[0].Facts["networking"].(map[string]any)["ip"] = "changed"
	if got, _ := facts.Lookup(again[0].Facts, []string{"networking", "ip"}); got == "changed" {
		t.Error("Nodes returned shared maps")
	}
}

func TestChurnChangesExactlyVolatile(t *testing.T) {
	for _, n := range loadNodes(t) {
		t.Run(n.Certname, func(t *testing.T) {
			before := leaves(n.Facts)
			orig, _ := json.Marshal(n.Facts)
			const runs = 8
			seen := map[string][]string{} // volatile path -> values over runs
			for run := range runs {
				churned := Churn(n.Facts, run)
				after := leaves(churned)
				if len(after) != len(before) {
					t.Fatalf("run %d: %d leaves, want %d", run, len(after), len(before))
				}
				for p, v := range before {
					path := splitPath(p)
					w, ok := after[p]
					switch {
					case !ok:
						t.Errorf("run %d: %s dropped", run, showPath(p))
					case IsVolatile(path) && !zeroSizeMount(n.Facts, path):
						if reflect.DeepEqual(v, w) {
							t.Errorf("run %d: volatile %s unchanged (%v)", run, showPath(p), v)
						}
						checkKind(t, run, p, v, w)
						seen[p] = append(seen[p], fmt.Sprint(w))
					default:
						if !reflect.DeepEqual(v, w) {
							t.Errorf("run %d: %s changed from %v to %v, and it is not volatile", run, showPath(p), v, w)
						}
					}
				}
			}
			if len(seen) < 30 {
				t.Errorf("only %d volatile leaves changed", len(seen))
			}
			for p, vals := range seen {
				sorted := slices.Clone(vals)
				sort.Strings(sorted)
				if len(slices.Compact(sorted)) != len(vals) {
					t.Errorf("%s repeats a value over %d runs: %v", showPath(p), runs, vals)
				}
			}
			// Deterministic, and values itself is untouched.
			a, _ := json.Marshal(Churn(n.Facts, 3))
			b, _ := json.Marshal(Churn(n.Facts, 3))
			if string(a) != string(b) {
				t.Error("Churn(values, 3) differs between calls")
			}
			if now, _ := json.Marshal(n.Facts); string(now) != string(orig) {
				t.Error("Churn modified its argument")
			}
		})
	}
}

// checkKind requires a churned value to keep its representation: a
// json.Number stays an integer or a float, a string keeps its format.
func checkKind(t *testing.T, run int, p string, old, new any) {
	t.Helper()
	switch o := old.(type) {
	case json.Number:
		n, ok := new.(json.Number)
		if !ok {
			t.Errorf("run %d: %s became %T", run, showPath(p), new)
			return
		}
		if strings.Contains(string(o), ".") != strings.Contains(string(n), ".") {
			t.Errorf("run %d: %s changed number kind: %s -> %s", run, showPath(p), o, n)
		}
	case string:
		n, ok := new.(string)
		if !ok {
			t.Errorf("run %d: %s became %T", run, showPath(p), new)
			return
		}
		if format(o) != format(n) {
			t.Errorf("run %d: %s changed format: %q -> %q", run, showPath(p), o, n)
		}
	default:
		t.Errorf("run %d: %s is a %T", run, showPath(p), old)
	}
}

// format reduces a fact string to its shape: digits become 9, and a
// size's unit is kept ("9.99 GiB", "9.99%", "99 days").
func format(s string) string {
	var b strings.Builder
	for _, r := range s {
		if r >= '0' && r <= '9' {
			if !strings.HasSuffix(b.String(), "9") {
				b.WriteRune('9')
			}
			continue
		}
		b.WriteRune(r)
	}
	f := b.String()
	// Sizes change unit at 1024 (MiB <-> GiB), uptime between "H:MM hours",
	// "1 day" and "N days": the same format family.
	for _, unit := range []string{"bytes", "KiB", "MiB", "GiB", "TiB"} {
		f = strings.Replace(f, " "+unit, " <size>", 1)
	}
	f = strings.Replace(f, "9.9 <size>", "<size>", 1)
	f = strings.Replace(f, "9 <size>", "<size>", 1)
	if f == "9%" || f == "9.9%" {
		return "<percent>" // facter writes 0% and 100% without decimals
	}
	for _, up := range []string{"9:9 hours", "9 day", "9 days"} {
		if f == up {
			return "<uptime>"
		}
	}
	return f
}

func TestChurnNumberKinds(t *testing.T) {
	values := map[string]any{
		"memoryfree_mb": json.Number("21961.015625"),
		"memory": map[string]any{"system": map[string]any{
			"total_bytes": json.Number("25274793984"), "used_bytes": json.Number("2247000064"),
			"available_bytes": json.Number("23027793920"), "used": "2.09 GiB", "available": "21.45 GiB", "capacity": "8.89%",
		}},
		"system_uptime":  map[string]any{"seconds": json.Number("100"), "hours": json.Number("0"), "days": json.Number("0"), "uptime": "0:01 hours"},
		"uptime_seconds": json.Number("100"),
	}
	c := Churn(values, 0)
	if _, ok := c["memoryfree_mb"].(json.Number); !ok || !strings.Contains(string(c["memoryfree_mb"].(json.Number)), ".") {
		t.Errorf("memoryfree_mb = %#v, want a float json.Number", c["memoryfree_mb"])
	}
	sys := c["memory"].(map[string]any)["system"].(map[string]any)
	used, _ := num(sys["used_bytes"])
	avail, _ := num(sys["available_bytes"])
	if used+avail != 25274793984 {
		t.Errorf("used %d + available %d != total", used, avail)
	}
	if got, want := sys["used"], HumanBytes(used); got != want {
		t.Errorf("used = %v, want %v", got, want)
	}
	if got := c["uptime_seconds"]; got != json.Number(fmt.Sprint(100+runSpacing)) {
		t.Errorf("uptime_seconds = %v", got)
	}
	if got := c["system_uptime"].(map[string]any)["uptime"]; got != "1 day" {
		t.Errorf("uptime = %v, want 1 day", got)
	}
}

func TestHumanBytes(t *testing.T) {
	for _, tc := range []struct {
		b    uint64
		want string
	}{
		{0, "0 bytes"},
		{1023, "1023 bytes"},
		{4096, "4.00 KiB"},
		{2247000064, "2.09 GiB"},
		{23027793920, "21.45 GiB"},
		{270553174016, "251.97 GiB"},
		{1<<40 - 1, "1.00 TiB"},
	} {
		if got := HumanBytes(tc.b); got != tc.want {
			t.Errorf("HumanBytes(%d) = %q, want %q", tc.b, got, tc.want)
		}
	}
}

func TestWith(t *testing.T) {
	values := map[string]any{
		"networking": map[string]any{"ip": "10.0.0.1", "interfaces": map[string]any{"eth0": map[string]any{"ip": "10.0.0.1"}}},
		"os":         map[string]any{"family": "Debian"},
	}
	got := With(values, []string{"networking", "interfaces", "eth0", "ip"}, "10.0.0.2")
	if ip, _ := facts.Lookup(got, []string{"networking", "interfaces", "eth0", "ip"}); ip != "10.0.0.2" {
		t.Errorf("new value %v", ip)
	}
	if ip, _ := facts.Lookup(values, []string{"networking", "interfaces", "eth0", "ip"}); ip != "10.0.0.1" {
		t.Errorf("With modified values: %v", ip)
	}
	// Off the path, maps are shared.
	if reflect.ValueOf(got["os"]).Pointer() != reflect.ValueOf(values["os"]).Pointer() {
		t.Error("With copied a hash off the path")
	}
	got = With(values, []string{"new", "fact"}, json.Number("1"))
	if v, _ := facts.Lookup(got, []string{"new", "fact"}); v != json.Number("1") {
		t.Errorf("new nested fact %v", v)
	}
}

func TestUsedChange(t *testing.T) {
	for _, n := range loadNodes(t) {
		path, value := UsedChange(n)
		if path == nil {
			t.Errorf("%s: no UsedChange for role %s", n.Certname, n.Role)
			continue
		}
		old, ok := facts.Lookup(n.Facts, path)
		if !ok {
			t.Errorf("%s: UsedChange path %v is not a fact of the node", n.Certname, path)
		}
		if reflect.DeepEqual(old, value) {
			t.Errorf("%s: UsedChange %v keeps the value %v", n.Certname, path, value)
		}
		if IsVolatile(path) {
			t.Errorf("%s: UsedChange %v is volatile", n.Certname, path)
		}
		if _, isNum := old.(json.Number); isNum {
			if _, ok := value.(json.Number); !ok {
				t.Errorf("%s: UsedChange %v gives %T for a number", n.Certname, path, value)
			}
		}
	}
	if p, v := UsedChange(Node{Role: "nosuchrole"}); p != nil || v != nil {
		t.Errorf("unknown role: %v, %v", p, v)
	}
}

// fakeModules makes a module root holding every module but skip, one of
// them as a symlink the way Debian installs them.
func fakeModules(t *testing.T, skip string) string {
	t.Helper()
	root := t.TempDir()
	avail := t.TempDir()
	for i, m := range Modules {
		if m.Name == skip {
			continue
		}
		dir := filepath.Join(root, m.Dir)
		if i == 0 {
			dir = filepath.Join(avail, m.Dir)
			if err := os.Symlink(dir, filepath.Join(root, m.Dir)); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.MkdirAll(filepath.Join(dir, "manifests"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "manifests", "init.pp"), []byte("class "+m.Name+" {}\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func TestBuild(t *testing.T) {
	root := fakeModules(t, "")
	envpath, err := build(t.TempDir(), root)
	if err != nil {
		t.Fatal(err)
	}
	env := filepath.Join(envpath, Environment)
	for _, f := range []string{"environment.conf", "hiera.yaml", "manifests/site.pp", "site/profile/manifests/base.pp", "site/role/manifests/web.pp"} {
		if _, err := os.Stat(filepath.Join(env, f)); err != nil {
			t.Error(err)
		}
	}
	for _, m := range Modules {
		init := filepath.Join(env, "modules", m.Name, "manifests", "init.pp")
		b, err := os.ReadFile(init)
		if err != nil || !strings.Contains(string(b), "class "+m.Name) {
			t.Errorf("module %s not copied: %v", m.Name, err)
		}
		if st, err := os.Lstat(filepath.Join(env, "modules", m.Name)); err == nil && st.Mode()&os.ModeSymlink != 0 {
			t.Errorf("module %s copied as a symlink", m.Name)
		}
	}
}

func TestBuildMissingModule(t *testing.T) {
	for _, tc := range []struct{ missing, pkg string }{
		{"logrotate", "puppet-module-rodjek-logrotate"},
		{"rsyslog", "puppet-module-saz-rsyslog"},
		{"ssh", "puppet-module-saz-ssh"},
	} {
		t.Run(tc.missing, func(t *testing.T) {
			root := fakeModules(t, tc.missing)
			_, err := build(t.TempDir(), root)
			if err == nil {
				t.Fatal("build succeeded without a module")
			}
			for _, want := range []string{"apt-get install " + tc.pkg, "scripts/install-deps.sh", tc.missing} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not say %q", err, want)
				}
			}
		})
	}
}

func TestDir(t *testing.T) {
	dir, err := Dir()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, Environment, "manifests", "site.pp")); err != nil {
		t.Error(err)
	}
	// From another directory of the checkout, as a test elsewhere runs.
	t.Chdir(filepath.Join(dir, "..", "..", "pkg"))
	if again, err := Dir(); err != nil || again != dir {
		t.Errorf("from pkg/: %s, %v", again, err)
	}
	// From outside the checkout, which only the source file's path finds
	// (not under -trimpath).
	if _, file, _, _ := runtime.Caller(0); filepath.IsAbs(file) {
		t.Chdir(os.TempDir())
		if again, err := Dir(); err != nil || again != dir {
			t.Errorf("from %s: %s, %v", os.TempDir(), again, err)
		}
	}
}

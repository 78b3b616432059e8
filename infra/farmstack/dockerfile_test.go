package farmstack

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// What can be checked of the images without Docker (issue 23, item 7):
// the Dockerfiles parsed, against the build context the CDK stages for
// each image asset (cdk.out/asset.<hash>: the repository root minus
// AssetExcludes, what `cdk deploy` sends to docker build). The Go build
// stages themselves are cross-compiled by `make synth`
// (scripts/cross-compile.sh).

// dockerfile is the part of a Dockerfile the checks read.
type dockerfile struct {
	stages []*stage
}

// stage is one FROM ... [AS name] and what follows it.
type stage struct {
	name, image string
	copies      []copyInstr
	expose      []string
	runs        []string
}

// copyInstr is a COPY or ADD.
type copyInstr struct {
	instr   string // COPY or ADD
	from    string // --from=, "" for the build context
	sources []string
	dest    string
	line    int
}

// parseDockerfile reads the instructions of a Dockerfile: FROM (with
// --platform and AS), COPY and ADD (with --from and the other flags, shell
// or JSON form), EXPOSE and RUN; comment lines and line continuations as
// Docker reads them (the default escape character).
func parseDockerfile(text string) (*dockerfile, error) {
	df := &dockerfile{}
	lines := strings.Split(text, "\n")
	for i := 0; i < len(lines); i++ {
		start := i + 1
		line := strings.TrimSpace(lines[i])
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		// A continuation skips comment and empty lines.
		for strings.HasSuffix(line, `\`) {
			line = strings.TrimSuffix(line, `\`)
			for i+1 < len(lines) {
				i++
				if next := strings.TrimSpace(lines[i]); next != "" && !strings.HasPrefix(next, "#") {
					line += " " + next
					break
				}
			}
		}
		keyword, rest, _ := strings.Cut(line, " ")
		rest = strings.TrimSpace(rest)
		keyword = strings.ToUpper(keyword)
		if keyword != "FROM" && keyword != "ARG" && len(df.stages) == 0 {
			return nil, fmt.Errorf("line %d: %s before FROM", start, keyword)
		}
		var cur *stage
		if len(df.stages) > 0 {
			cur = df.stages[len(df.stages)-1]
		}
		switch keyword {
		case "FROM":
			f := strings.Fields(rest)
			for len(f) > 0 && strings.HasPrefix(f[0], "--") {
				f = f[1:]
			}
			st := &stage{}
			switch {
			case len(f) == 1:
				st.image = f[0]
			case len(f) == 3 && strings.EqualFold(f[1], "AS"):
				st.image, st.name = f[0], strings.ToLower(f[2])
			default:
				return nil, fmt.Errorf("line %d: FROM %s", start, rest)
			}
			df.stages = append(df.stages, st)
		case "COPY", "ADD":
			c := copyInstr{instr: keyword, line: start}
			var args []string
			for {
				flag, after, _ := strings.Cut(rest, " ")
				if !strings.HasPrefix(flag, "--") {
					break
				}
				if v, ok := strings.CutPrefix(flag, "--from="); ok {
					c.from = strings.ToLower(v)
				}
				rest = strings.TrimSpace(after)
			}
			if strings.HasPrefix(rest, "[") {
				if err := json.Unmarshal([]byte(rest), &args); err != nil {
					return nil, fmt.Errorf("line %d: %s %s: %v", start, keyword, rest, err)
				}
			} else {
				args = strings.Fields(rest)
			}
			if len(args) < 2 {
				return nil, fmt.Errorf("line %d: %s needs a source and a destination: %s", start, keyword, rest)
			}
			c.sources, c.dest = args[:len(args)-1], args[len(args)-1]
			cur.copies = append(cur.copies, c)
		case "EXPOSE":
			for _, p := range strings.Fields(rest) {
				cur.expose = append(cur.expose, strings.TrimSuffix(strings.ToLower(p), "/tcp"))
			}
		case "RUN":
			cur.runs = append(cur.runs, rest)
		}
	}
	if len(df.stages) == 0 {
		return nil, fmt.Errorf("no FROM")
	}
	return df, nil
}

// stageNamed returns the stage a --from= names (its name or index)
// before stage i, or nil.
func (df *dockerfile) stageNamed(name string, i int) *stage {
	if n, err := strconv.Atoi(name); err == nil && n >= 0 && n < i {
		return df.stages[n]
	}
	for _, st := range df.stages[:i] {
		if st.name == name {
			return st
		}
	}
	return nil
}

// dockerignore is the patterns of a .dockerignore, matched as Docker does:
// relative to the context root, path.Match syntax plus "**" for any
// number of directories, a directory's match covering what is in it, the
// last matching pattern winning ("!" re-includes).
type dockerignore []string

func readDockerignore(file string) (dockerignore, error) {
	b, err := os.ReadFile(file)
	if os.IsNotExist(err) {
		return nil, nil
	}
	var out dockerignore
	for _, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	return out, err
}

func (d dockerignore) ignored(rel string) bool {
	ignored := false
	for _, p := range d {
		neg := strings.HasPrefix(p, "!")
		p = path.Clean(strings.TrimPrefix(strings.TrimPrefix(p, "!"), "/"))
		for dir := rel; dir != "." && dir != "/"; dir = path.Dir(dir) {
			if globMatch(p, dir) {
				ignored = !neg
				break
			}
		}
	}
	return ignored
}

// globMatch is path.Match with "**" matching any number of path elements.
func globMatch(pattern, name string) bool {
	var re strings.Builder
	re.WriteString("^")
	for i := 0; i < len(pattern); i++ {
		switch c := pattern[i]; c {
		case '*':
			if strings.HasPrefix(pattern[i:], "**/") {
				re.WriteString("(?:.*/)?")
				i += 2
			} else if strings.HasPrefix(pattern[i:], "**") {
				re.WriteString(".*")
				i++
			} else {
				re.WriteString("[^/]*")
			}
		case '?':
			re.WriteString("[^/]")
		default:
			re.WriteString(regexp.QuoteMeta(string(c)))
		}
	}
	re.WriteString("$")
	ok, _ := regexp.MatchString(re.String(), name)
	return ok
}

// imageAsset is a Docker image asset of the cloud assembly.
type imageAsset struct {
	hash       string
	context    string // the staged build context: cdk.out/asset.<hash>
	dockerfile string // relative to the context
}

// imageAssets reads the stack's Docker image assets from the assembly.
func (s *synthed) imageAssets(t *testing.T) []imageAsset {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(s.out, "*.assets.json"))
	var out []imageAsset
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var m struct {
			DockerImages map[string]struct {
				Source struct{ Directory, DockerFile string }
			}
		}
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for hash, img := range m.DockerImages {
			df := img.Source.DockerFile
			if df == "" {
				df = "Dockerfile"
			}
			out = append(out, imageAsset{hash: hash, context: filepath.Join(s.out, img.Source.Directory), dockerfile: df})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].dockerfile < out[j].dockerfile })
	return out
}

// TestDockerfiles checks both images' Dockerfiles against the build
// contexts the stack stages for them: every COPY/ADD source of the context
// exists there (after AssetExcludes and a .dockerignore), every --from=
// names an earlier stage whose RUN or COPY makes the copied path, the last
// stage EXPOSEs exactly the container ports the stack maps for the image
// (the fleet's; none for the compile function, whose image Lambda runs
// without ports), and the Go packages the build stage compiles, with
// their embedded files, are all in the context (go list -deps there, for
// linux/arm64).
func TestDockerfiles(t *testing.T) {
	s := dev(t)
	assets := s.imageAssets(t)
	var names []string
	for _, a := range assets {
		names = append(names, a.dockerfile)
	}
	if want := []string{"broker/Dockerfile", "functions/compile/Dockerfile"}; !slices.Equal(names, want) {
		t.Fatalf("the stack's image assets build %v, want %v", names, want)
	}
	for _, a := range assets {
		t.Run(a.dockerfile, func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join(a.context, a.dockerfile))
			if err != nil {
				t.Fatalf("the Dockerfile is not in the staged context: %v", err)
			}
			df, err := parseDockerfile(string(b))
			if err != nil {
				t.Fatalf("parse %s: %v", a.dockerfile, err)
			}
			// BuildKit reads <Dockerfile>.dockerignore before the context's.
			ign, err := readDockerignore(filepath.Join(a.context, a.dockerfile+".dockerignore"))
			if err == nil && ign == nil {
				ign, err = readDockerignore(filepath.Join(a.context, ".dockerignore"))
			}
			if err != nil {
				t.Fatal(err)
			}
			checkCopies(t, a, df, ign)
			checkExpose(t, s, a, df)
			checkGoBuild(t, a, df)
		})
	}
}

func checkCopies(t checkT, a imageAsset, df *dockerfile, ign dockerignore) {
	t.Helper()
	for i, st := range df.stages {
		for _, c := range st.copies {
			for _, src := range c.sources {
				if c.from != "" {
					from := df.stageNamed(c.from, i)
					if from == nil {
						t.Errorf("line %d: %s --from=%s: no earlier stage of that name", c.line, c.instr, c.from)
						continue
					}
					if !stageMakes(from, src) {
						t.Errorf("line %d: %s --from=%s %s: no RUN or COPY of stage %s makes %s", c.line, c.instr, c.from, src, c.from, src)
					}
					continue
				}
				if c.instr == "ADD" && (strings.HasPrefix(src, "http://") || strings.HasPrefix(src, "https://") || strings.HasPrefix(src, "git@")) {
					continue
				}
				if n := contextMatches(t, a.context, src, ign); n == 0 {
					t.Errorf("line %d: %s %s: nothing in the build context (the repository root minus AssetExcludes%s) matches it",
						c.line, c.instr, src, map[bool]string{true: " and .dockerignore"}[len(ign) > 0])
				}
			}
		}
	}
}

// stageMakes reports whether a RUN of st names p (its output, e.g. go
// build -o /out/broker) or a COPY of st puts something at p.
func stageMakes(st *stage, p string) bool {
	for _, r := range st.runs {
		if strings.Contains(r, p) {
			return true
		}
	}
	for _, c := range st.copies {
		if c.dest == p || strings.HasPrefix(p, strings.TrimSuffix(c.dest, "/")+"/") {
			return true
		}
	}
	return false
}

// contextMatches counts the files and directories of the context that
// src (a path or a pattern, relative to the context root) matches and
// ign does not exclude.
func contextMatches(t checkT, context, src string, ign dockerignore) int {
	t.Helper()
	src = path.Clean(strings.TrimPrefix(src, "/"))
	if src == "." {
		return 1
	}
	matches, err := filepath.Glob(filepath.Join(context, filepath.FromSlash(src)))
	if err != nil {
		t.Fatalf("pattern %s: %v", src, err)
	}
	n := 0
	for _, m := range matches {
		rel, _ := filepath.Rel(context, m)
		if !ign.ignored(filepath.ToSlash(rel)) {
			n++
		}
	}
	return n
}

// checkExpose: the last stage's EXPOSE lists the container ports the
// stack maps for a container of this image, and nothing else.
func checkExpose(t *testing.T, s *synthed, a imageAsset, df *dockerfile) {
	t.Helper()
	var want []string
	used := false
	for _, r := range s.resources("AWS::ECS::TaskDefinition") {
		for _, cd := range asList(props(r)["ContainerDefinitions"]) {
			cd := cd.(map[string]interface{})
			if !strings.Contains(jsonString(cd["Image"]), a.hash) {
				continue
			}
			used = true
			for _, pm := range asList(cd["PortMappings"]) {
				want = append(want, strconv.Itoa(int(num(pm.(map[string]interface{})["ContainerPort"]))))
			}
		}
	}
	for _, r := range s.resources("AWS::Lambda::Function") {
		if strings.Contains(jsonString(props(r)["Code"]), a.hash) {
			used = true // a Lambda image: no ports
		}
	}
	if !used {
		t.Fatalf("no container or function of the stack uses the image of %s", a.dockerfile)
	}
	got := slices.Clone(df.stages[len(df.stages)-1].expose)
	sort.Strings(got)
	sort.Strings(want)
	if !slices.Equal(got, want) {
		t.Errorf("%s EXPOSEs %v; the stack maps %v", a.dockerfile, got, want)
	}
}

// goBuildPkgs finds the package arguments (./...) of a go build command.
var goBuildPkgs = regexp.MustCompile(`(?:^|\s)(\./[^\s;&|]*)`)

// checkGoBuild: go list -deps of the packages the Dockerfile's go build
// compiles, in the staged context, for linux/arm64 without cgo, as the
// build stage does: a package or embedded file that AssetExcludes leaves
// out of the context fails here, not in docker build.
func checkGoBuild(t checkT, a imageAsset, df *dockerfile) {
	t.Helper()
	var pkgs []string
	for _, st := range df.stages {
		for _, r := range st.runs {
			for _, build := range strings.Split(" "+r, " go build ")[1:] {
				build, _, _ = strings.Cut(build, "&&")
				build, _, _ = strings.Cut(build, ";")
				for _, m := range goBuildPkgs.FindAllStringSubmatch(build, -1) {
					pkgs = append(pkgs, m[1])
				}
			}
		}
	}
	if len(pkgs) == 0 {
		t.Fatalf("%s has no RUN ... go build ./PACKAGE", a.dockerfile)
	}
	cmd := exec.Command("go", append([]string{"list", "-deps", "-f", "{{.ImportPath}}"}, pkgs...)...)
	cmd.Dir = a.context
	cmd.Env = append(os.Environ(), "GOOS=linux", "GOARCH=arm64", "CGO_ENABLED=0", "GOWORK=off", "GOFLAGS=-mod=readonly")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("go list -deps %s in the staged build context of %s: %v\n%s", strings.Join(pkgs, " "), a.dockerfile, err, out)
	}
}

// TestParseDockerfile: the instructions the checks read, in the forms
// Docker takes them.
func TestParseDockerfile(t *testing.T) {
	df, err := parseDockerfile(`# syntax=docker/dockerfile:1
ARG BASE=golang:1.26
FROM --platform=$BUILDPLATFORM ${BASE} AS Build
RUN CGO_ENABLED=0 \
    # a comment inside a continuation
    go build -o /out/x ./cmd/x
COPY --chown=1:1 go.mod go.sum ./
FROM scratch
COPY --from=build --chmod=755 /out/x /x
ADD ["a b.txt", "/c/"]
EXPOSE 8140/tcp 9140
expose 8142
`)
	if err != nil {
		t.Fatal(err)
	}
	if len(df.stages) != 2 || df.stages[0].name != "build" || df.stages[0].image != "${BASE}" || df.stages[1].name != "" {
		t.Fatalf("stages %+v %+v", df.stages[0], df.stages[len(df.stages)-1])
	}
	if got := df.stages[0].runs; len(got) != 1 || !strings.Contains(got[0], "CGO_ENABLED=0") || !strings.Contains(got[0], "go build -o /out/x ./cmd/x") {
		t.Errorf("runs %q", got)
	}
	want := []copyInstr{
		{instr: "COPY", sources: []string{"go.mod", "go.sum"}, dest: "./", line: 7},
		{instr: "COPY", from: "build", sources: []string{"/out/x"}, dest: "/x", line: 9},
		{instr: "ADD", sources: []string{"a b.txt"}, dest: "/c/", line: 10},
	}
	got := append(slices.Clone(df.stages[0].copies), df.stages[1].copies...)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("copies\n got %+v\nwant %+v", got, want)
	}
	if e := df.stages[1].expose; !slices.Equal(e, []string{"8140", "9140", "8142"}) {
		t.Errorf("expose %v", e)
	}
	if st := df.stageNamed("build", 1); st != df.stages[0] {
		t.Error("--from=build does not find the build stage")
	}
	if df.stageNamed("build", 0) != nil || df.stageNamed("0", 1) != df.stages[0] || df.stageNamed("other", 1) != nil {
		t.Error("stageNamed finds a stage that is not before, or misses one by index")
	}
	for _, bad := range []string{"", "RUN true\n", "FROM a b\n", "FROM a\nCOPY onlyone\n", "FROM a\nCOPY [\"x\"\n"} {
		if _, err := parseDockerfile(bad); err == nil {
			t.Errorf("%q parses", bad)
		}
	}
}

// TestDockerignore: patterns as Docker matches them, AssetExcludes' own
// among them.
func TestDockerignore(t *testing.T) {
	ign := dockerignore(append(slices.Clone(AssetExcludes), "docs/keep", "!docs/keep", "*.md", "!README.md"))
	for rel, want := range map[string]bool{
		"infra":                   true,
		"infra/farmstack/x.go":    true,
		"pkg/infra/x.go":          false, // anchored at the root
		"pkg/x/cdk.out/a":         true,  // **/cdk.out
		"cdk.out":                 true,
		"broker/broker.test":      true,
		"broker/main.go":          false,
		"go.mod":                  false,
		"docs/keep":               false, // docs excludes it, the last pattern matching it ("!docs/keep") takes it back
		"NOTES.md":                true,
		"README.md":               false,
		"functions/compile/x.rb":  false,
		".git/config":             true,
		"internal/testdata/a.out": true,
	} {
		if got := ign.ignored(rel); got != want {
			t.Errorf("%s: ignored %v, want %v", rel, got, want)
		}
	}
}

// TestDockerfileChecks: the checks find a COPY source the context lacks,
// a --from= of no stage or of a path the stage does not make, and a go
// build package that is not in the context.
func TestDockerfileChecks(t *testing.T) {
	ctx := t.TempDir()
	for f, body := range map[string]string{
		"go.mod":          "module example.com/m\n\ngo 1.24\n",
		"cmd/ok/main.go":  "package main\n\nfunc main() {}\n",
		"skipped/keep.go": "package skipped\n",
	} {
		p := filepath.Join(ctx, filepath.FromSlash(f))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	df, err := parseDockerfile(`FROM golang AS build
COPY go.mod go.sum ./
COPY skipped/ ./skipped/
RUN go build -o /out/ok ./cmd/ok && go build -o /out/gone ./cmd/gone
FROM scratch
COPY --from=build /out/ok /ok
COPY --from=build /out/other /other
COPY --from=nosuch /x /x
`)
	if err != nil {
		t.Fatal(err)
	}
	a := imageAsset{context: ctx, dockerfile: "Dockerfile"}
	rec := &recorder{}
	checkCopies(rec, a, df, dockerignore{"skipped"})
	checkGoBuild(rec, a, df)
	for _, want := range []string{"COPY go.sum: nothing", "COPY skipped/: nothing", "--from=build /out/other: no RUN", "--from=nosuch: no earlier stage", "go list -deps ./cmd/ok ./cmd/gone"} {
		if !slices.ContainsFunc(rec.errors, func(e string) bool { return strings.Contains(e, want) }) {
			t.Errorf("no error with %q in %q", want, rec.errors)
		}
	}
	if len(rec.errors) != 5 {
		t.Errorf("%d errors, want 5: %q", len(rec.errors), rec.errors)
	}
}

// checkT is what the checks need of a *testing.T; recorder records it.
type checkT interface {
	Helper()
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
}

// recorder is a checkT that keeps the errors (Fatalf too) for a test of
// the checks themselves.
type recorder struct{ errors []string }

func (r *recorder) Helper() {}
func (r *recorder) Errorf(format string, args ...any) {
	r.errors = append(r.errors, fmt.Sprintf(format, args...))
}
func (r *recorder) Fatalf(format string, args ...any) { r.Errorf(format, args...) }

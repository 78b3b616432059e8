package site

import (
	"bytes"
	"context"
	"crypto/md5"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/compilefarm/compilefarm/test/e2e"
)

// bucketSite is the site.pp of the environment "bucket": the two usual ways
// of backing files up to the server's filebucket. Filebucket 'main' names
// the farm (server and port, path => false makes it remote) and is every
// file's backup; Filebucket 'puppet' is the bucket `backup => 'puppet'`
// names, made remote (the agent's own server and port). The content
// follows the fact cf_bucket_round, so each round changes both files.
const bucketSite = `filebucket { 'main':
  path   => false,
  server => 'localhost',
  port   => $facts['cf_bucket_port'],
}
filebucket { 'puppet':
  path => false,
}
File { backup => 'main' }

node default {
  file { "${facts['cf_root']}/via-main.txt":
    content => "via main, round ${facts['cf_bucket_round']}\n",
  }
  file { "${facts['cf_root']}/via-puppet.txt":
    content => "via puppet, round ${facts['cf_bucket_round']}\n",
    backup  => 'puppet',
  }
}
`

// fbAddEnv adds environment name to envs with site.pp as its only file: no
// modules directory at all.
func fbAddEnv(t *testing.T, envs, name, site string) {
	t.Helper()
	p := filepath.Join(envs, name, "manifests", "site.pp")
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(site), 0o644); err != nil {
		t.Fatal(err)
	}
}

// filebucket runs `puppet filebucket --remote` as the agent (its
// certificate) against the farm and returns its stdout; a failure fails
// the test with what puppet said.
func filebucket(t *testing.T, a *e2e.Agent, f *e2e.Farm, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	args = append([]string{"filebucket", "--remote", "--server", "localhost", "--serverport", f.Port(),
		"--certname", a.Certname, "--confdir", filepath.Join(a.Dir, "conf"), "--vardir", filepath.Join(a.Dir, "var"),
		"--logdir", filepath.Join(a.Dir, "log"), "--rundir", filepath.Join(a.Dir, "run"),
		"--publicdir", filepath.Join(a.Dir, "public"), "--codedir", filepath.Join(a.Dir, "code"),
		"--ssldir", filepath.Join(a.Dir, "ssl"),
	}, args...)
	cmd := exec.CommandContext(ctx, "puppet", args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("puppet %s: %v\nstdout: %s\nstderr: %s", strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String()
}

// fbAgentErrors returns the agent's error lines, but Facter's about what it
// may not read here (/proc/1/environ in a container): they are the
// machine's, not the farm's.
func fbAgentErrors(out string) string {
	var errs []string
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "Error") && !strings.Contains(l, "Error: Facter: ") {
			errs = append(errs, l)
		}
	}
	return strings.Join(errs, "\n")
}

func fbSum(algo string, b []byte) string {
	if algo == "md5" {
		s := md5.Sum(b)
		return hex.EncodeToString(s[:])
	}
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func fbReadFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func fbWriteFile(t *testing.T, p, content string) {
	t.Helper()
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestFileBucket drives a real agent whose catalog backs files up to the
// farm's filebucket (a named remote bucket as every file's default, and
// backup => 'puppet'), with the default sha256 and with md5, then gets and
// restores the backups with `puppet filebucket`.
func TestFileBucket(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the real puppet agent and broker dev; skipped with -short")
	}
	envs := e2e.CopyExampleEnvs(t)
	fbAddEnv(t, envs, "bucket", bucketSite)
	f := e2e.StartFarm(t, t.TempDir(), envs)
	a := e2e.NewAgent(t, "bucket1.example.test")
	a.SetFact(t, "cf_bucket_port", f.Port())
	viaMain, viaPuppet := filepath.Join(a.Root, "via-main.txt"), filepath.Join(a.Root, "via-puppet.txt")

	// Each round changes files the agent has, backing their old content up
	// with the round's digest algorithm, and the backups come back.
	rounds := []struct {
		algo  string
		extra []string // agent and filebucket arguments
	}{
		{"sha256", nil},
		{"md5", []string{"--digest_algorithm", "md5"}},
	}
	// The agent has the files before the first round.
	fbWriteFile(t, viaMain, "the agent's own main file\n")
	fbWriteFile(t, viaPuppet, "the agent's own puppet file\n")
	for i, round := range rounds {
		ok := t.Run(round.algo, func(t *testing.T) {
			old := map[string]string{viaMain: fbReadFile(t, viaMain), viaPuppet: fbReadFile(t, viaPuppet)}
			a.SetFact(t, "cf_bucket_round", round.algo)
			code, out := a.Run(t, f, append([]string{"--environment", "bucket"}, round.extra...)...)
			if code != 2 || fbAgentErrors(out) != "" {
				t.Fatalf("agent run %d: exit %d, want 2 and no error\n%s", i+1, code, out)
			}
			for p, want := range map[string]string{viaMain: "via main, round " + round.algo + "\n", viaPuppet: "via puppet, round " + round.algo + "\n"} {
				if got := fbReadFile(t, p); got != want {
					t.Fatalf("%s = %q after the run, want %q", p, got, want)
				}
			}
			bucketOf := map[string]string{viaMain: "main", viaPuppet: "puppet"}
			for p, content := range old {
				sum := fbSum(round.algo, []byte(content))
				if want := "Filebucketed " + p + " to " + bucketOf[p] + " with sum " + sum; !strings.Contains(out, want) {
					t.Fatalf("the agent did not say %q:\n%s", want, out)
				}
				// Stored in the farm's data directory, in the filebucket space.
				sha := fbSum("sha256", []byte(content))
				blob := filepath.Join(f.Data, "store", "content", "filebucket", sha[:2], sha)
				if got, err := os.ReadFile(blob); err != nil || string(got) != content {
					t.Fatalf("the farm's bucket has %q (%v) at %s, want the old content of %s %q", got, err, blob, p, content)
				}
				if got := filebucket(t, a, f, append(round.extra, "get", sum)...); got != content {
					t.Fatalf("puppet filebucket get %s printed %q, want %q", sum, got, content)
				}
				filebucket(t, a, f, append(round.extra, "restore", p, sum)...)
				if got := fbReadFile(t, p); got != content {
					t.Fatalf("after puppet filebucket restore %s %s: %q, want %q", p, sum, got, content)
				}
			}
			log := fbReadFile(t, f.LogPath)
			if !strings.Contains(log, "filebucket: backup stored") || !strings.Contains(log, "node="+a.Certname) {
				t.Errorf("the broker log does not record the backups by node")
			}
		})
		if !ok {
			break
		}
	}

	t.Run("puppet filebucket backup", func(t *testing.T) {
		p := filepath.Join(t.TempDir(), "with space & more.txt")
		fbWriteFile(t, p, "backed up by hand\n")
		sum := fbSum("sha256", []byte("backed up by hand\n"))
		if out := filebucket(t, a, f, "backup", p); !strings.Contains(out, sum) {
			t.Fatalf("puppet filebucket backup printed %q, want the sum %s", out, sum)
		}
		if got := filebucket(t, a, f, "get", sum); got != "backed up by hand\n" {
			t.Fatalf("get after backup: %q", got)
		}
	})

	t.Run("unknown routes and double slashes", func(t *testing.T) {
		c := a.TLSClient(t)
		c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
		base := "https://" + f.Addr
		do := func(method, path string, body []byte) (int, http.Header, string) {
			t.Helper()
			req, err := http.NewRequest(method, base+path, bytes.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			resp, err := c.Do(req)
			if err != nil {
				t.Fatalf("%s %s: %v", method, path, err)
			}
			return resp.StatusCode, resp.Header, e2e.ReadAll(resp)
		}
		for _, path := range []string{"/puppet/v3/nosuch?environment=production", "/puppet/v3//environments", "//status/v1/simple", "/nowhere"} {
			status, h, body := do("GET", path, nil)
			var e struct{ Message, Issue_kind string }
			if status != 404 || h.Get("Location") != "" || json.Unmarshal([]byte(body), &e) != nil || e.Issue_kind != "HANDLER_NOT_FOUND" {
				t.Errorf("GET %s: %d (Location %q) %q, want 404 with Puppet's JSON error", path, status, h.Get("Location"), body)
			}
		}
		if status, _, body := do("DELETE", "/puppet/v3/catalog/"+a.Certname+"?environment=bucket", nil); status != 403 || !strings.Contains(body, "(method :delete)") {
			t.Errorf("DELETE of a catalog: %d %q, want 403 Forbidden request", status, body)
		}
		// The filebucket's <sum>//<path> reaches the bucket as sent.
		content := []byte("sent from Go\n")
		key := "/puppet/v3/file_bucket_file/sha256/" + fbSum("sha256", content) + "//srv/odd//name.txt?environment=production"
		if status, h, body := do("PUT", key, content); status != 200 || h.Get("Location") != "" {
			t.Fatalf("PUT %s: %d %q", key, status, body)
		}
		if status, _, body := do("GET", key, nil); status != 200 || body != string(content) {
			t.Fatalf("GET %s: %d %q", key, status, body)
		}
		other := strings.Replace(key, "odd//name", "odd/name", 1)
		if status, _, body := do("GET", other, nil); status != 404 || !strings.Contains(body, "Could not find file_bucket_file") {
			t.Fatalf("GET with the path cleaned (%s): %d %q, want 404", other, status, body)
		}
	})
}

// TestStrictEnvironmentWithoutModules: an agent with strict_environment_mode
// runs in an environment that has no modules directory at all; the farm
// answers its pluginsync as Puppet Server does (the codedir, one directory).
func TestStrictEnvironmentWithoutModules(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the real puppet agent and broker dev; skipped with -short")
	}
	envs := e2e.CopyExampleEnvs(t)
	fbAddEnv(t, envs, "nomodules", "node default { notify { 'hello from an environment without modules': } }\n")
	f := e2e.StartFarm(t, t.TempDir(), envs)
	a := e2e.NewAgent(t, "strict1.example.test")
	for run := 1; run <= 2; run++ {
		code, out := a.Run(t, f, "--environment", "nomodules", "--strict_environment_mode")
		if (code != 0 && code != 2) || fbAgentErrors(out) != "" || !strings.Contains(out, "hello from an environment without modules") {
			t.Fatalf("run %d: exit %d, want 0 or 2 with no error\n%s", run, code, out)
		}
	}
	c := a.TLSClient(t)
	for _, mount := range []string{"plugins", "pluginfacts", "locales"} {
		for _, recurse := range []string{"true", "false"} {
			url := "https://" + f.Addr + "/puppet/v3/file_metadatas/" + mount + "?environment=nomodules&links=follow&recurse=" + recurse + "&source_permissions=ignore&checksum_type=sha256"
			resp, err := c.Get(url)
			if err != nil {
				t.Fatal(err)
			}
			body := e2e.ReadAll(resp)
			var list []struct {
				Path         string `json:"path"`
				RelativePath string `json:"relative_path"`
				Type         string `json:"type"`
			}
			if resp.StatusCode != 200 || json.Unmarshal([]byte(body), &list) != nil || len(list) != 1 ||
				list[0].Path != "/compilefarm" || list[0].RelativePath != "." || list[0].Type != "directory" {
				t.Errorf("%s recurse=%s: %d %s, want 200 and the codedir alone", mount, recurse, resp.StatusCode, body)
			}
		}
	}
}

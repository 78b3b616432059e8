package site

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/compilefarm/compilefarm/test/e2e"
)

// serverEyamlKeys is where a control repo written for Puppet Server keeps
// its eyaml keys (the hiera-eyaml documentation's example).
const serverEyamlKeys = "/etc/puppetlabs/puppet/eyaml"

// TestEyaml runs `broker dev --eyaml-keys DIR` with an environment whose
// hiera.yaml has eyaml_lookup_key levels: one naming its keys under
// /etc/puppetlabs/puppet/eyaml as on Puppet Server (absent here, so found
// by file name in DIR), one naming none (DIR's default pair). The real
// agent writes the decrypted secrets; an unchanged second run compiles
// nothing; no key is in the farm's data (code snapshots included); a wrong
// or missing key gives a new node's agent Puppet's error 500 naming the key
// file and the setting, shows in `broker nodes`, and leaves the catalog of
// the node that has one in place.
func TestEyaml(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: a real broker, Ruby Puppet, hiera-eyaml and a puppet agent; skipped with -short")
	}
	if _, err := os.Stat(serverEyamlKeys); err == nil {
		t.Fatalf("%s exists on this host; the test needs it absent (it checks that key paths that do not exist are found in --eyaml-keys)", serverEyamlKeys)
	}
	keys := t.TempDir()
	private := filepath.Join(keys, "private_key.pkcs7.pem")
	public := filepath.Join(keys, "public_key.pkcs7.pem")
	createEyamlKeys(t, keys)
	dbPassword, apiToken := eyamlSecret(t), eyamlSecret(t)
	dbCipher := encryptEyaml(t, public, dbPassword)

	envs := e2e.CopyExampleEnvs(t)
	writeEyamlEnv(t, filepath.Join(envs, "secrets"), map[string]string{
		"hiera.yaml": "---\nversion: 5\ndefaults:\n  datadir: data\nhierarchy:\n" +
			"  - name: \"Secrets (keys where Puppet Server keeps them)\"\n    lookup_key: eyaml_lookup_key\n    path: secrets.eyaml\n" +
			"    options:\n      pkcs7_private_key: " + serverEyamlKeys + "/private_key.pkcs7.pem\n" +
			"      pkcs7_public_key: " + serverEyamlKeys + "/public_key.pkcs7.pem\n" +
			"  - name: \"Common secrets (default keys)\"\n    lookup_key: eyaml_lookup_key\n    path: common.eyaml\n",
		"data/secrets.eyaml": "---\nsecrets::db_password: " + dbCipher + "\n",
		"data/common.eyaml":  "---\nsecrets::api_token: " + encryptEyaml(t, public, apiToken) + "\n",
		"manifests/site.pp": "node default {\n  $base = $facts['cf_root']\n  file { $base: ensure => directory }\n" +
			"  file { \"${base}/secret.txt\":\n    ensure  => file,\n    mode    => '0600',\n" +
			"    content => \"db password: ${lookup('secrets::db_password')}\\napi token: ${lookup('secrets::api_token')}\\n\",\n  }\n}\n",
	})
	f := e2e.StartFarm(t, t.TempDir(), envs, "--eyaml-keys", keys)

	a := e2e.NewAgent(t, "vault1.example.test")
	code, out := a.Run(t, f, "--environment", "secrets")
	if code != 2 {
		t.Fatalf("first run: exit %d, want 2 (changes applied)\n%s", code, out)
	}
	want := "db password: " + dbPassword + "\napi token: " + apiToken + "\n"
	if got, err := os.ReadFile(filepath.Join(a.Root, "secret.txt")); err != nil || string(got) != want {
		t.Fatalf("secret.txt = %q (%v), want %q", got, err, want)
	}

	// The compile recorded its fact reads, so an unchanged node compiles
	// nothing: decrypting is not a read that always changes.
	before := f.FinishedCompiles()
	if code, out := a.Run(t, f, "--environment", "secrets"); code != 0 {
		t.Fatalf("second run: exit %d, want 0\n%s", code, out)
	}
	if after := f.FinishedCompiles(); after != before {
		t.Errorf("an unchanged second run caused %v compiles, want 0", after-before)
	}

	t.Run("no key in the farm's data", func(t *testing.T) {
		keyBodies := map[string][]byte{}
		for _, p := range []string{private, public} {
			keyBodies[p] = eyamlKeyBody(t, p)
		}
		snapshotted := false // the walk sees the snapshot: its encrypted data is there
		err := filepath.WalkDir(f.Data, func(path string, d fs.DirEntry, err error) error {
			if err != nil || !d.Type().IsRegular() {
				return err
			}
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			snapshotted = snapshotted || bytes.Contains(b, []byte(dbCipher))
			for key, body := range keyBodies {
				if bytes.Contains(b, body) {
					t.Errorf("%s holds the key %s", path, key)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if !snapshotted {
			t.Errorf("no file under %s holds the encrypted data: the walk did not see the code snapshot", f.Data)
		}
	})

	// A broken key fails a new node's compile; the node that has a
	// catalog keeps it.
	other := t.TempDir()
	createEyamlKeys(t, other)
	for _, tt := range []struct {
		name, certname string
		change         func(t *testing.T)
		want           []string // in the agent's output and in broker nodes
	}{
		{
			name:     "another pair",
			certname: "vault2.example.test",
			change: func(t *testing.T) {
				for _, name := range []string{"private_key.pkcs7.pem", "public_key.pkcs7.pem"} {
					copyEyamlKey(t, filepath.Join(other, name), filepath.Join(keys, name))
				}
			},
			want: []string{"eyaml private key " + private + " cannot decrypt this value", "--eyaml-keys"},
		},
		{
			name:     "missing private key",
			certname: "vault3.example.test",
			change: func(t *testing.T) {
				if err := os.Remove(private); err != nil {
					t.Fatal(err)
				}
			},
			want: []string{"eyaml private key " + private + " does not exist",
				"pkcs7_private_key " + serverEyamlKeys + "/private_key.pkcs7.pem does not exist on the compile host", "--eyaml-keys"},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tt.change(t)
			n := e2e.NewAgent(t, tt.certname)
			code, out := n.Run(t, f, "--environment", "secrets")
			if code != 1 {
				t.Fatalf("agent with a broken key: exit %d, want 1\n%s", code, out)
			}
			for _, w := range append([]string{"Could not retrieve catalog from remote server: Error 500", "hiera-eyaml backend error"}, tt.want...) {
				if !strings.Contains(out, w) {
					t.Errorf("agent output lacks %q:\n%s", w, out)
				}
			}
			nodes, err := f.CLI("nodes")
			if err != nil {
				t.Fatalf("broker nodes: %v\n%s", err, nodes)
			}
			_, failures, _ := strings.Cut(nodes, "compile errors:")
			for _, w := range append([]string{tt.certname + ": hiera-eyaml backend error"}, tt.want...) {
				if !strings.Contains(failures, w) {
					t.Errorf("broker nodes' compile errors lack %q:\n%s", w, nodes)
				}
			}
			t.Logf("broker nodes:\n%s", nodes)
			if c := f.Nodes()[tt.certname].Compile; c == nil || c.Result != "failed" {
				t.Errorf("%s's last compile = %+v, want failed", tt.certname, c)
			}
			if code, out := a.Run(t, f, "--environment", "secrets"); code != 0 {
				t.Errorf("the node with a catalog: exit %d, want 0 (its catalog kept)\n%s", code, out)
			}
		})
	}
}

// createEyamlKeys makes hiera-eyaml's PKCS7 pair in dir with its own tool.
func createEyamlKeys(t *testing.T, dir string) {
	t.Helper()
	out, err := exec.Command("eyaml", "createkeys",
		"--pkcs7-private-key="+filepath.Join(dir, "private_key.pkcs7.pem"),
		"--pkcs7-public-key="+filepath.Join(dir, "public_key.pkcs7.pem")).CombinedOutput()
	if err != nil {
		t.Fatalf("eyaml createkeys (hiera-eyaml is needed: run scripts/install-deps.sh): %v\n%s", err, out)
	}
}

// encryptEyaml encrypts plain for the public key, as ENC[PKCS7,...].
func encryptEyaml(t *testing.T, public, plain string) string {
	t.Helper()
	out, err := exec.Command("eyaml", "encrypt", "-o", "string", "-s", plain, "--pkcs7-public-key="+public).Output()
	enc := strings.TrimSpace(string(out))
	if err != nil || !strings.HasPrefix(enc, "ENC[PKCS7,") {
		t.Fatalf("eyaml encrypt: %v: %q", err, enc)
	}
	return enc
}

func eyamlSecret(t *testing.T) string {
	t.Helper()
	b := make([]byte, 12)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return "s3cr3t-" + hex.EncodeToString(b)
}

// eyamlKeyBody is a line from the middle of a PEM file's base64 body: a copy of
// the key anywhere holds it.
func eyamlKeyBody(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := bytes.Split(bytes.TrimSpace(b), []byte("\n"))
	if len(lines) < 5 {
		t.Fatalf("%s is not a PEM file", path)
	}
	return lines[len(lines)/2]
}

func writeEyamlEnv(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func copyEyamlKey(t *testing.T, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

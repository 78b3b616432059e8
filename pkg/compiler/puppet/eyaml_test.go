package puppet

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/compilefarm/compilefarm/pkg/compiler"
	"github.com/compilefarm/compilefarm/pkg/farm"
)

const eyamlHint = "hiera-eyaml is needed; run scripts/install-deps.sh"

// eyamlCreateKeys makes a PKCS7 key pair with hiera-eyaml's own tool, at
// the paths given.
func eyamlCreateKeys(t testing.TB, private, public string) {
	t.Helper()
	out, err := exec.Command("eyaml", "createkeys", "--pkcs7-private-key="+private, "--pkcs7-public-key="+public).CombinedOutput()
	if err != nil {
		t.Fatalf("eyaml createkeys: %v\n%s(%s)", err, out, eyamlHint)
	}
}

// eyamlEncrypt encrypts plain for the public key, as ENC[PKCS7,...].
func eyamlEncrypt(t testing.TB, public, plain string) string {
	t.Helper()
	out, err := exec.Command("eyaml", "encrypt", "-o", "string", "-s", plain, "--pkcs7-public-key="+public).Output()
	if err != nil {
		t.Fatalf("eyaml encrypt: %v (%s)", err, eyamlHint)
	}
	enc := strings.TrimSpace(string(out))
	if !strings.HasPrefix(enc, "ENC[PKCS7,") {
		t.Fatalf("eyaml encrypt printed %q", enc)
	}
	return enc
}

// TestEyaml compiles Hiera levels with lookup_key eyaml_lookup_key: one
// naming key paths that do not exist here (found by file name in
// EyamlKeys), one naming keys at paths that exist (used as written), one
// naming none (EyamlKeys' default pair); then the errors of missing, wrong
// and unusable keys, and of a farm without EyamlKeys.
func TestEyaml(t *testing.T) {
	if testing.Short() {
		t.Skip("needs Ruby Puppet and hiera-eyaml; skipped with -short")
	}
	keys := t.TempDir() // EyamlKeys
	private := filepath.Join(keys, "private_key.pkcs7.pem")
	public := filepath.Join(keys, "public_key.pkcs7.pem")
	eyamlCreateKeys(t, private, public)
	team := t.TempDir() // a pair at paths that exist, named as written
	eyamlCreateKeys(t, filepath.Join(team, "team_private.pem"), filepath.Join(team, "team_public.pem"))
	other := t.TempDir() // a pair that encrypted nothing here
	eyamlCreateKeys(t, filepath.Join(other, "private_key.pkcs7.pem"), filepath.Join(other, "public_key.pkcs7.pem"))
	absent := filepath.Join(t.TempDir(), "etc", "puppetlabs", "puppet", "eyaml") // as a Puppet Server's hiera.yaml names them

	envpath := t.TempDir()
	writeTree(t, filepath.Join(envpath, "production"), map[string]string{
		"hiera.yaml": "---\nversion: 5\ndefaults:\n  datadir: data\nhierarchy:\n" +
			"  - name: per role, keys as on Puppet Server\n    lookup_key: eyaml_lookup_key\n    path: \"roles/%{facts.role}.eyaml\"\n" +
			"    options:\n      pkcs7_private_key: " + absent + "/private_key.pkcs7.pem\n      pkcs7_public_key: " + absent + "/public_key.pkcs7.pem\n" +
			"  - name: team keys at paths that exist\n    lookup_key: eyaml_lookup_key\n    path: team.eyaml\n" +
			"    options:\n      pkcs7_private_key: " + team + "/team_private.pem\n      pkcs7_public_key: " + team + "/team_public.pem\n" +
			"  - name: default keys\n    lookup_key: eyaml_lookup_key\n    path: common.eyaml\n" +
			"  - name: plain\n    data_hash: yaml_data\n    path: common.yaml\n",
		"data/roles/db.eyaml": "---\nsecret::role: " + eyamlEncrypt(t, public, "role secret") + "\n",
		"data/team.eyaml":     "---\nsecret::team: " + eyamlEncrypt(t, filepath.Join(team, "team_public.pem"), "team secret") + "\n",
		// Decrypted values are interpolated like any Hiera value.
		"data/common.eyaml": "---\nsecret::common: " + eyamlEncrypt(t, public, "common secret of %{facts.owner}") + "\n",
		"data/common.yaml":  "---\nplain: not encrypted\n",
		"manifests/site.pp": "node default {\n" +
			"  notify { 'secrets': message => \"${lookup('secret::role')}|${lookup('secret::team')}|${lookup('secret::common')}|${lookup('plain')}\" }\n}\n" +
			"node 'common.example.test' {\n  notify { 'secrets': message => lookup('secret::common') }\n}\n" +
			"node 'plain.example.test' {\n  notify { 'secrets': message => lookup('plain') }\n}\n",
	})
	req := compiler.Request{
		Certname: "db1.example.test", Environment: "production", CodeID: "eyaml", EnvironmentPath: envpath,
		Facts: map[string]any{"role": "db", "owner": "ops", "unread": "x"},
	}
	const want = "role secret|team secret|common secret of ops|not encrypted"
	e := newEngine(t, Options{EyamlKeys: keys})

	t.Run("decrypts", func(t *testing.T) {
		res, err := e.Compile(t.Context(), req)
		if err != nil {
			t.Fatalf("compile: %v", err)
		}
		c := parseCatalog(t, res.Catalog)
		if r := c.resource("Notify", "secrets"); r == nil || r.Parameters["message"] != want {
			t.Fatalf("Notify[secrets] = %+v, want message %q", r, want)
		}
		// Decrypting reads no fact; the hierarchy path and the decrypted
		// value's interpolation do.
		if res.Reads == nil {
			t.Fatal("no fact reads recorded")
		}
		var reads []string
		for _, r := range res.Reads.Reads {
			reads = append(reads, describe(r))
		}
		slices.Sort(reads)
		wantReads := append(slices.Clone(baselineReads), "value owner", "value role")
		slices.Sort(wantReads)
		if !slices.Equal(reads, wantReads) || res.Reads.AlwaysRecompile {
			t.Errorf("reads = %q (always %v), want %q", reads, res.Reads.AlwaysRecompile, wantReads)
		}
	})

	// Each case changes the keys directory, compiles, and puts it back.
	replace := func(t *testing.T, path string, content []byte) {
		t.Helper()
		old, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := os.WriteFile(path, old, 0o600); err != nil {
				t.Errorf("restore %s: %v", path, err)
			}
		})
		if content == nil {
			err = os.Remove(path)
		} else {
			err = os.WriteFile(path, content, 0o600)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	otherPrivate, err := os.ReadFile(filepath.Join(other, "private_key.pkcs7.pem"))
	if err != nil {
		t.Fatal(err)
	}
	otherPublic, err := os.ReadFile(filepath.Join(other, "public_key.pkcs7.pem"))
	if err != nil {
		t.Fatal(err)
	}
	errorCases := []struct {
		name   string
		change func(t *testing.T)
		want   []string // in the compile error's message
	}{
		{
			name:   "missing private key",
			change: func(t *testing.T) { replace(t, private, nil) },
			want: []string{"eyaml private key " + private + " does not exist",
				"pkcs7_private_key " + absent + "/private_key.pkcs7.pem does not exist on the compile host", "--eyaml-keys", "COMPILEFARM_EYAML_KEYS"},
		},
		{
			name:   "missing public key",
			change: func(t *testing.T) { replace(t, public, nil) },
			want:   []string{"eyaml public key " + public + " does not exist", "--eyaml-keys"},
		},
		{
			name:   "another pair's private key",
			change: func(t *testing.T) { replace(t, private, otherPrivate) },
			want:   []string{"eyaml private key " + private + " cannot decrypt this value", "another key pair", "--eyaml-keys"},
		},
		{
			name:   "another pair",
			change: func(t *testing.T) { replace(t, private, otherPrivate); replace(t, public, otherPublic) },
			want:   []string{"eyaml private key " + private + " cannot decrypt this value", "--eyaml-keys"},
		},
		{
			name:   "private key not PEM",
			change: func(t *testing.T) { replace(t, private, []byte("not a key\n")) },
			want:   []string{"eyaml private key " + private + " is not a PEM RSA private key", "--eyaml-keys"},
		},
		{
			name:   "public key not PEM",
			change: func(t *testing.T) { replace(t, public, []byte("not a certificate\n")) },
			want:   []string{"eyaml public key " + public + " is not a PEM certificate", "--eyaml-keys"},
		},
	}
	for _, tt := range errorCases {
		t.Run(tt.name, func(t *testing.T) {
			tt.change(t)
			_, err := e.Compile(t.Context(), req)
			checkEyamlError(t, err, "secret::role", tt.want)
		})
	}

	t.Run("keys back in place", func(t *testing.T) {
		c := compileOK(t, e, req)
		if r := c.resource("Notify", "secrets"); r == nil || r.Parameters["message"] != want {
			t.Errorf("Notify[secrets] = %+v, want message %q", r, want)
		}
	})

	t.Run("no keys directory", func(t *testing.T) {
		// An engine without EyamlKeys: key paths that exist still work;
		// levels without one fail, saying what to set.
		plain := sharedEngine(t)
		_, err := plain.Compile(t.Context(), req)
		checkEyamlError(t, err, "secret::role", []string{
			"pkcs7_private_key " + absent + "/private_key.pkcs7.pem does not exist on the compile host, and no eyaml keys directory is set",
			"--eyaml-keys", "COMPILEFARM_EYAML_KEYS"})

		noLevelKeys := req
		noLevelKeys.Certname = "common.example.test" // looks up a value of the level that names no key
		_, err = plain.Compile(t.Context(), noLevelKeys)
		checkEyamlError(t, err, "secret::common", []string{
			"the hierarchy level names no pkcs7_private_key, and no eyaml keys directory is set", "--eyaml-keys"})

		other := req
		other.Certname = "plain.example.test" // no eyaml lookup: unaffected
		if r := compileOK(t, plain, other).resource("Notify", "secrets"); r == nil || r.Parameters["message"] != "not encrypted" {
			t.Errorf("Notify[secrets] = %+v", r)
		}
	})
}

// checkEyamlError checks that err is a compile error of the lookup of key,
// in Puppet's words, whose message has every string in want.
func checkEyamlError(t *testing.T, err error, key string, want []string) {
	t.Helper()
	var ce *compiler.CompileError
	if !errors.As(err, &ce) {
		t.Fatalf("err = %v (%T), want a *compiler.CompileError", err, err)
	}
	for _, w := range append([]string{"hiera-eyaml backend error decrypting ENC[PKCS7,", "when looking up " + key + " in "}, want...) {
		if !strings.Contains(ce.Message, w) {
			t.Errorf("compile error lacks %q:\n%s", w, ce.Message)
		}
	}
}

// TestEyamlNewErrors checks the keys directory New accepts.
func TestEyamlNewErrors(t *testing.T) {
	file := filepath.Join(t.TempDir(), "keys.pem")
	if err := os.WriteFile(file, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, dir := range map[string]string{
		"missing":       filepath.Join(t.TempDir(), "nosuch"),
		"not directory": file,
	} {
		t.Run(name, func(t *testing.T) {
			e, err := New(t.Context(), Options{WorkDir: t.TempDir(), Logger: testLogger(), EyamlKeys: dir})
			if err == nil {
				e.Close()
				t.Fatal("New succeeded")
			}
			if !errors.Is(err, farm.ErrInvalid) || !strings.Contains(err.Error(), "eyaml keys directory") || !strings.Contains(err.Error(), dir) {
				t.Errorf("err = %v, want farm.ErrInvalid naming the eyaml keys directory %s", err, dir)
			}
		})
	}
}

package main

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"

	"github.com/compilefarm/compilefarm/internal/emulator"
	"github.com/compilefarm/compilefarm/pkg/compiler/puppet"
)

func TestPuppetDB(t *testing.T) {
	const certPEM = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, []byte("CA FILE"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := func(vars map[string]string) func(string) string {
		return func(k string) string { return vars[k] }
	}
	p, err := puppetDB(env(nil))
	if p != nil || err != nil {
		t.Fatalf("unset: %+v, %v; want no PuppetDB", p, err)
	}
	p, err = puppetDB(env(map[string]string{
		"COMPILEFARM_PUPPETDB":      "https://pdb1:8081, https://pdb2:8081",
		"COMPILEFARM_PUPPETDB_CA":   caFile,
		"COMPILEFARM_PUPPETDB_CERT": certPEM,
		"COMPILEFARM_PUPPETDB_KEY":  "  " + certPEM,
	}))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(p.URLs, []string{"https://pdb1:8081", "https://pdb2:8081"}) || string(p.CACert) != "CA FILE" ||
		string(p.Cert) != certPEM || !strings.Contains(string(p.Key), "BEGIN CERTIFICATE") {
		t.Fatalf("got %+v", p)
	}
	_, err = puppetDB(env(map[string]string{"COMPILEFARM_PUPPETDB": "https://pdb1:8081", "COMPILEFARM_PUPPETDB_KEY": "/nonexistent/key.pem"}))
	if err == nil || !strings.Contains(err.Error(), "COMPILEFARM_PUPPETDB_KEY") {
		t.Fatalf("unreadable key file: %v, want an error naming the variable", err)
	}
}

// TestPuppetDBSecrets: the identity and CA the stack keeps in Secrets
// Manager (the emulator) fill the engine's PuppetDB at init; a secret that
// is missing or not the JSON the stack documents is an error naming it.
func TestPuppetDBSecrets(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the Secrets Manager emulator; skipped with -short")
	}
	ctx := t.Context()
	sm := secretsmanager.New(secretsmanager.Options{
		Region: "us-east-1", Credentials: credentials.NewStaticCredentialsProvider("test", "test", ""), BaseEndpoint: aws.String(emu.URL),
	})
	// Names of this run's own: the emulator outlives a -count=N run.
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	put := func(name, value string) string {
		out, err := sm.CreateSecret(ctx, &secretsmanager.CreateSecretInput{Name: aws.String(name + "-" + run), SecretString: aws.String(value)})
		if err != nil {
			t.Fatal(err)
		}
		return aws.ToString(out.ARN)
	}
	id := put("compilefarm/test/puppetdb-identity", `{"cert":"CERT PEM","key":"KEY PEM"}`)
	ca := put("compilefarm/test/puppetdb-ca", "CA PEM")
	bad := put("compilefarm/test/puppetdb-identity-bad", `CERT PEM`)
	env := func(vars map[string]string) func(string) string { return func(k string) string { return vars[k] } }

	p := &puppet.PuppetDB{URLs: []string{"https://pdb:8081"}}
	if err := puppetDBSecrets(ctx, sm, env(map[string]string{"COMPILEFARM_PUPPETDB_IDENTITY_SECRET": id, "COMPILEFARM_PUPPETDB_CA_SECRET": ca}), p); err != nil {
		t.Fatal(err)
	}
	if string(p.Cert) != "CERT PEM" || string(p.Key) != "KEY PEM" || string(p.CACert) != "CA PEM" {
		t.Errorf("from the secrets: %+v", p)
	}
	for name, secret := range map[string]string{"not JSON": bad, "missing": "arn:aws:secretsmanager:us-east-1:000000000000:secret:nope"} {
		err := puppetDBSecrets(ctx, sm, env(map[string]string{"COMPILEFARM_PUPPETDB_IDENTITY_SECRET": secret}), &puppet.PuppetDB{})
		if err == nil || !strings.Contains(err.Error(), "COMPILEFARM_PUPPETDB_IDENTITY_SECRET") {
			t.Errorf("%s secret: %v, want an error naming the variable", name, err)
		}
	}
}

var emu *emulator.Process

func TestMain(m *testing.M) { emulator.Main(m, emulator.SecretsManager(&emu)) }

package aws

import (
	"context"
	"crypto"
	"crypto/x509"
	"encoding/pem"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/kms"
	kmstypes "github.com/aws/aws-sdk-go-v2/service/kms/types"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"

	"github.com/compilefarm/compilefarm/pkg/pki"
	"github.com/compilefarm/compilefarm/test/e2e"
)

// TestCAKeyInKMSAWS: the fleet's CA signs inside KMS with a key made as
// the CDK stack makes it (RSA_4096, SIGN_VERIFY, under an alias), named by
// its ARN as the stack's CAKmsKey output names it. `broker ca init` uses
// that key and makes none; the CA certificate carries the key KMS holds
// (GetPublicKey); a real agent enrols and runs (exit 2, then 0) and its
// certificate verifies against the CA certificate; after `broker ca
// revoke` of another node the agent refreshes its CRL, which verifies
// against the CA certificate and lists the node; the front door signed
// through kms:Sign and never called Secrets Manager; and no CA private key
// is anywhere the brokers (and ca init) wrote, nor in Secrets Manager.
func TestCAKeyInKMSAWS(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: emulators, real brokers, Ruby Puppet and a puppet agent; skipped with -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	a := e2e.StartAWS(t, ctx)
	// Every process's temporary files (ca init's among them) go where the
	// scan below looks.
	scratch := t.TempDir()
	a.Env = append(a.Env, "TMPDIR="+scratch)
	kc := kmsClient(a)
	keyARN := stackKey(t, ctx, kc, "alias/compilefarm/test/ca")
	a.CAKeyArgs = []string{"--ca-key-kms", keyARN}

	envs := e2e.CopyExampleEnvs(t)
	doors, _ := a.StartFleet(t, ctx, envs, []string{"--certname", "door1.example.test"})
	door := doors[0]
	if keys := listKeys(t, ctx, kc); len(keys) != 1 || keys[0] != keyARN {
		t.Fatalf("KMS keys after ca init: %v, want only the stack's %s", keys, keyARN)
	}

	agent := e2e.NewAgent(t, "kms1.example.test")
	if code, out := agent.Run(t, door); code != 2 {
		t.Fatalf("first run: exit %d, want 2\n%s", code, out)
	}
	if code, out := agent.Run(t, door); code != 0 {
		t.Fatalf("second run: exit %d, want 0\n%s", code, out)
	}
	out, err := kc.GetPublicKey(ctx, &kms.GetPublicKeyInput{KeyId: aws.String(keyARN)})
	if err != nil {
		t.Fatal(err)
	}
	kmsPub, err := x509.ParsePKIXPublicKey(out.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert := checkEnrolled(t, agent, kmsPub)

	revoked := e2e.Enrol(t, door, "revoked.example.test")
	revokedSerial := signedSerial(t, door, revoked.Certname)
	if out, err := door.CLI("ca", "revoke", revoked.Certname); err != nil {
		t.Fatalf("ca revoke %s: %v\n%s", revoked.Certname, err, out)
	}
	time.Sleep(2 * time.Second) // the agent refreshes a CRL over crl_refresh_interval old, in whole seconds
	if code, out := agent.Run(t, door, "--crl_refresh_interval", "1s"); code != 0 || !strings.Contains(out, "Refreshing CRL") {
		t.Fatalf("run refreshing the CRL after the revocation: exit %d, want 0 and the new CRL\n%s", code, out)
	}
	crl := readCRL(t, filepath.Join(agent.Dir, "ssl", "crl.pem"))
	if err := crl.CheckSignatureFrom(caCert); err != nil {
		t.Fatalf("the agent's CRL does not verify against the CA certificate: %v", err)
	}
	if !crlLists(crl, revokedSerial) {
		t.Fatalf("the agent's CRL (number %v) does not list %s's serial %s", crl.Number, revoked.Certname, revokedSerial)
	}

	calls := awsCalls(t, door)
	var signs, secrets float64
	for sample, v := range calls {
		name, op, _ := parseSample(sample)
		switch {
		case name != "compilefarm_aws_calls_total":
		case op.service == "KMS" && op.operation == "Sign":
			signs += v
		case op.service == "Secrets Manager":
			secrets += v
		}
	}
	// The front door's own certificate, the agent's and revoked's, and a CRL.
	if signs < 4 || secrets != 0 {
		t.Errorf("the front door made %v kms:Sign and %v Secrets Manager calls, want at least 4 and none", signs, secrets)
	}

	dirs := []string{scratch, door.Work}
	if n := scanForKey(t, caCert.PublicKey, dirs...); n == 0 {
		t.Fatalf("no private key at all under %v: the scan looks in the wrong place", dirs)
	}
	checkNoKeyInSecrets(t, ctx, a, caCert.PublicKey)
}

// kmsClient is a KMS client of a's emulator.
func kmsClient(a *e2e.AWS) *kms.Client {
	return kms.New(kms.Options{Region: "us-east-1", Credentials: credentials.NewStaticCredentialsProvider("test", "test", ""),
		BaseEndpoint: aws.String(a.KMSURL)})
}

// stackKey makes the CA key as the CDK stack does (an RSA_4096 signing
// key under alias) and returns its ARN.
func stackKey(t *testing.T, ctx context.Context, kc *kms.Client, alias string) string {
	t.Helper()
	out, err := kc.CreateKey(ctx, &kms.CreateKeyInput{KeySpec: kmstypes.KeySpecRsa4096, KeyUsage: kmstypes.KeyUsageTypeSignVerify,
		Description: aws.String("compilefarm test: the stack's CA key")})
	if err != nil {
		t.Fatalf("create the CA key in KMS: %v", err)
	}
	if _, err := kc.CreateAlias(ctx, &kms.CreateAliasInput{AliasName: aws.String(alias), TargetKeyId: out.KeyMetadata.KeyId}); err != nil {
		t.Fatalf("create alias %s: %v", alias, err)
	}
	return aws.ToString(out.KeyMetadata.Arn)
}

// listKeys returns the ARNs of every key in KMS.
func listKeys(t *testing.T, ctx context.Context, kc *kms.Client) []string {
	t.Helper()
	var arns []string
	p := kms.NewListKeysPaginator(kc, &kms.ListKeysInput{})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			t.Fatalf("list KMS keys: %v", err)
		}
		for _, k := range page.Keys {
			arns = append(arns, aws.ToString(k.KeyArn))
		}
	}
	return arns
}

// checkEnrolled checks what a real agent's enrolment left in its ssldir:
// the CA certificate carries caPub, and the agent's certificate verifies
// against it for client authentication. It returns the CA certificate.
func checkEnrolled(t *testing.T, agent *e2e.Agent, caPub crypto.PublicKey) *x509.Certificate {
	t.Helper()
	certs := filepath.Join(agent.Dir, "ssl", "certs")
	caCert := readCert(t, filepath.Join(certs, "ca.pem"))
	if !pki.PublicKeysEqual(caCert.PublicKey, caPub) {
		t.Fatalf("the CA certificate the agent holds (%s) does not carry the CA key", caCert.Subject)
	}
	if err := caCert.CheckSignatureFrom(caCert); err != nil {
		t.Fatalf("the CA certificate's own signature: %v", err)
	}
	leaf := readCert(t, filepath.Join(certs, agent.Certname+".pem"))
	roots := x509.NewCertPool()
	roots.AddCert(caCert)
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Fatalf("%s's certificate does not verify against the CA certificate: %v", agent.Certname, err)
	}
	return caCert
}

func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	block := readPEM(t, path, "CERTIFICATE")
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return c
}

func readCRL(t *testing.T, path string) *x509.RevocationList {
	t.Helper()
	block := readPEM(t, path, "X509 CRL")
	crl, err := x509.ParseRevocationList(block.Bytes)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return crl
}

func readPEM(t *testing.T, path, typ string) *pem.Block {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(data)
	if block == nil || block.Type != typ {
		t.Fatalf("%s holds no %s PEM block", path, typ)
	}
	return block
}

// signedSerial is the serial of certname's certificate, as `broker ca
// list` shows it (its third column).
func signedSerial(t *testing.T, f *e2e.Farm, certname string) string {
	t.Helper()
	list, err := f.CLI("ca", "list")
	if err != nil {
		t.Fatalf("ca list: %v\n%s", err, list)
	}
	for _, line := range strings.Split(list, "\n") {
		if fields := strings.Fields(line); len(fields) >= 3 && fields[0] == certname && fields[1] == "signed" {
			return fields[2]
		}
	}
	t.Fatalf("ca list shows no certificate of %s:\n%s", certname, list)
	return ""
}

// crlLists reports whether crl revokes the certificate of serial (as ca
// list shows it).
func crlLists(crl *x509.RevocationList, serial string) bool {
	for _, e := range crl.RevokedCertificateEntries {
		if pki.FormatSerial(e.SerialNumber) == serial {
			return true
		}
	}
	return false
}

// scanForKey reads every file under dirs and fails the test when a PEM
// private key in one is the private half of caPub. It returns how many
// private keys it saw (front doors keep their own: a scan that sees none
// looked in the wrong place).
func scanForKey(t *testing.T, caPub crypto.PublicKey, dirs ...string) int {
	t.Helper()
	seen := 0
	for _, dir := range dirs {
		err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil || !d.Type().IsRegular() {
				return err
			}
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			n, isCA := privateKeys(data, caPub)
			seen += n
			if isCA {
				t.Errorf("%s holds the CA's private key", path)
			}
			return nil
		})
		if err != nil {
			t.Fatalf("scan %s: %v", dir, err)
		}
	}
	return seen
}

// privateKeys counts the PEM private keys in data and says whether one of
// them is caPub's private half.
func privateKeys(data []byte, caPub crypto.PublicKey) (n int, isCA bool) {
	for {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			return n, isCA
		}
		if !strings.HasSuffix(block.Type, "PRIVATE KEY") {
			continue
		}
		n++
		key, err := pki.ParsePrivateKey(pem.EncodeToMemory(block))
		if err == nil && pki.PublicKeysEqual(caPub, key.Public()) {
			isCA = true
		}
	}
}

// checkNoKeyInSecrets fails the test when any secret of a's Secrets
// Manager holds caPub's private half.
func checkNoKeyInSecrets(t *testing.T, ctx context.Context, a *e2e.AWS, caPub crypto.PublicKey) {
	t.Helper()
	sm := secretsmanager.New(secretsmanager.Options{Region: "us-east-1", Credentials: credentials.NewStaticCredentialsProvider("test", "test", ""),
		BaseEndpoint: aws.String(a.SecretsURL)})
	p := secretsmanager.NewListSecretsPaginator(sm, &secretsmanager.ListSecretsInput{})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			t.Fatalf("list secrets: %v", err)
		}
		for _, s := range page.SecretList {
			v, err := sm.GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: s.ARN})
			if err != nil {
				t.Fatalf("read secret %s: %v", aws.ToString(s.Name), err)
			}
			if _, isCA := privateKeys(append([]byte(aws.ToString(v.SecretString)), v.SecretBinary...), caPub); isCA {
				t.Errorf("secret %s holds the CA's private key", aws.ToString(s.Name))
			}
		}
	}
}

package emulator

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
)

// Install scripts of the emulators.
const (
	S3InstallScript       = "scripts/emulators/s3.sh"
	DynamoDBInstallScript = "scripts/emulators/dynamodb.sh"
	SQSInstallScript      = "scripts/emulators/sqs.sh"
	SecretsInstallScript  = "scripts/emulators/secretsmanager.sh"
	KMSInstallScript      = "scripts/emulators/kms.sh"
)

// installed returns the path of rel under ToolsDir, or an error naming
// what is missing and the script that installs it.
func installed(what, script string, rel ...string) (string, error) {
	tools, err := ToolsDir()
	if err != nil {
		return "", err
	}
	p := filepath.Join(append([]string{tools}, rel...)...)
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("%s is not installed: run %s (make test does): %w", what, script, err)
	}
	return p, nil
}

// StartS3 runs versitygw (installed by scripts/emulators/s3.sh) on a free
// loopback port, serving buckets from directories under root, with
// credentials test/test.
func StartS3(ctx context.Context, root string) (*Process, error) {
	bin, err := installed("S3 emulator versitygw", S3InstallScript, "versitygw")
	if err != nil {
		return nil, err
	}
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	return start(ctx, "S3 (versitygw)", port, nil,
		bin, "--port", "127.0.0.1:"+strconv.Itoa(port), "--access", "test", "--secret", "test", "posix", root)
}

// StartDynamoDB runs dynalite (installed by scripts/emulators/dynamodb.sh)
// on a free loopback port, with instant table changes. A small shell ends
// it when this process is gone (whileAlive).
func StartDynamoDB(ctx context.Context) (*Process, error) {
	bin, err := installed("DynamoDB emulator dynalite", DynamoDBInstallScript, "dynalite", "node_modules", ".bin", "dynalite")
	if err != nil {
		return nil, err
	}
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	return start(ctx, "DynamoDB (dynalite)", port, nil,
		whileAlive(bin, "--host", "127.0.0.1", "--port", strconv.Itoa(port),
			"--createTableMs", "0", "--deleteTableMs", "0", "--updateTableMs", "0")...)
}

// StartSQS runs fauxqs (installed by scripts/emulators/sqs.sh) on a free
// loopback port; a preload keeps it off other interfaces.
func StartSQS(ctx context.Context) (*Process, error) {
	cli, err := installed("SQS emulator fauxqs", SQSInstallScript, "fauxqs", "node_modules", "fauxqs", "dist", "cli.js")
	if err != nil {
		return nil, err
	}
	tools, _ := ToolsDir() // installed found it
	preload := filepath.Join(tools, "..", "scripts", "emulators", "loopback.js")
	if _, err := os.Stat(preload); err != nil {
		return nil, fmt.Errorf("loopback preload for the SQS emulator is missing: %v", err)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		return nil, fmt.Errorf("node (20+) is needed to run the SQS emulator; install it, then run %s: %v", SQSInstallScript, err)
	}
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	return start(ctx, "SQS (fauxqs)", port,
		[]string{"FAUXQS_PORT=" + strconv.Itoa(port), "FAUXQS_LOGGER=false"},
		node, "--require", preload, cli)
}

// motoPython runs the Secrets Manager emulator: Debian's own python3, whose
// Debian packages supply moto's dependencies, never whatever python3 is
// first on PATH. scripts/emulators/secretsmanager.sh unpacks Debian's
// python3-moto for it into ToolsDir/moto/lib.
const motoPython = "/usr/bin/python3"

// StartSecretsManager runs moto's server (installed by
// scripts/emulators/secretsmanager.sh) on a free loopback port, for AWS
// Secrets Manager. Like dynalite it is ended when this process is gone.
func StartSecretsManager(ctx context.Context) (*Process, error) {
	server, err := installed("Secrets Manager emulator moto", SecretsInstallScript, "moto", "lib", "moto", "server.py")
	if err != nil {
		return nil, err
	}
	lib := filepath.Dir(filepath.Dir(server)) // .tools/moto/lib
	if _, err := os.Stat(motoPython); err != nil {
		return nil, fmt.Errorf("the Secrets Manager emulator runs with Debian's %s: run %s: %w", motoPython, SecretsInstallScript, err)
	}
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	// -s: no user site-packages; PYTHONPATH puts the unpacked moto first.
	return start(ctx, "Secrets Manager (moto)", port, []string{"PYTHONPATH=" + lib},
		whileAlive(motoPython, "-s", "-m", "moto.server", "-H", "127.0.0.1", "-p", strconv.Itoa(port))...)
}

// StartKMS runs local-kms (built by scripts/emulators/kms.sh from
// scripts/emulators/kms, which keeps it on loopback, serves one request at
// a time and signs in Go's FIPS 140-3 mode) on a free loopback port, for
// AWS KMS, keeping its keys in dir. Like dynalite it is ended when this
// process is gone. Moto, which serves Secrets Manager, is no KMS emulator
// for signing: moto 5.1 ignores MessageType DIGEST (it hashes the digest
// again) and signs RSASSA-PSS with the longest salt, not the digest's
// length.
func StartKMS(ctx context.Context, dir string) (*Process, error) {
	bin, err := installed("KMS emulator local-kms", KMSInstallScript, "local-kms", "local-kms")
	if err != nil {
		return nil, err
	}
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	return start(ctx, "KMS (local-kms)", port, nil,
		whileAlive(bin, "-listen", "127.0.0.1:"+strconv.Itoa(port), "-data", dir, "-region", "us-east-1")...)
}

// whileAlive wraps argv in a small shell that ends it when this process is
// gone, even if a test binary dies without stopping the emulator.
func whileAlive(argv ...string) []string {
	watch := `"$0" "$@" & child=$!
while kill -0 ` + strconv.Itoa(os.Getpid()) + ` 2>/dev/null && kill -0 $child 2>/dev/null; do sleep 1; done
kill $child 2>/dev/null; wait $child`
	return append([]string{"/bin/sh", "-c", watch}, argv...)
}

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
	SecretsInstallScript  = "scripts/emulators/secretsmanager.sh"
)

// StartS3 runs versitygw (installed by scripts/emulators/s3.sh) on a free
// loopback port, serving buckets from directories under root, with
// credentials test/test.
func StartS3(ctx context.Context, root string) (*Process, error) {
	tools, err := ToolsDir()
	if err != nil {
		return nil, err
	}
	bin := filepath.Join(tools, "versitygw")
	if _, err := os.Stat(bin); err != nil {
		return nil, fmt.Errorf("S3 emulator versitygw is not installed: run %s: %w", S3InstallScript, err)
	}
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	return Start(ctx, "S3 (versitygw)", port, S3InstallScript, nil,
		bin, "--port", "127.0.0.1:"+strconv.Itoa(port), "--access", "test", "--secret", "test", "posix", root)
}

// StartDynamoDB runs dynalite (installed by scripts/emulators/dynamodb.sh)
// on a free loopback port, with instant table changes. A small shell ends
// it when this process is gone, even if a test binary dies without
// stopping it.
func StartDynamoDB(ctx context.Context) (*Process, error) {
	tools, err := ToolsDir()
	if err != nil {
		return nil, err
	}
	bin := filepath.Join(tools, "dynalite", "node_modules", ".bin", "dynalite")
	if _, err := os.Stat(bin); err != nil {
		return nil, fmt.Errorf("DynamoDB emulator dynalite is not installed: run %s: %w", DynamoDBInstallScript, err)
	}
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	return Start(ctx, "DynamoDB (dynalite)", port, DynamoDBInstallScript, nil,
		whileAlive(bin, "--host", "127.0.0.1", "--port", strconv.Itoa(port),
			"--createTableMs", "0", "--deleteTableMs", "0", "--updateTableMs", "0")...)
}

// StartSecretsManager runs moto's server (checked by
// scripts/emulators/secretsmanager.sh; $PYTHON, default python3) on a free
// loopback port, for AWS Secrets Manager. Like dynalite it is ended when
// this process is gone.
func StartSecretsManager(ctx context.Context) (*Process, error) {
	py := os.Getenv("PYTHON")
	if py == "" {
		py = "python3"
	}
	if err := exec.CommandContext(ctx, py, "-c", "import moto.server, flask_cors").Run(); err != nil {
		return nil, fmt.Errorf("Secrets Manager emulator (moto's server mode) is not installed for %s: run %s: %w", py, SecretsInstallScript, err)
	}
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	return Start(ctx, "Secrets Manager (moto)", port, SecretsInstallScript, nil,
		whileAlive(py, "-m", "moto.server", "-H", "127.0.0.1", "-p", strconv.Itoa(port))...)
}

// whileAlive wraps argv in a small shell that ends it when this process is
// gone, even if a test binary dies without stopping the emulator.
func whileAlive(argv ...string) []string {
	watch := `"$0" "$@" & child=$!
while kill -0 ` + strconv.Itoa(os.Getpid()) + ` 2>/dev/null && kill -0 $child 2>/dev/null; do sleep 1; done
kill $child 2>/dev/null; wait $child`
	return append([]string{"/bin/sh", "-c", watch}, argv...)
}

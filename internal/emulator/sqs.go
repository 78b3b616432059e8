package emulator

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
)

// SQSInstallScript installs the SQS emulator.
const SQSInstallScript = "scripts/emulators/sqs.sh"

// StartSQS runs fauxqs (installed by scripts/emulators/sqs.sh) on a free
// loopback port; a preload keeps it off other interfaces.
func StartSQS(ctx context.Context) (*Process, error) {
	tools, err := ToolsDir()
	if err != nil {
		return nil, err
	}
	cli := filepath.Join(tools, "fauxqs", "node_modules", "fauxqs", "dist", "cli.js")
	if _, err := os.Stat(cli); err != nil {
		return nil, fmt.Errorf("SQS emulator fauxqs is not installed (%v): run %s", err, SQSInstallScript)
	}
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
	return Start(ctx, "SQS (fauxqs)", port, SQSInstallScript,
		[]string{"FAUXQS_PORT=" + strconv.Itoa(port), "FAUXQS_LOGGER=false"},
		node, "--require", preload, cli)
}

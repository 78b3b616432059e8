package emulator

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The Secrets Manager emulator runs with Debian's python3 and the moto
// that scripts/emulators/secretsmanager.sh unpacked, whatever python3 is
// first on PATH (pyenv's shim, on machines that have one).
func TestSecretsManagerRunsDebianPython(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the Secrets Manager emulator; skipped with -short")
	}
	p, err := StartSecretsManager(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop()
	_, port, _ := strings.Cut(p.Addr, ":")
	pid, argv := findProcess(t, "moto.server", port)
	exe, err := os.Readlink(filepath.Join("/proc", pid, "exe"))
	if err != nil {
		t.Fatalf("read the emulator's executable: %v", err)
	}
	want, err := filepath.EvalSymlinks(motoPython)
	if err != nil {
		t.Fatal(err)
	}
	if exe != want {
		t.Fatalf("the emulator (%q) runs %s, want %s", argv, exe, want)
	}
	environ, err := os.ReadFile(filepath.Join("/proc", pid, "environ"))
	if err != nil {
		t.Fatalf("read the emulator's environment: %v", err)
	}
	tools, err := ToolsDir()
	if err != nil {
		t.Fatal(err)
	}
	wantPath := "PYTHONPATH=" + filepath.Join(tools, "moto", "lib")
	if !bytes.Contains(environ, []byte(wantPath+"\x00")) {
		t.Fatalf("the emulator's environment lacks %s", wantPath)
	}
}

// findProcess returns the pid and argv of the one process, other than a
// shell, whose argv holds module after -m and port after -p.
func findProcess(t *testing.T, module, port string) (string, []string) {
	t.Helper()
	dirs, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatalf("list processes: %v", err)
	}
	for _, d := range dirs {
		if _, err := strconv.Atoi(d.Name()); err != nil {
			continue
		}
		raw, err := os.ReadFile(filepath.Join("/proc", d.Name(), "cmdline"))
		if err != nil {
			continue // gone, or not ours to read
		}
		argv := strings.Split(strings.TrimSuffix(string(raw), "\x00"), "\x00")
		if argv[0] == "/bin/sh" {
			continue
		}
		hasModule, hasPort := false, false
		for i := 1; i < len(argv); i++ {
			hasModule = hasModule || (argv[i-1] == "-m" && argv[i] == module)
			hasPort = hasPort || (argv[i-1] == "-p" && argv[i] == port)
		}
		if hasModule && hasPort {
			return d.Name(), argv
		}
	}
	t.Fatalf("no process runs %s on port %s", module, port)
	return "", nil
}

// The KMS emulator's command serves on loopback only: asked for another
// address it refuses to start.
func TestKMSRefusesNonLoopback(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the KMS emulator; skipped with -short")
	}
	bin, err := installed("KMS emulator local-kms", KMSInstallScript, "local-kms", "local-kms")
	if err != nil {
		t.Fatal(err)
	}
	for _, addr := range []string{"0.0.0.0:0", ":0", "localhost:0"} {
		out, err := exec.Command(bin, "-listen", addr, "-data", t.TempDir()).CombinedOutput()
		if err == nil || !strings.Contains(string(out), "want a loopback IP address") {
			t.Errorf("local-kms -listen %s: err = %v, output %q; want a refusal", addr, err, out)
		}
	}
}

package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"flag"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

func TestEMFFlags(t *testing.T) {
	tests := []struct {
		args    []string
		wantErr string // "" when valid
	}{
		{nil, ""},
		{[]string{"--emf-interval", "60s", "--emf-stage", "prod"}, ""},
		{[]string{"--emf-interval", "1s", "--emf-stage", "dev"}, ""},
		{[]string{"--emf-stage", "prod"}, ""}, // off: the stage is unused
		{[]string{"--emf-interval", "60s"}, "--emf-interval needs --emf-stage"},
		{[]string{"--emf-interval", "-1s", "--emf-stage", "prod"}, "--emf-interval -1s is negative"},
		{[]string{"--emf-interval", "500ms", "--emf-stage", "prod"}, "--emf-interval 500ms is below a second"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			var f emfFlags
			fs := flag.NewFlagSet("test", flag.ContinueOnError)
			f.register(fs)
			if err := fs.Parse(tt.args); err != nil {
				t.Fatal(err)
			}
			err := f.validate()
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("validate: %v", err)
			case tt.wantErr != "" && (err == nil || !strings.HasPrefix(err.Error(), tt.wantErr)):
				t.Errorf("validate: %v, want %q...", err, tt.wantErr)
			}
		})
	}
}

// TestDevWritesEMFLines: `broker dev --emf-interval 1s` writes, on its
// stderr beside its log, an EMF line counting a request it served.
func TestDevWritesEMFLines(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the farm with its Puppet workers; skipped with -short (make unit), run by make test")
	}
	for _, tool := range []string{"ruby", "puppet"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is missing: run scripts/install-deps.sh (make test does) to install Puppet", tool)
		}
	}
	// The process's stderr, as the awslogs driver reads it.
	stderr, err := os.Create(filepath.Join(t.TempDir(), "stderr"))
	if err != nil {
		t.Fatal(err)
	}
	saved := os.Stderr
	os.Stderr = stderr
	t.Cleanup(func() { os.Stderr = saved })
	read := func() string {
		b, _ := os.ReadFile(stderr.Name())
		return string(b)
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- runDev(ctx, []string{"--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--pcp-listen", "127.0.0.1:0",
			"--data", t.TempDir(), "--environments", "../examples/environments", "--workers", "1",
			"--emf-interval", "1s", "--emf-stage", "test"})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("dev: %v", err)
		}
	})

	upRE := regexp.MustCompile(`compilefarm dev is up.* front_door=https://(\S+)`)
	var front string
	for deadline := time.Now().Add(2 * time.Minute); front == "" && time.Now().Before(deadline); {
		select {
		case err := <-done:
			done <- err // for the cleanup, which waits for dev's end
			t.Fatalf("dev ended: %v\n%s", err, read())
		case <-time.After(100 * time.Millisecond):
		}
		if m := upRE.FindStringSubmatch(read()); m != nil {
			front = m[1]
		}
	}
	if front == "" {
		t.Fatalf("dev is not up:\n%s", read())
	}
	// The CA certificate needs no client certificate (health checks are
	// not counted); the test trusts the dev CA's server certificate
	// blindly.
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	resp, err := c.Get("https://" + front + "/puppet-ca/v1/certificate/ca")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()

	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		sc := bufio.NewScanner(strings.NewReader(read()))
		for sc.Scan() {
			if !strings.HasPrefix(sc.Text(), "{") {
				continue // a log line
			}
			var l struct {
				AWS struct {
					Timestamp         int64
					CloudWatchMetrics []struct {
						Namespace  string
						Dimensions [][]string
						Metrics    []struct{ Name, Unit string }
					}
				} `json:"_aws"`
				Stage    string
				Requests float64
				Latency  *struct{ Count float64 }
			}
			if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
				t.Fatalf("a line of JSON that does not parse: %v\n%s", err, sc.Text())
			}
			if len(l.AWS.CloudWatchMetrics) != 1 || l.AWS.CloudWatchMetrics[0].Namespace != "compilefarm" || l.Stage != "test" || l.AWS.Timestamp == 0 {
				t.Fatalf("not an EMF line of namespace compilefarm, stage test: %s", sc.Text())
			}
			if l.Requests >= 1 && l.Latency != nil && l.Latency.Count >= 1 {
				t.Logf("EMF line: %s", sc.Text())
				return
			}
		}
	}
	t.Fatalf("no EMF line counting the request:\n%s", read())
}

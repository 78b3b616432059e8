package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/compilefarm/compilefarm/pkg/admin"
	"github.com/compilefarm/compilefarm/pkg/ca"
	"github.com/compilefarm/compilefarm/pkg/cadir"
	"github.com/compilefarm/compilefarm/pkg/metrics"
	"github.com/compilefarm/compilefarm/pkg/pki"
)

func TestCheckAdminListen(t *testing.T) {
	tests := []struct {
		addr string
		ok   bool
	}{
		{"127.0.0.1:9141", true},
		{"127.0.0.1:0", true},
		{"127.1.2.3:9141", true},
		{"[::1]:9141", true},
		{"localhost:9141", true},
		{"0.0.0.0:9141", false},
		{":9141", false},
		{"[::]:9141", false},
		{"10.0.0.5:9141", false},
		{"broker.example.test:9141", false},
		{"127.0.0.1", false},
	}
	for _, tt := range tests {
		t.Run(tt.addr, func(t *testing.T) {
			err := checkAdminListen(tt.addr)
			if (err == nil) != tt.ok {
				t.Fatalf("checkAdminListen(%q) = %v, want ok=%v", tt.addr, err, tt.ok)
			}
			if err != nil && strings.Contains(tt.addr, ":") && !strings.HasPrefix(tt.addr, "127.0.0.1:") &&
				!strings.Contains(err.Error(), "broker ca generate NAME --operator") {
				t.Errorf("the refusal does not point to operator certificates: %v", err)
			}
		})
	}
}

// syncBuffer is a log sink the test reads while the server writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startListeners runs listenAndServe on free loopback ports with a CA of
// its own and returns the "is up" line's front door, metrics and admin
// addresses.
func startListeners(t *testing.T, adminListen string) (front, metricsURL, adminURL string, errc chan error) {
	t.Helper()
	a, err := cadir.OpenCA(t.Context(), filepath.Join(t.TempDir(), "ca"), ca.Options{KeyBits: 2048})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	cert, err := a.IssueServerCert(t.Context(), "broker.test", serverAltNames("broker.test", ""), pki.KeyECDSAP256)
	if err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	ctx, cancel := context.WithCancel(context.Background())
	errc = make(chan error, 1)
	go func() {
		errc <- listenAndServe(ctx, log, endpoints{
			front: "127.0.0.1:0", metrics: "127.0.0.1:0", admin: adminListen,
			frontHandler:   http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "front") }),
			tlsConf:        a.ServerTLSConfig(cert),
			metricsHandler: metricsHandler(metrics.New(nil)),
			adminHandler:   adminHandler(&admin.Server{CA: a}),
		}, nil, "test is up")
	}()
	t.Cleanup(func() {
		cancel()
		<-errc
	})
	upRE := regexp.MustCompile(`front_door=https://(\S+) metrics=(http://\S+)/metrics admin=(http://\S+)`)
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if m := upRE.FindStringSubmatch(logs.String()); m != nil {
			return m[1], m[2], m[3], errc
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("no up line in the log:\n%s", logs.String())
	return
}

// TestListenersServeOneThingEach: /metrics only on the metrics listener,
// the operator API only on the admin listener.
func TestListenersServeOneThingEach(t *testing.T) {
	_, metricsURL, adminURL, _ := startListeners(t, "127.0.0.1:0")
	tests := []struct {
		name string
		url  string
		want int
	}{
		{"metrics on the metrics listener", metricsURL + "/metrics", http.StatusOK},
		{"operator API not on the metrics listener", metricsURL + "/admin/v1/ca/certs", http.StatusNotFound},
		{"operator API on the admin listener", adminURL + "/admin/v1/ca/certs", http.StatusOK},
		{"metrics not on the admin listener", adminURL + "/metrics", http.StatusNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := http.Get(tt.url)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tt.want {
				t.Fatalf("GET %s = %s, want %d", tt.url, resp.Status, tt.want)
			}
		})
	}
	if !strings.HasPrefix(adminURL, "http://127.0.0.1:") || strings.HasPrefix(defaultAdmin, metricsURL) {
		t.Errorf("admin URL %s, metrics %s", adminURL, metricsURL)
	}
}

func TestListenAndServeRefusesPublicAdmin(t *testing.T) {
	err := listenAndServe(t.Context(), slog.New(slog.DiscardHandler), endpoints{
		front: "127.0.0.1:0", metrics: "127.0.0.1:0", admin: "0.0.0.0:0", tlsConf: &tls.Config{},
	}, nil, "never up")
	if err == nil || !strings.Contains(err.Error(), "not a loopback address") {
		t.Fatalf("listenAndServe with --admin-listen 0.0.0.0:0 = %v, want a refusal", err)
	}
}

// TestPublicAdminListenRefusedAtStart: dev and serve refuse a non-loopback
// --admin-listen before they open anything.
func TestPublicAdminListenRefusedAtStart(t *testing.T) {
	tests := []struct {
		name string
		run  func(context.Context, []string) error
		args []string
	}{
		{"dev", runDev, []string{"--admin-listen", "0.0.0.0:9141", "--data", t.TempDir()}},
		{"serve", runServe, []string{"--admin-listen", "0.0.0.0:9141"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.run(t.Context(), tt.args)
			if err == nil || !strings.Contains(err.Error(), "is not a loopback address") || !strings.Contains(err.Error(), "--backend aws") {
				t.Fatalf("%s --admin-listen 0.0.0.0:9141 = %v, want the refusal", tt.name, err)
			}
		})
	}
}

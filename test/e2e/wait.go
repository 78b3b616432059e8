package e2e

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// WaitFor polls cond until it holds or the deadline passes.
func WaitFor(t *testing.T, what string, limit time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", limit, what)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// ReadAll reads and closes an answer's body.
func ReadAll(resp *http.Response) string {
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// LineOf returns the first line of text that starts with prefix, "" when
// none does.
func LineOf(text, prefix string) string {
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, prefix) {
			return l
		}
	}
	return ""
}

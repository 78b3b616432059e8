package loopback

import (
	"strings"
	"testing"
)

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		target string
		ok     bool
	}{
		{"127.0.0.1:8140", true},
		{"127.1.2.3:1", true},
		{"[::1]:8140", true},
		{"localhost:8140", true},
		{"10.0.0.1:8140", false},
		{"192.168.1.5:8140", false},
		{"0.0.0.0:8140", false},
		{"[::]:8140", false},
		{"[::ffff:10.0.0.1]:8140", false},
		{"example.com:8140", false},
		{"puppet:8140", false},
		{"127.0.0.1", false}, // no port
		{"127.0.0.1:", false},
	} {
		err := Check("--target", tc.target)
		if (err == nil) != tc.ok {
			t.Errorf("Check(%q) = %v, want ok=%v", tc.target, err, tc.ok)
		}
		if err != nil && !tc.ok && strings.Contains(tc.target, "10.0.0.1") && !strings.Contains(err.Error(), "loopback") {
			t.Errorf("error for %q does not say why: %v", tc.target, err)
		}
	}
}

func TestCheckURL(t *testing.T) {
	for _, tc := range []struct {
		url string
		ok  bool
	}{
		{"http://127.0.0.1:9140/metrics", true},
		{"http://localhost:9140/metrics", true},
		{"http://10.1.1.1:9140/metrics", false},
		{"https://example.com/metrics", false},
		{"ftp://127.0.0.1/x", false},
	} {
		if err := CheckURL("--metrics", tc.url); (err == nil) != tc.ok {
			t.Errorf("CheckURL(%q) = %v, want ok=%v", tc.url, err, tc.ok)
		}
	}
}

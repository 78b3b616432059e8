package main

import (
	"strings"
	"testing"
	"time"
)

func TestCheckLoopback(t *testing.T) {
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
		err := checkLoopback("--target", tc.target)
		if (err == nil) != tc.ok {
			t.Errorf("checkLoopback(%q) = %v, want ok=%v", tc.target, err, tc.ok)
		}
		if err != nil && tc.ok == false && strings.Contains(tc.target, "10.0.0.1") && !strings.Contains(err.Error(), "loopback") {
			t.Errorf("error for %q does not say why: %v", tc.target, err)
		}
	}
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
		if err := checkLoopbackURL("--metrics", tc.url); (err == nil) != tc.ok {
			t.Errorf("checkLoopbackURL(%q) = %v, want ok=%v", tc.url, err, tc.ok)
		}
	}
}

func TestPercentiles(t *testing.T) {
	var d []time.Duration
	for i := 100; i >= 1; i-- {
		d = append(d, time.Duration(i)*time.Millisecond)
	}
	p := percentiles(d)
	if p.P50 != 50 || p.P90 != 90 || p.P99 != 99 || p.Max != 100 || p.Mean != 50.5 {
		t.Errorf("percentiles = %+v", p)
	}
	if (percentiles(nil) != Percentiles{}) {
		t.Errorf("empty sample should give zeros")
	}
}

func TestParseList(t *testing.T) {
	if got, err := parseList("1, 16,128"); err != nil || len(got) != 3 || got[2] != 128 {
		t.Errorf("parseList = %v, %v", got, err)
	}
	for _, bad := range []string{"", "0", "1,x", "-3", "20000"} {
		if _, err := parseList(bad); err == nil {
			t.Errorf("parseList(%q) accepted", bad)
		}
	}
}

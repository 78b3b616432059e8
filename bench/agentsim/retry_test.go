package main

import (
	"errors"
	"testing"
	"time"
)

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 11, 21, 22, 28, 0, 0, time.UTC)
	for _, tc := range []struct {
		h    string
		want time.Duration
		ok   bool
	}{
		{"5", 5 * time.Second, true},
		{" 60 ", time.Minute, true},
		{"0", 0, true},
		{"+7", 7 * time.Second, true},
		{"0x10", 16 * time.Second, true}, // Ruby's Integer() reads hex
		{"1_000", 1000 * time.Second, true},
		{"-1", 0, false}, // Ruby's sleep refuses a negative interval
		{"soon", 0, false},
		{"", 0, false},
		{"5.5", 0, false},
		{"Sat, 21 Nov 2026 22:29:30 GMT", 90 * time.Second, true},
		{"Sat, 21 Nov 2026 23:29:30 +0100", 90 * time.Second, true},
		{"Sat, 21 Nov 2026 22:28:00 GMT", 0, true},
		{"Sat, 21 Nov 2026 22:00:00 GMT", 0, true}, // in the past: at once
		{"21 Nov 2026 22:28:10 +0000", 10 * time.Second, true},
		{"Sat, 1 Nov 2026 22:28:10 GMT", 0, true},
	} {
		got, err := parseRetryAfter(tc.h, now)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("parseRetryAfter(%q) = %v, %v; want %v, ok=%v", tc.h, got, err, tc.want, tc.ok)
		}
	}
}

func TestRetryAfter(t *testing.T) {
	now := time.Now()
	for _, tc := range []struct {
		what    string
		status  int
		h       string
		retries int
		wait    time.Duration
		retry   bool
		err     bool
	}{
		{"success", 200, "", 0, 0, false, false},
		{"503 with Retry-After", 503, "5", 0, 5 * time.Second, true, false},
		{"429 with Retry-After", 429, "2", 3, 2 * time.Second, true, false},
		{"503 without Retry-After stands", 503, "", 0, 0, false, false},
		{"500 with Retry-After stands", 500, "5", 0, 0, false, false},
		{"sleep bounded by runinterval", 503, "7200", 0, 30 * time.Minute, true, false},
		{"99 retries: one more", 503, "1", 99, time.Second, true, false},
		{"100 retries: too many", 503, "1", 100, 0, false, true},
		{"too many, even without the header", 503, "", 100, 0, false, true},
		{"unreadable header", 503, "later", 0, 0, false, true},
	} {
		wait, retry, err := retryAfter(tc.status, tc.h, tc.retries, 30*time.Minute, now)
		if wait != tc.wait || retry != tc.retry || (err != nil) != tc.err {
			t.Errorf("%s: retryAfter = %v, %v, %v; want %v, %v, err=%v", tc.what, wait, retry, err, tc.wait, tc.retry, tc.err)
		}
		if tc.retries >= retryLimit && !errors.Is(err, errTooManyRetries) {
			t.Errorf("%s: err = %v, want errTooManyRetries", tc.what, err)
		}
	}
}

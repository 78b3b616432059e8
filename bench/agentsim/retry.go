package main

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Puppet 7's agent retries a request the server answers 429 or 503 with a
// Retry-After header (Puppet::HTTP::Client#execute_streaming with
// Puppet::HTTP::RetryAfterHandler): it sleeps for Retry-After (seconds, or
// until an RFC 2822 date), at most runinterval, and sends the request
// again; after retryLimit such retries of one request it gives up
// (TooManyRetryAfters). Without the header the answer stands: a 503 fails.
const retryLimit = 100 // Puppet::HTTP::Client's default retry_limit

// errTooManyRetries is Puppet's TooManyRetryAfters.
var errTooManyRetries = errors.New("too many HTTP retries")

// retryAfter decides what the agent does with an answer of status with
// Retry-After header value h (empty when absent), after retries earlier
// retries of the same request: sleep for the returned duration and retry
// (ok true), or take the answer as it is (ok false). An unreadable header
// and the retry limit are errors, as in Puppet.
func retryAfter(status int, h string, retries int, maxSleep time.Duration, now time.Time) (time.Duration, bool, error) {
	if status != http.StatusTooManyRequests && status != http.StatusServiceUnavailable {
		return 0, false, nil
	}
	if retries >= retryLimit {
		return 0, false, fmt.Errorf("%w: %d retries after %d answers with Retry-After", errTooManyRetries, retries, status)
	}
	if h == "" {
		return 0, false, nil
	}
	d, err := parseRetryAfter(h, now)
	if err != nil {
		return 0, false, err
	}
	// Puppet's max_sleep is runinterval in whole seconds.
	return min(d, maxSleep.Truncate(time.Second)), true, nil
}

// rfc2822 are the layouts Ruby's DateTime.rfc2822 reads as sent by HTTP
// servers (day with or without a leading zero, with or without the
// weekday, numeric or named zone).
var rfc2822 = []string{
	time.RFC1123, time.RFC1123Z,
	"Mon, 2 Jan 2006 15:04:05 MST", "Mon, 2 Jan 2006 15:04:05 -0700",
	"2 Jan 2006 15:04:05 MST", "2 Jan 2006 15:04:05 -0700",
}

// parseRetryAfter reads a Retry-After value as Puppet does: an integer
// number of seconds, else an RFC 2822 date, giving the whole seconds from
// now until then (0 for a date in the past). A negative integer is an
// error: Ruby's sleep refuses it.
func parseRetryAfter(h string, now time.Time) (time.Duration, error) {
	h = strings.TrimSpace(h)
	// Base 0: Ruby's Integer() also reads 0x1f, 0o17, 0b101 and 1_000.
	if n, err := strconv.ParseInt(h, 0, 64); err == nil {
		if n < 0 {
			return 0, fmt.Errorf("Retry-After %q: a negative interval", h)
		}
		return time.Duration(min(n, int64(24*365*time.Hour/time.Second))) * time.Second, nil
	}
	for _, layout := range rfc2822 {
		if t, err := time.Parse(layout, h); err == nil {
			secs := int64(t.Sub(now) / time.Second) // Ruby's to_i truncates
			return time.Duration(max(secs, 0)) * time.Second, nil
		}
	}
	return 0, fmt.Errorf("failed to parse Retry-After header %q as an integer or RFC 2822 date", h)
}

package main

import (
	"errors"
	"flag"
	"net"
	"strings"
	"testing"

	"github.com/compilefarm/compilefarm/pkg/frontdoor"
)

func TestAdmissionFlags(t *testing.T) {
	tests := []struct {
		args    []string
		wantErr string // "" when valid
	}{
		{nil, ""},
		{[]string{"--max-in-flight", "1", "--max-queued", "0", "--queue-wait", "0s", "--retry-after", "1s", "--retry-after-jitter", "0s"}, ""},
		{[]string{"--max-in-flight", "0"}, "--max-in-flight"},
		{[]string{"--max-in-flight-light", "0"}, "--max-in-flight-light"},
		{[]string{"--max-queued", "-1"}, "--max-queued"},
		{[]string{"--queue-wait", "-1s"}, "--queue-wait"},
		{[]string{"--retry-after", "500ms"}, "--retry-after"},
		{[]string{"--retry-after-jitter", "-1s"}, "--retry-after-jitter"},
		{[]string{"--max-conns", "-1"}, "--max-conns"},
		{[]string{"--cache-mib", "9"}, "--cache-mib"},
		{[]string{"--cache-mib", "10"}, ""},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			var a admissionFlags
			fs := flag.NewFlagSet("test", flag.ContinueOnError)
			a.register(fs)
			if err := fs.Parse(tt.args); err != nil {
				t.Fatal(err)
			}
			err := a.validate()
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("validate: %v", err)
			case tt.wantErr != "" && (err == nil || !strings.HasPrefix(err.Error(), tt.wantErr+" ")):
				t.Errorf("validate: %v, want an error about %s", err, tt.wantErr)
			}
			if tt.args == nil && (a.limits != frontdoor.DefaultAdmission() || a.maxConns != 0 || a.cacheMiB<<20 != frontdoor.DefaultCacheBytes) {
				t.Errorf("defaults: %+v, max-conns %d, cache %d MiB; want %+v, no cap and the front door's default cache", a.limits, a.maxConns, a.cacheMiB, frontdoor.DefaultAdmission())
			}
		})
	}
}

// TestLimitConns: with a cap of one, a second connection is accepted only
// once the first closes, and closing the listener ends an Accept waiting
// for a slot.
func TestLimitConns(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := limitConns(inner, 1)
	defer ln.Close()
	dial := func() net.Conn {
		c, err := net.Dial("tcp", inner.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	accepted := make(chan net.Conn)
	acceptErr := make(chan error, 1)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				acceptErr <- err
				return
			}
			accepted <- c
		}
	}()

	dial()
	first := <-accepted
	second := dial() // completes in the kernel, waits for Accept
	select {
	case c := <-accepted:
		t.Fatalf("a second connection (%s) was accepted while the first is open", c.RemoteAddr())
	default:
	}
	first.Close()
	c := <-accepted
	if c.RemoteAddr().String() != second.LocalAddr().String() {
		t.Errorf("accepted %s, want the second connection %s", c.RemoteAddr(), second.LocalAddr())
	}
	c.Close()
	c.Close() // a second Close gives no second slot back
	dial()
	third := <-accepted
	defer third.Close()
	dial() // waits for a slot: third holds it
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-acceptErr; !errors.Is(err, net.ErrClosed) {
		t.Errorf("Accept after Close: %v, want net.ErrClosed", err)
	}
}

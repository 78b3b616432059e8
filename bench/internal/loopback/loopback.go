// Package loopback keeps the measuring tools (bench/loadgen,
// bench/agentsim) on this machine: it refuses any address that is not
// loopback (127.0.0.0/8, ::1, or localhost resolving only to those).
package loopback

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"
)

// Check refuses hostport unless it is host:port on this machine's loopback:
// 127.0.0.0/8, ::1, or localhost (which must resolve only to loopback).
// what names the flag in errors ("--target").
func Check(what, hostport string) error {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		return fmt.Errorf("%s %q: want host:port: %w", what, hostport, err)
	}
	if port == "" {
		return fmt.Errorf("%s %q: no port", what, hostport)
	}
	refuse := fmt.Errorf("%s %q is not a loopback address: only a broker on this machine may be loaded (127.0.0.0/8, ::1 or localhost)", what, hostport)
	if strings.EqualFold(host, "localhost") {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		addrs, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		if err != nil || len(addrs) == 0 {
			return fmt.Errorf("%s %q: cannot resolve localhost: %v", what, hostport, err)
		}
		for _, a := range addrs {
			if !a.Unmap().IsLoopback() {
				return refuse
			}
		}
		return nil
	}
	ip := net.ParseIP(host)
	if ip == nil || !ip.IsLoopback() {
		return refuse
	}
	return nil
}

// CheckURL applies Check to an http(s) URL's host.
func CheckURL(what, raw string) error {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%s %q: want http://host:port/path", what, raw)
	}
	hp := u.Host
	if u.Port() == "" {
		hp = net.JoinHostPort(u.Hostname(), map[string]string{"http": "80", "https": "443"}[u.Scheme])
	}
	return Check(what, hp)
}

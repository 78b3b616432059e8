package main

import (
	"context"
	"fmt"
	"net"
	"strings"
	"time"
)

// defaultAdminListen is where dev and serve serve the operator API: this
// host's (or this task's) own loopback.
const defaultAdminListen = "127.0.0.1:9141"

const adminListenUsage = "address of the operator API (plain HTTP, no authentication): a loopback address only " +
	"(127.0.0.0/8, ::1, localhost); from elsewhere use the front door with an operator certificate, or --backend aws"

// checkAdminListen refuses an --admin-listen address that is not loopback:
// the operator API signs and revokes certificates and deploys code, and on
// plain HTTP it has no way to tell who calls.
func checkAdminListen(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("--admin-listen %q: want host:port: %w", addr, err)
	}
	if isLoopbackHost(host) {
		return nil
	}
	return fmt.Errorf("--admin-listen %q is not a loopback address: the operator API there is plain HTTP with no authentication, "+
		"so it listens on 127.0.0.0/8, ::1 or localhost only. To reach the operator API from another machine, use the front door "+
		"with an operator certificate (broker ca generate NAME --operator --out DIR on this host, then "+
		"broker nodes --admin https://HOST:8140 --cert DIR/NAME.cert.pem --key DIR/NAME.key.pem --ca-cert DIR/ca.pem), "+
		"or run the commands with --backend aws and your IAM credentials", addr)
}

// isLoopbackHost reports whether host is a loopback IP, or localhost
// resolving only to loopback addresses.
func isLoopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		addrs, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		if err != nil || len(addrs) == 0 {
			return false
		}
		for _, a := range addrs {
			if !a.Unmap().IsLoopback() {
				return false
			}
		}
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

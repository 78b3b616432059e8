package pki

import (
	"fmt"
	"net"
	"slices"
	"strings"

	"github.com/compilefarm/compilefarm/pkg/farm"
)

// SplitAltNames returns the DNS SANs (certname first, deduplicated, lower
// case) and IP SANs (deduplicated, IPv4 in 4-byte form) for a server
// certificate for certname with the alt names alt. Entries that parse as IP
// addresses become IP SANs; Puppet's "DNS:" and "IP:" prefixes are
// understood. An entry that is neither an IP address nor a plain DNS name
// (empty, wildcard, leading dot, slash or space) is an error wrapping
// farm.ErrInvalid.
func SplitAltNames(certname string, alt []string) ([]string, []net.IP, error) {
	dns := []string{certname}
	var ips []net.IP
	for _, a := range alt {
		a = strings.TrimSpace(a)
		if v, ok := strings.CutPrefix(a, "IP:"); ok {
			ip := net.ParseIP(v)
			if ip == nil {
				return nil, nil, fmt.Errorf("alt name %q is not an IP address: %w", a, farm.ErrInvalid)
			}
			ips = appendIP(ips, ip)
			continue
		}
		a = strings.ToLower(strings.TrimPrefix(a, "DNS:"))
		if ip := net.ParseIP(a); ip != nil {
			ips = appendIP(ips, ip)
			continue
		}
		if a == "" || strings.ContainsAny(a, "*/\\ ") || strings.HasPrefix(a, ".") {
			return nil, nil, fmt.Errorf("alt name %q is not a DNS name: %w", a, farm.ErrInvalid)
		}
		if !slices.Contains(dns, a) {
			dns = append(dns, a)
		}
	}
	return dns, ips, nil
}

// appendIP appends ip to ips unless it is already there.
func appendIP(ips []net.IP, ip net.IP) []net.IP {
	if v4 := ip.To4(); v4 != nil {
		ip = v4
	}
	for _, have := range ips {
		if have.Equal(ip) {
			return ips
		}
	}
	return append(ips, ip)
}

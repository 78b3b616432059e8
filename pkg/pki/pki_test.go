package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"testing"

	"github.com/compilefarm/compilefarm/pkg/farm"
)

func TestParsePrivateKey(t *testing.T) {
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	ecKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	sec1, _ := x509.MarshalECPrivateKey(ecKey)
	pkcs8, _ := x509.MarshalPKCS8PrivateKey(rsaKey)
	encode := func(typ string, der []byte) []byte { return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}) }
	tests := []struct {
		name string
		pem  []byte
		want crypto.PublicKey // nil: refused
	}{
		{"PKCS#1", encode("RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(rsaKey)), rsaKey.Public()},
		{"SEC 1", encode("EC PRIVATE KEY", sec1), ecKey.Public()},
		{"PKCS#8", encode("PRIVATE KEY", pkcs8), rsaKey.Public()},
		{"EncodePrivateKey", must(EncodePrivateKey(ecKey)), ecKey.Public()},
		{"a certificate", encode("CERTIFICATE", []byte{0x30, 0}), nil},
		{"garbage DER", encode("RSA PRIVATE KEY", []byte("garbage")), nil},
		{"not PEM", []byte("not a key"), nil},
		{"empty", nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			key, err := ParsePrivateKey(tt.pem)
			switch {
			case tt.want == nil && err == nil:
				t.Fatalf("ParsePrivateKey accepted it")
			case tt.want != nil && err != nil:
				t.Fatalf("ParsePrivateKey: %v", err)
			case tt.want != nil && !PublicKeysEqual(key.Public(), tt.want):
				t.Fatalf("ParsePrivateKey read another key")
			}
		})
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func TestFormatSerial(t *testing.T) {
	for n, want := range map[int64]string{1: "0001", 10: "000A", 0xABCDE: "ABCDE"} {
		if got := FormatSerial(big.NewInt(n)); got != want {
			t.Errorf("FormatSerial(%d) = %q, want %q", n, got, want)
		}
	}
	if got := FormatSerial(nil); got != "" {
		t.Errorf("FormatSerial(nil) = %q, want \"\"", got)
	}
}

func TestSplitAltNames(t *testing.T) {
	tests := []struct {
		alt      []string
		dns, ips string // fmt.Sprint of the results; dns "" for a refusal
	}{
		{nil, "[puppet.test]", "[]"},
		{[]string{"DNS:Puppet", "puppet", "IP:10.0.0.1", "10.0.0.1", "::1"}, "[puppet.test puppet]", "[10.0.0.1 ::1]"},
		{[]string{"*.example.test"}, "", ""},
		{[]string{".example.test"}, "", ""},
		{[]string{"IP:not-an-ip"}, "", ""},
		{[]string{""}, "", ""},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.alt), func(t *testing.T) {
			dns, ips, err := SplitAltNames("puppet.test", tt.alt)
			if tt.dns == "" {
				if !errors.Is(err, farm.ErrInvalid) {
					t.Fatalf("SplitAltNames: err = %v, want ErrInvalid", err)
				}
				return
			}
			if err != nil || fmt.Sprint(dns) != tt.dns || fmt.Sprint(ips) != tt.ips {
				t.Fatalf("SplitAltNames = %v, %v, %v; want %s, %s", dns, ips, err, tt.dns, tt.ips)
			}
		})
	}
}

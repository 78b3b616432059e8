package main

import (
	"crypto"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"testing"

	"github.com/compilefarm/compilefarm/pkg/ca"
)

// writeAgentFiles writes name's certificate (signed by a) and key as
// DIR/NAME.cert.pem and DIR/NAME.key.pem.
func writeAgentFiles(t *testing.T, a *ca.CA, dir, name string, key crypto.Signer) {
	t.Helper()
	certPEM, err := a.Certificate(t.Context(), name)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".cert.pem"), certPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".key.pem"), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// tlsTrusting is a client configuration trusting a's CA, with no client
// certificate (an agent bootstrapping).
func tlsTrusting(t *testing.T, a *ca.CA) *tls.Config {
	t.Helper()
	return &tls.Config{RootCAs: a.Pool()}
}

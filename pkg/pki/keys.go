// Package pki holds what Puppet's public key infrastructure is made of, for
// every CA driver and client alike: keys (parse, encode, generate,
// compare), certificates (read, fingerprint, serial, reuse of a kept
// server certificate) and the names a server certificate carries.
package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
)

// Key types of server certificates (ca.CA.IssueServerCert,
// caproxy.CA.ServerCert).
const (
	KeyECDSAP256 = "ecdsa-p256" // the default: fast handshakes, accepted by Puppet 7 agents
	KeyRSA       = "rsa"        // of the size the caller chooses
)

// KeyTypeOf names key's type as a server certificate's key type: KeyECDSAP256
// or KeyRSA; other keys get a descriptive name no request matches, such as
// "ecdsa-P-384".
func KeyTypeOf(key crypto.Signer) string {
	switch k := key.(type) {
	case *ecdsa.PrivateKey:
		if k.Curve == elliptic.P256() {
			return KeyECDSAP256
		}
		return "ecdsa-" + k.Curve.Params().Name
	case *rsa.PrivateKey:
		return KeyRSA
	default:
		return fmt.Sprintf("%T", key)
	}
}

// NewServerKey generates a key for a server certificate: RSA of rsaBits bits
// when keyType is KeyRSA, ECDSA P-256 otherwise. It returns the key and its
// PEM encoding (EncodePrivateKey).
func NewServerKey(keyType string, rsaBits int) (crypto.Signer, []byte, error) {
	var key crypto.Signer
	var err error
	if keyType == KeyRSA {
		key, err = rsa.GenerateKey(rand.Reader, rsaBits)
	} else {
		key, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("generate %s server key: %w", keyType, err)
	}
	keyPEM, err := EncodePrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return key, keyPEM, nil
}

// NewRSAKey generates an RSA key of bits bits (a CA's) and returns it with
// its PEM encoding as Puppet Server writes ca_key.pem: PKCS#1, "RSA PRIVATE
// KEY".
func NewRSAKey(bits int) (*rsa.PrivateKey, []byte, error) {
	key, err := rsa.GenerateKey(rand.Reader, bits)
	if err != nil {
		return nil, nil, fmt.Errorf("generate %d-bit RSA key: %w", bits, err)
	}
	return key, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}), nil
}

// EncodePrivateKey encodes key as a PEM "PRIVATE KEY" block (PKCS#8), which
// ParsePrivateKey reads back.
func EncodePrivateKey(key crypto.Signer) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("encode private key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// ParsePrivateKey reads the first PEM block of data as a private key:
// PKCS#1 ("RSA PRIVATE KEY"), SEC 1 ("EC PRIVATE KEY") or PKCS#8 ("PRIVATE
// KEY"), as Puppet and OpenSSL write them. It fails for other blocks and for
// keys that cannot sign.
func ParsePrivateKey(data []byte) (crypto.Signer, error) {
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, errors.New("no PEM private key")
	}
	var key any
	var err error
	switch block.Type {
	case "RSA PRIVATE KEY":
		key, err = x509.ParsePKCS1PrivateKey(block.Bytes)
	case "EC PRIVATE KEY":
		key, err = x509.ParseECPrivateKey(block.Bytes)
	case "PRIVATE KEY":
		key, err = x509.ParsePKCS8PrivateKey(block.Bytes)
	default:
		return nil, fmt.Errorf("PEM block %q is not a private key", block.Type)
	}
	if err != nil {
		return nil, fmt.Errorf("parse private key: %w", err)
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("private key of type %T cannot sign", key)
	}
	return signer, nil
}

// PublicKeysEqual reports whether a and b are the same public key. a must be
// an RSA, ECDSA or Ed25519 key (as from a certificate, a request or
// crypto.Signer.Public); anything else is equal to nothing.
func PublicKeysEqual(a, b crypto.PublicKey) bool {
	type equaler interface{ Equal(crypto.PublicKey) bool }
	switch k := a.(type) {
	case *rsa.PublicKey, *ecdsa.PublicKey, ed25519.PublicKey:
		return k.(equaler).Equal(b)
	}
	return false
}

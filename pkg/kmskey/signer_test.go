package kmskey

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/rsa"
	"errors"
	"net"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/kms/types"

	"github.com/compilefarm/compilefarm/pkg/farm"
)

func TestAlgorithm(t *testing.T) {
	rsaPub, ecPub := &rsa.PublicKey{}, &ecdsa.PublicKey{}
	pss := func(h crypto.Hash, salt int) *rsa.PSSOptions { return &rsa.PSSOptions{Hash: h, SaltLength: salt} }
	tests := []struct {
		name string
		pub  crypto.PublicKey
		size int // digest bytes
		opts crypto.SignerOpts
		want types.SigningAlgorithmSpec // "" for ErrInvalid
	}{
		{"RSA SHA-256", rsaPub, 32, crypto.SHA256, types.SigningAlgorithmSpecRsassaPkcs1V15Sha256},
		{"RSA SHA-384", rsaPub, 48, crypto.SHA384, types.SigningAlgorithmSpecRsassaPkcs1V15Sha384},
		{"RSA SHA-512", rsaPub, 64, crypto.SHA512, types.SigningAlgorithmSpecRsassaPkcs1V15Sha512},
		{"PSS SHA-256 as x509 asks", rsaPub, 32, pss(crypto.SHA256, rsa.PSSSaltLengthEqualsHash), types.SigningAlgorithmSpecRsassaPssSha256},
		{"PSS SHA-384 auto salt", rsaPub, 48, pss(crypto.SHA384, rsa.PSSSaltLengthAuto), types.SigningAlgorithmSpecRsassaPssSha384},
		{"PSS SHA-512 salt 64", rsaPub, 64, pss(crypto.SHA512, 64), types.SigningAlgorithmSpecRsassaPssSha512},
		{"PSS salt 20", rsaPub, 32, pss(crypto.SHA256, 20), ""},
		{"ECDSA SHA-256", ecPub, 32, crypto.SHA256, types.SigningAlgorithmSpecEcdsaSha256},
		{"ECDSA SHA-384", ecPub, 48, crypto.SHA384, types.SigningAlgorithmSpecEcdsaSha384},
		{"ECDSA SHA-512", ecPub, 64, crypto.SHA512, types.SigningAlgorithmSpecEcdsaSha512},
		{"SHA-1", rsaPub, 20, crypto.SHA1, ""},
		{"SHA-224", rsaPub, 28, crypto.SHA224, ""},
		{"no hash (Ed25519's way)", rsaPub, 32, crypto.Hash(0), ""},
		{"nil options", rsaPub, 32, nil, ""},
		{"digest too short", rsaPub, 31, crypto.SHA256, ""},
		{"digest too long", ecPub, 64, crypto.SHA256, ""},
		{"other key type", "a string", 32, crypto.SHA256, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := algorithm(tt.pub, make([]byte, tt.size), tt.opts)
			if tt.want == "" {
				if !errors.Is(err, farm.ErrInvalid) {
					t.Fatalf("algorithm = %q, %v; want ErrInvalid", got, err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("algorithm = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

func TestAliasName(t *testing.T) {
	tests := []struct{ id, want string }{
		{"alias/compilefarm/prod/ca", "alias/compilefarm/prod/ca"},
		{"arn:aws:kms:eu-west-1:111122223333:alias/compilefarm/prod/ca", "alias/compilefarm/prod/ca"},
		{"arn:aws-us-gov:kms:us-gov-west-1:111122223333:alias/ca", "alias/ca"},
		{"1234abcd-12ab-34cd-56ef-1234567890ab", ""},
		{"arn:aws:kms:eu-west-1:111122223333:key/1234abcd-12ab-34cd-56ef-1234567890ab", ""},
		{"", ""},
		{"arn:aws:kms:alias/x", ""},
	}
	for _, tt := range tests {
		got, ok := aliasName(tt.id)
		if got != tt.want || ok != (tt.want != "") {
			t.Errorf("aliasName(%q) = %q, %v; want %q", tt.id, got, ok, tt.want)
		}
	}
}

// silentServer listens on loopback and accepts connections without ever
// answering; stop closes it and them.
func silentServer(t *testing.T) (addr string, stop func()) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	return l.Addr().String(), func() {
		l.Close()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	}
}

package agentcert

import (
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/compilefarm/compilefarm/internal/atomicfile"
)

// Store keeps agent identities in a directory, one NAME.pem file each
// (the certificate, then the private key), so that a later run against the
// same CA reuses them: enrolling ten thousand agents costs the CA ten
// thousand signatures, reusing them nothing. A file whose certificate does
// not verify against the current CA (the broker's data was reset), names
// another node or expires within a day is ignored, and the agent enrols
// again. The files hold private keys: the directory is made 0700 and each
// file 0600. Safe for concurrent use by distinct names.
type Store struct{ dir string }

// OpenStore makes dir if needed and returns the store in it.
func OpenStore(dir string) (*Store, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("agent state directory: %w", err)
	}
	return &Store{dir: dir}, nil
}

// path is name's file; names that are not plain certnames have none.
func (s *Store) path(name string) (string, error) {
	if name == "" || name[0] == '.' || strings.ContainsAny(name, `/\`) {
		return "", fmt.Errorf("certname %q cannot name a file", name)
	}
	return filepath.Join(s.dir, name+".pem"), nil
}

// Load returns name's stored identity if it is usable with farm's CA.
func (s *Store) Load(f *Farm, name string) (*Agent, bool) {
	p, err := s.path(name)
	if err != nil {
		return nil, false
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, false
	}
	var certPEM, keyPEM []byte
	for rest := b; ; {
		var blk *pem.Block
		blk, rest = pem.Decode(rest)
		if blk == nil {
			break
		}
		if blk.Type == "CERTIFICATE" {
			certPEM = pem.EncodeToMemory(blk)
		} else if strings.Contains(blk.Type, "PRIVATE KEY") {
			keyPEM = pem.EncodeToMemory(blk)
		}
	}
	if certPEM == nil || keyPEM == nil {
		return nil, false
	}
	a, err := f.identity(name, certPEM, keyPEM)
	if err != nil || time.Until(a.Cert.Leaf.NotAfter) < 24*time.Hour {
		return nil, false
	}
	return a, true
}

// Save keeps a's certificate and its key (keyPEM).
func (s *Store) Save(a *Agent, keyPEM []byte) error {
	p, err := s.path(a.Name)
	if err != nil {
		return err
	}
	if len(a.Cert.Certificate) == 0 {
		return errors.New("agent has no certificate")
	}
	b := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: a.Cert.Certificate[0]})
	if err := atomicfile.Write(p, append(b, keyPEM...), fs.FileMode(0o600)); err != nil {
		return fmt.Errorf("keep the identity of %s: %w", a.Name, err)
	}
	return nil
}

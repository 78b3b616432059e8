package farm

import (
	"context"
	"crypto"
	"fmt"
	"math/big"
	"time"
)

// CAStore keeps a CA's records: its own (CAIssuerStore: certificate,
// serial counter, inventory, CRL), the pending requests (CARequestStore)
// and the certificates names hold (CACertStore). The CA key is not a
// record: it comes from a CAKeySource.
//
// Drivers: the directory laid out like Puppet Server's cadir (cadir.Store),
// DynamoDB (dynamostate.CAStore) and memory (memstore.CAStore, for tests);
// farmtest.TestCAStore is their suite.
// The CA makes every change under Lock. A driver whose writes are not
// conditional themselves (cadir.Store) serialises changes with Lock; a driver
// with conditional writes (DynamoDB) returns a no-op from Lock and enforces
// the conditions of Create, NextSerial, PutSigned, DeleteSigned and PutCRL
// itself, so that several processes on several hosts can sign at once.
//
// Every method returns ErrNotFound for a missing record and ErrConflict
// for a failed condition, as each method's doc says; ErrInvalid for
// arguments its check (CheckCA<Method>: CheckCALock, CheckCACert, ...)
// refuses: a certname that fails ValidateCertname, an empty PEM, a missing
// or non-positive serial or CRL number, a CRL number not above the one it
// replaces. A call whose ctx has ended returns an error wrapping ctx.Err()
// and changes nothing. Records read back are the bytes written. Safe for
// concurrent use, by goroutines and by processes sharing the store: reads
// take no Lock and see every change that returned.
type CAStore interface {
	// Lock serialises a change with other processes sharing the store,
	// waiting until ctx ends (an error wrapping ctx.Err(), holding
	// nothing). The caller calls unlock when its change is done.
	Lock(ctx context.Context) (unlock func(), err error)
	CAIssuerStore
	CARequestStore
	CACertStore
}

// CAIssuerStore keeps the CA's own records: its certificate, the serial
// counter, the inventory of issued certificates and the CRL (see CAStore
// for errors and concurrency).
type CAIssuerStore interface {
	// CACert returns the CA certificate (PEM); ErrNotFound when there is no
	// CA yet. A driver may refuse to report "no CA" when its other records
	// show there was one (cadir.Store, when ca_crt.pem is missing but signed
	// certificates are there): an error, not ErrNotFound.
	CACert(ctx context.Context) ([]byte, error)
	// Create records a new CA: its certificate, first CRL, the serial
	// counter at CAGenesis.NextSerial and the CA certificate's inventory
	// entry, the certificate last, so that a store without it has no CA
	// whatever a crash left behind. ErrConflict, changing nothing, when
	// the store already has a CA. ErrInvalid (CheckCACreate) for an empty
	// certificate or CRL, a missing NextSerial or an invalid inventory
	// entry.
	Create(ctx context.Context, g CAGenesis) error
	// Check verifies the store's own records are usable (the serial
	// counter); the CA calls it once when it opens. ErrNotFound when
	// there is no CA yet.
	Check(ctx context.Context) error

	// NextSerial takes a serial number from the counter: the first call
	// after Create returns CAGenesis.NextSerial and each later one the
	// next number, and no two calls, from any process, ever get the same.
	NextSerial(ctx context.Context) (*big.Int, error)
	// RecordIssued adds a certificate to the inventory (which is written,
	// never read back through this interface). ErrInvalid
	// (CheckCARecordIssued) for an entry without a certname (its subject
	// CN) or a positive serial.
	RecordIssued(ctx context.Context, e CertIssued) error

	// CRL returns the current CRL (PEM), whole whatever its size (a large
	// site's is a megabyte); ErrNotFound when there is no CA yet.
	CRL(ctx context.Context) ([]byte, error)
	// PutCRL replaces the CRL with crlPEM, whose CRL number is number, if
	// the current one's number is prev; ErrConflict, changing nothing,
	// otherwise. ErrInvalid (CheckCAPutCRL) for an empty CRL, a missing
	// number or prev, or a number not above prev.
	PutCRL(ctx context.Context, crlPEM []byte, number, prev *big.Int) error
}

// CARequestStore keeps the pending certificate requests (PEM) by certname
// (see CAStore for errors and concurrency; ErrInvalid for a certname that
// fails ValidateCertname, CheckCARequest and its siblings).
type CARequestStore interface {
	// Request returns certname's pending request; ErrNotFound when there
	// is none.
	Request(ctx context.Context, certname string) ([]byte, error)
	// PutRequest stores csrPEM (not empty) as certname's request,
	// replacing any.
	PutRequest(ctx context.Context, certname string, csrPEM []byte) error
	// DeleteRequest removes certname's request; deleting a missing one is
	// not an error.
	DeleteRequest(ctx context.Context, certname string) error
	// Requests returns every pending request by certname.
	Requests(ctx context.Context) (map[string][]byte, error)
}

// CACertStore keeps the certificate (PEM) each certname holds, and the
// front doors' certificates (see CAStore for errors and concurrency;
// ErrInvalid for a certname that fails ValidateCertname, an empty PEM or a
// serial that is not positive, CheckCASigned and its siblings).
type CACertStore interface {
	// Signed returns the certificate held by certname; ErrNotFound when
	// it holds none.
	Signed(ctx context.Context, certname string) ([]byte, error)
	// PutSigned stores certPEM as certname's certificate. replace is the
	// serial of the certificate it replaces, nil when certname must hold
	// none; ErrConflict, changing nothing, when certname holds another
	// (or any, when replace is nil, or none, when replace is set).
	PutSigned(ctx context.Context, certname string, certPEM []byte, replace *big.Int) error
	// DeleteSigned removes certname's certificate if its serial is serial;
	// ErrConflict, changing nothing, when it holds another; no error when
	// it holds none.
	DeleteSigned(ctx context.Context, certname string, serial *big.Int) error
	// SignedCerts returns every held certificate by certname.
	SignedCerts(ctx context.Context) (map[string][]byte, error)

	// PutServerCert records a front door's certificate (PEM): agents may
	// not take its names. ServerCerts returns those carrying DNS name
	// dnsName (none, without error, for a name no front door carries), or
	// all of them when dnsName is "". Every certificate request asks for
	// one name, so that must not cost a scan.
	PutServerCert(ctx context.Context, certname string, certPEM []byte) error
	ServerCerts(ctx context.Context, dnsName string) ([][]byte, error)
}

// CAGenesis is what a new CA puts in its store.
type CAGenesis struct {
	CertPEM    []byte
	CRLPEM     []byte
	NextSerial *big.Int   // the first serial to hand out
	Issued     CertIssued // the CA certificate's own inventory entry
}

// CertIssued is one inventory entry: a certificate the CA issued.
type CertIssued struct {
	Certname            string // the subject CN
	Serial              *big.Int
	NotBefore, NotAfter time.Time
}

// CAKeySource holds the CA's private key and signs with it where it lives:
// a file (cadir.KeyFile, and the CA directory behind cadir.OpenCA), an AWS
// Secrets Manager secret (cakey.Secret), an AWS KMS key (kmskey), memory
// (memstore.CAKey, for tests). farmtest.TestCAKeySource is their suite.
//
// A key is made once: there is no replacing or deleting it through the
// source. How a driver protects the key at rest (a file's mode 0600, a
// secret's KMS key, a key that never leaves KMS) is its own to promise and
// test. The CA needs an RSA key (it makes one of Options.KeyBits bits)
// whose Signer signs SHA-256 digests with PKCS #1 v1.5 (crypto.SHA256 as
// opts), which is what certificates and CRLs are signed with.
//
// A call whose ctx has ended returns an error wrapping ctx.Err()
// (CheckSigner, CheckGenerateKey, CheckImportKey) and stores nothing.
// Safe for concurrent use, by goroutines and by processes sharing the
// source.
type CAKeySource interface {
	// Signer returns the key; its Sign signs with the key where it is kept
	// (in memory for a file or a Secrets Manager secret, inside KMS for a
	// KMS key). ErrNotFound when the source holds no key. Its Public is
	// the same key on every call and from every value of the source. A
	// Signer that signs remotely bounds each Sign itself (a timeout it
	// documents: crypto.Signer's Sign takes no context) and wraps its
	// errors with what was being signed.
	Signer(ctx context.Context) (crypto.Signer, error)
	// GenerateKey makes a new RSA key of bits bits in the source when it
	// holds none; ErrConflict, changing nothing, when it holds one. Of
	// concurrent GenerateKeys on an empty source, from any processes,
	// exactly one succeeds, the others get ErrConflict, and every Signer
	// after them is the winner's. ErrInvalid (CheckGenerateKey) for bits
	// below MinCAKeyBits or above MaxCAKeyBits, or a size the driver
	// cannot make (its doc says which it can).
	GenerateKey(ctx context.Context, bits int) error
	// String names the source in messages ("file /etc/…/ca_key.pem",
	// "Secrets Manager secret NAME"), never its key; it needs no I/O.
	String() string
}

// CAKeyImporter is a CAKeySource that can take an existing key (a site
// moving from Puppet Server brings its ca_key.pem): the file and the
// Secrets Manager drivers. A KMS key cannot be imported through the farm.
// farmtest.TestCAKeyImporter is their suite.
type CAKeyImporter interface {
	CAKeySource
	// ImportKey stores keyPEM (PKCS#1, SEC 1 or PKCS#8) if the source holds
	// no key; ErrConflict, changing nothing, when it holds one (of
	// concurrent ImportKeys and GenerateKeys exactly one succeeds, as for
	// GenerateKey). ErrInvalid, storing nothing, for a key that does not
	// parse, cannot sign, is empty or is larger than MaxCAKey
	// (CheckImportKey checks the size; the driver parses the key, with
	// pki.ParsePrivateKey). Signer then signs with that key, whatever its
	// type; the CA needs it to be RSA.
	ImportKey(ctx context.Context, keyPEM []byte) error
}

// MaxCAKey caps an imported CA key's PEM (Secrets Manager's limit on a
// secret's value); a 4096-bit RSA key takes about 3.3 KiB.
const MaxCAKey = 64 << 10

// The RSA key sizes GenerateKey may be asked for: 2048 is the least Puppet
// accepts, 4096 its default.
const (
	MinCAKeyBits = 2048
	MaxCAKeyBits = 16384
)

// CheckSigner checks a CAKeySource.Signer from src: only its ctx.
func CheckSigner(ctx context.Context, src fmt.Stringer) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("read CA key from %s: %w", src, err)
	}
	return nil
}

// CheckGenerateKey checks a CAKeySource.GenerateKey of a bits-bit key in
// src: its ctx, and MinCAKeyBits <= bits <= MaxCAKeyBits.
func CheckGenerateKey(ctx context.Context, src fmt.Stringer, bits int) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("generate CA key in %s: %w", src, err)
	}
	if bits < MinCAKeyBits || bits > MaxCAKeyBits {
		return fmt.Errorf("generate CA key in %s: an RSA key of %d bits: must be %d-%d: %w", src, bits, MinCAKeyBits, MaxCAKeyBits, ErrInvalid)
	}
	return nil
}

// CheckImportKey checks a CAKeyImporter.ImportKey of keyPEM into src: its
// ctx, and 1 to MaxCAKey bytes.
func CheckImportKey(ctx context.Context, src fmt.Stringer, keyPEM []byte) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("import CA key into %s: %w", src, err)
	}
	if len(keyPEM) == 0 || len(keyPEM) > MaxCAKey {
		return fmt.Errorf("import CA key into %s: a key of %d bytes: must be 1-%d: %w", src, len(keyPEM), MaxCAKey, ErrInvalid)
	}
	return nil
}

// The checks every CAStore method makes before it reaches its records (see
// checks.go): an error wrapping ctx's once it is done, ErrInvalid for the
// arguments CAStore refuses. Certnames must pass ValidateCertname, which
// also keeps them safe as file names.

// CheckCALock checks a CAStore.Lock: only its ctx.
func CheckCALock(ctx context.Context) error { return checkCACtx(ctx, "lock CA store") }

// CheckCACert checks a CAStore.CACert: only its ctx.
func CheckCACert(ctx context.Context) error { return checkCACtx(ctx, "read CA certificate") }

// CheckCACheck checks a CAStore.Check: only its ctx.
func CheckCACheck(ctx context.Context) error { return checkCACtx(ctx, "check CA store") }

// CheckCACreate checks a CAStore.Create of g: a certificate and a CRL,
// a positive NextSerial and an inventory entry CheckCARecordIssued takes.
func CheckCACreate(ctx context.Context, g *CAGenesis) error {
	if err := checkCACtx(ctx, "create CA"); err != nil {
		return err
	}
	if len(g.CertPEM) == 0 || len(g.CRLPEM) == 0 {
		return fmt.Errorf("create CA: no certificate or no CRL: %w", ErrInvalid)
	}
	if err := checkSerial("create CA: next serial", g.NextSerial); err != nil {
		return err
	}
	return checkIssued("create CA: inventory entry", &g.Issued)
}

// CheckCANextSerial checks a CAStore.NextSerial: only its ctx.
func CheckCANextSerial(ctx context.Context) error { return checkCACtx(ctx, "take a serial number") }

// CheckCARecordIssued checks a CAStore.RecordIssued of e: a certname (the
// subject CN, which need not be a valid certname: the CA's own is "Puppet
// CA: ...") and a positive serial.
func CheckCARecordIssued(ctx context.Context, e *CertIssued) error {
	if err := checkCACtx(ctx, "record issued certificate"); err != nil {
		return err
	}
	return checkIssued("record issued certificate", e)
}

func checkIssued(op string, e *CertIssued) error {
	if e.Certname == "" {
		return fmt.Errorf("%s: no certname: %w", op, ErrInvalid)
	}
	return checkSerial(op+" of "+e.Certname+": serial", e.Serial)
}

// CheckCACRL checks a CAStore.CRL: only its ctx.
func CheckCACRL(ctx context.Context) error { return checkCACtx(ctx, "read CRL") }

// CheckCAPutCRL checks a CAStore.PutCRL of crlPEM numbered number over
// prev: a CRL, and numbers with 0 <= prev < number.
func CheckCAPutCRL(ctx context.Context, crlPEM []byte, number, prev *big.Int) error {
	if err := checkCACtx(ctx, "replace CRL"); err != nil {
		return err
	}
	if len(crlPEM) == 0 {
		return fmt.Errorf("replace CRL: no CRL: %w", ErrInvalid)
	}
	if number == nil || prev == nil || prev.Sign() < 0 || number.Cmp(prev) <= 0 {
		return fmt.Errorf("replace CRL number %v with number %v: CRL numbers must grow from 0: %w", prev, number, ErrInvalid)
	}
	return nil
}

// CheckCARequest checks a CAStore.Request of certname.
func CheckCARequest(ctx context.Context, certname string) error {
	return checkCACertname(ctx, "read certificate request", certname)
}

// CheckCAPutRequest checks a CAStore.PutRequest of csrPEM for certname.
func CheckCAPutRequest(ctx context.Context, certname string, csrPEM []byte) error {
	if err := checkCACertname(ctx, "store certificate request", certname); err != nil {
		return err
	}
	return checkPEM("store certificate request", certname, csrPEM)
}

// CheckCADeleteRequest checks a CAStore.DeleteRequest of certname.
func CheckCADeleteRequest(ctx context.Context, certname string) error {
	return checkCACertname(ctx, "delete certificate request", certname)
}

// CheckCARequests checks a CAStore.Requests: only its ctx.
func CheckCARequests(ctx context.Context) error {
	return checkCACtx(ctx, "list certificate requests")
}

// CheckCASigned checks a CAStore.Signed of certname.
func CheckCASigned(ctx context.Context, certname string) error {
	return checkCACertname(ctx, "read certificate", certname)
}

// CheckCAPutSigned checks a CAStore.PutSigned of certPEM for certname,
// replacing the certificate with serial replace (nil: none, else
// positive).
func CheckCAPutSigned(ctx context.Context, certname string, certPEM []byte, replace *big.Int) error {
	if err := checkCACertname(ctx, "store certificate", certname); err != nil {
		return err
	}
	if err := checkPEM("store certificate", certname, certPEM); err != nil {
		return err
	}
	if replace != nil {
		return checkSerial("store certificate of "+certname+": the serial it replaces", replace)
	}
	return nil
}

// CheckCADeleteSigned checks a CAStore.DeleteSigned of certname's
// certificate with serial serial (positive).
func CheckCADeleteSigned(ctx context.Context, certname string, serial *big.Int) error {
	if err := checkCACertname(ctx, "delete certificate", certname); err != nil {
		return err
	}
	return checkSerial("delete certificate of "+certname+": serial", serial)
}

// CheckCASignedCerts checks a CAStore.SignedCerts: only its ctx.
func CheckCASignedCerts(ctx context.Context) error {
	return checkCACtx(ctx, "list certificates")
}

// CheckCAPutServerCert checks a CAStore.PutServerCert of certPEM for
// certname.
func CheckCAPutServerCert(ctx context.Context, certname string, certPEM []byte) error {
	if err := checkCACertname(ctx, "store server certificate", certname); err != nil {
		return err
	}
	return checkPEM("store server certificate", certname, certPEM)
}

// CheckCAServerCerts checks a CAStore.ServerCerts of dnsName: only its
// ctx (any name may be asked for; "" asks for all).
func CheckCAServerCerts(ctx context.Context, dnsName string) error {
	return checkCACtx(ctx, "list server certificates")
}

func checkCACtx(ctx context.Context, op string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	return nil
}

func checkCACertname(ctx context.Context, op, certname string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%s of %s: %w", op, certname, err)
	}
	if err := ValidateCertname(certname); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	return nil
}

func checkPEM(op, certname string, pem []byte) error {
	if len(pem) == 0 {
		return fmt.Errorf("%s of %s: no PEM: %w", op, certname, ErrInvalid)
	}
	return nil
}

func checkSerial(what string, n *big.Int) error {
	if n == nil || n.Sign() <= 0 {
		return fmt.Errorf("%s %v is not a positive number: %w", what, n, ErrInvalid)
	}
	return nil
}

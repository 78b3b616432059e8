package farm

import (
	"context"
	"math/big"
	"time"
)

// CAStore keeps a CA's records: its certificate, serial counter, inventory,
// pending requests, signed certificates, the front doors' certificates and
// the CRL. The CA key is not a record: it comes from a CAKeySource.
//
// Drivers: the directory laid out like Puppet Server's cadir (ca.DirStore),
// and DynamoDB (dynamostate.CAStore); farmtest.TestCAStore is their suite.
// A driver whose writes are not conditional themselves serialises changes
// with Lock; a driver with conditional writes returns a no-op from Lock and
// enforces the conditions of NextSerial, PutSigned, DeleteSigned, Create and
// PutCRL itself, so that several processes on several hosts can sign at
// once. Every method returns ErrNotFound for a missing record and
// ErrConflict for a failed condition.
type CAStore interface {
	// Lock serialises a change with other processes sharing the store,
	// waiting until ctx ends.
	Lock(ctx context.Context) (unlock func(), err error)
	// Check verifies the store's own records are usable (the serial
	// counter); the CA calls it once when it opens.
	Check(ctx context.Context) error

	// CACert returns the CA certificate (PEM); ErrNotFound when there is no
	// CA yet.
	CACert(ctx context.Context) ([]byte, error)
	// Create records a new CA: its certificate, first CRL (number 0), the
	// serial counter at CAGenesis.NextSerial and the CA certificate's
	// inventory entry. ErrConflict when the store already has a CA.
	Create(ctx context.Context, g CAGenesis) error

	// NextSerial takes a serial number from the counter: no two calls, from
	// any process, ever get the same number.
	NextSerial(ctx context.Context) (*big.Int, error)
	// RecordIssued adds a certificate to the inventory.
	RecordIssued(ctx context.Context, e CertIssued) error

	// Request, PutRequest and DeleteRequest keep pending certificate
	// requests (PEM) by certname; deleting a missing one is not an error.
	Request(ctx context.Context, certname string) ([]byte, error)
	PutRequest(ctx context.Context, certname string, csrPEM []byte) error
	DeleteRequest(ctx context.Context, certname string) error
	// Requests returns every pending request by certname.
	Requests(ctx context.Context) (map[string][]byte, error)

	// Signed returns the certificate (PEM) held by certname.
	Signed(ctx context.Context, certname string) ([]byte, error)
	// PutSigned stores certPEM as certname's certificate. replace is the
	// serial of the certificate it replaces, nil when certname must hold
	// none; ErrConflict when certname holds anything else (or nothing,
	// when replace is set).
	PutSigned(ctx context.Context, certname string, certPEM []byte, replace *big.Int) error
	// DeleteSigned removes certname's certificate if its serial is serial.
	DeleteSigned(ctx context.Context, certname string, serial *big.Int) error
	// SignedCerts returns every held certificate by certname.
	SignedCerts(ctx context.Context) (map[string][]byte, error)

	// PutServerCert records a front door's certificate (PEM): agents may
	// not take its names. ServerCerts returns those carrying DNS name
	// dnsName, or all of them when dnsName is "". Every certificate
	// request asks for one name, so that must not cost a scan.
	PutServerCert(ctx context.Context, certname string, certPEM []byte) error
	ServerCerts(ctx context.Context, dnsName string) ([][]byte, error)

	// CRL returns the current CRL (PEM). PutCRL replaces it with crlPEM,
	// whose CRL number is number, if the current one's number is prev.
	CRL(ctx context.Context) ([]byte, error)
	PutCRL(ctx context.Context, crlPEM []byte, number, prev *big.Int) error
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

// CAKeySource holds the CA's private key (PEM): a file (ca.KeyFile, and
// the CA directory behind ca.Open) or an AWS Secrets Manager secret
// (cakey.Secret).
type CAKeySource interface {
	// LoadKey returns the key; ErrNotFound when the source holds none.
	LoadKey(ctx context.Context) ([]byte, error)
	// CreateKey stores a new key; ErrConflict when the source holds one.
	CreateKey(ctx context.Context, keyPEM []byte) error
	// String names the source in messages ("file /etc/…/ca_key.pem").
	String() string
}

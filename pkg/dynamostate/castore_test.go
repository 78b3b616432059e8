package dynamostate

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/smithy-go/middleware"

	"github.com/compilefarm/compilefarm/pkg/ca"
	"github.com/compilefarm/compilefarm/pkg/farm"
	"github.com/compilefarm/compilefarm/pkg/farm/farmtest"
	"github.com/compilefarm/compilefarm/pkg/memstore"
)

var discardLogger = slog.New(slog.DiscardHandler)

// newCATable returns the name of a fresh CA table on the emulator, deleted
// when the test ends.
func newCATable(t testing.TB) string {
	t.Helper()
	if testing.Short() { // also for a test that forgot its own guard
		t.Skip("needs the DynamoDB emulator; skipped with -short")
	}
	table := fmt.Sprintf("t%04d-ca", tableSeq.Add(1))
	client := newClient(emu.URL)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := NewCAStore(client, table).EnsureTable(ctx); err != nil {
		t.Fatalf("create CA table: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := client.DeleteTable(ctx, &dynamodb.DeleteTableInput{TableName: aws.String(table)}); err != nil {
			t.Logf("delete table %s: %v", table, err)
		}
	})
	return table
}

func TestCAStoreContract(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the DynamoDB emulator; skipped with -short")
	}
	farmtest.TestCAStore(t, func(t *testing.T) farm.CAStore { return NewCAStore(newClient(emu.URL), newCATable(t)) })
}

// openCA opens a CA on table with the key in keys, on a client of its
// own, as a separate front door would.
func openCA(t *testing.T, table string, keys farm.CAKeySource, opts ca.Options) *ca.CA {
	t.Helper()
	if opts.KeyBits == 0 {
		opts.KeyBits = 2048
	}
	opts.ServerDir = t.TempDir()
	opts.Logger = discardLogger
	c, err := ca.Init(t.Context(), NewCAStore(newClient(emu.URL), table), keys, opts)
	if err != nil {
		t.Fatalf("open CA on table %s: %v", table, err)
	}
	return c
}

func TestCAContractOnDynamoDB(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the DynamoDB emulator; skipped with -short")
	}
	farmtest.TestCA(t, func(t *testing.T) farm.CA {
		return openCA(t, newCATable(t), memstore.NewCAKey(), ca.Options{})
	})
}

func TestCASharedOnDynamoDB(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the DynamoDB emulator; skipped with -short")
	}
	farmtest.TestSharedCA(t, func(t *testing.T) (farm.CA, farm.CA) {
		table, key := newCATable(t), memstore.NewCAKey()
		return openCA(t, table, key, ca.Options{Autosign: true}), openCA(t, table, key, ca.Options{Autosign: true})
	})
}

func TestCANewNeedsACA(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the DynamoDB emulator; skipped with -short")
	}
	_, err := ca.New(t.Context(), NewCAStore(newClient(emu.URL), newCATable(t)), memstore.NewCAKey(),
		ca.Options{ServerDir: t.TempDir()})
	if err == nil || !errors.Is(err, farm.ErrNotFound) {
		t.Fatalf("New on an empty table: err = %v, want ErrNotFound telling to run broker ca init", err)
	}
}

// TestCRLReadsPartsOnlyWhenChanged: CRL reads the head item on every call
// and the parts only for a generation the store has not read or written
// itself, so the front door that wrote a CRL never reads it back.
func TestCRLReadsPartsOnlyWhenChanged(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the DynamoDB emulator; skipped with -short")
	}
	var gets atomic.Int32
	countGets := func(o *dynamodb.Options) {
		o.APIOptions = append(o.APIOptions, func(stack *middleware.Stack) error {
			return stack.Initialize.Add(middleware.InitializeMiddlewareFunc("countGets",
				func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
					if _, ok := in.Parameters.(*dynamodb.GetItemInput); ok {
						gets.Add(1)
					}
					return next.HandleInitialize(ctx, in)
				}), middleware.Before)
		})
	}
	crlGets := func(s *CAStore, want []byte) int32 {
		t.Helper()
		gets.Store(0)
		got, err := s.CRL(t.Context())
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("CRL = %d bytes, %v; want the %d bytes written", len(got), err, len(want))
		}
		return gets.Load()
	}
	table := newCATable(t)
	writer := NewCAStore(newClient(emu.URL, countGets), table)
	if err := writer.writeCRL(t.Context(), []byte("CRL number 0"), big.NewInt(0), nil); err != nil {
		t.Fatal(err)
	}
	crl := bytes.Repeat([]byte("r"), 2*crlPartBytes+1) // three parts
	if err := writer.PutCRL(t.Context(), crl, big.NewInt(1), big.NewInt(0)); err != nil {
		t.Fatal(err)
	}
	if n := crlGets(writer, crl); n != 1 {
		t.Fatalf("the writer read %d items for the CRL it wrote, want 1 (the head)", n)
	}
	reader := NewCAStore(newClient(emu.URL, countGets), table)
	if n := crlGets(reader, crl); n != 4 {
		t.Fatalf("another store read %d items for a new CRL, want 4 (the head and three parts)", n)
	}
	if n := crlGets(reader, crl); n != 1 {
		t.Fatalf("another store read %d items for an unchanged CRL, want 1 (the head)", n)
	}
}

// A certificate request looks its name up among the front doors' names
// with one read: the CA table, which holds every certificate ever issued,
// is never scanned to sign.
func TestSigningDoesNotScan(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the DynamoDB emulator; skipped with -short")
	}
	var scans atomic.Int32
	countScans := func(o *dynamodb.Options) {
		o.APIOptions = append(o.APIOptions, func(stack *middleware.Stack) error {
			return stack.Initialize.Add(middleware.InitializeMiddlewareFunc("countScans",
				func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
					if _, ok := in.Parameters.(*dynamodb.ScanInput); ok {
						scans.Add(1)
					}
					return next.HandleInitialize(ctx, in)
				}), middleware.Before)
		})
	}
	table := newCATable(t)
	c, err := ca.Init(t.Context(), NewCAStore(newClient(emu.URL, countScans), table), memstore.NewCAKey(),
		ca.Options{KeyBits: 2048, Autosign: true, ServerDir: t.TempDir(), Logger: discardLogger})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.IssueServerCert(t.Context(), "door.example.test", []string{"puppet"}, ""); err != nil {
		t.Fatal(err)
	}
	scans.Store(0)
	for _, name := range []string{"agent1.example.test", "agent2.example.test"} {
		csr, _ := farmtest.NewCSR(t, name)
		if err := c.SubmitCSR(t.Context(), name, csr); err != nil {
			t.Fatal(err)
		}
	}
	if n := scans.Load(); n != 0 {
		t.Fatalf("signing two requests scanned the CA table %d times, want 0", n)
	}
	// The name index still guards the front door's names.
	csr, _ := farmtest.NewCSR(t, "puppet")
	if err := c.SubmitCSR(t.Context(), "puppet", csr); !errors.Is(err, farm.ErrConflict) {
		t.Fatalf("a request for the front door's name: err = %v, want ErrConflict", err)
	}
}

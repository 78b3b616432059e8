package dynamostate

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"maps"
	"math/big"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/compilefarm/compilefarm/pkg/farm"
)

// CAStore keeps a Puppet CA's records (farm.CAStore) in one DynamoDB table,
// partition key AttrKey (S), one item per record:
//
//	ca                  cert: the CA certificate (PEM)
//	serial              next: the next serial number (N)
//	crl                 number (N), gen, parts (N), sha256: the current CRL
//	crl#<gen>#<i>       data: part i of the CRL (PEM) written as generation gen
//	req#<certname>      pem: a pending certificate request
//	cert#<certname>     pem, serial (hex): the certificate a name holds
//	server#<serial>     pem, certname: a front door's certificate
//	srvname#<dns name>  c_<serial>: the front door certificates carrying the name
//	issued#<serial>     certname, not_before, not_after: the inventory
//
// Every change is one conditional write, so front doors on any number of
// hosts sign at once without a lock: NextSerial is an atomic ADD (no serial
// is ever handed out twice), a certificate replaces only the serial it
// names, a CRL only the CRL number it was built on, and Create only an
// empty table. The CA key is never here (farm.CAKeySource).
//
// Listing requests and certificates scans the table, which is fine for the
// tens of thousands of agents a CA serves. The CRL is kept in parts (see
// cacrl.go), so it has no size limit and re-reading an unchanged one costs
// one small item.
type CAStore struct {
	client *dynamodb.Client
	table  string

	crlMu  sync.Mutex
	crlGen string // the generation crlPEM was read or written as
	crlPEM []byte
}

// AttrKey is the CA table's partition key.
const AttrKey = "key"

var _ farm.CAStore = (*CAStore)(nil)

// NewCAStore returns the CA store in table.
func NewCAStore(client *dynamodb.Client, table string) *CAStore {
	return &CAStore{client: client, table: table}
}

// EnsureTable creates the CA table (on-demand billing) unless it exists
// and waits until it is active. For tests and development; in AWS the
// infra stack owns the table.
func (s *CAStore) EnsureTable(ctx context.Context) error {
	return ensureTable(ctx, s.client, s.table, TableSpecFor(RoleCA))
}

func (s *CAStore) key(k string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{AttrKey: &types.AttributeValueMemberS{Value: k}}
}

func str(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
func num(n *big.Int) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: n.String()}
}

// err translates err, with a lost condition as farm.ErrConflict.
func (s *CAStore) err(what string, err error) error {
	err = translate(err, s.table)
	if errors.Is(err, errLost) {
		return fmt.Errorf("%s: %w", what, farm.ErrConflict)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// Lock returns at once: every change is a conditional write.
func (s *CAStore) Lock(ctx context.Context) (func(), error) {
	if err := farm.CheckCALock(ctx); err != nil {
		return nil, err
	}
	return func() {}, nil
}

// Check makes sure the serial counter exists.
func (s *CAStore) Check(ctx context.Context) error {
	if err := farm.CheckCACheck(ctx); err != nil {
		return err
	}
	if _, err := s.get(ctx, "serial"); err != nil {
		return fmt.Errorf("read serial counter: %w", err)
	}
	return nil
}

func (s *CAStore) get(ctx context.Context, k string) (map[string]types.AttributeValue, error) {
	out, err := s.client.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: aws.String(s.table), Key: s.key(k), ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return nil, s.err("read "+k, err)
	}
	if out.Item == nil {
		return nil, fmt.Errorf("%s in table %s: %w", k, s.table, farm.ErrNotFound)
	}
	return out.Item, nil
}

// getString reads attribute attr of item k.
func (s *CAStore) getString(ctx context.Context, k, attr string) ([]byte, error) {
	item, err := s.get(ctx, k)
	if err != nil {
		return nil, err
	}
	v, ok := item[attr].(*types.AttributeValueMemberS)
	if !ok {
		return nil, fmt.Errorf("item %s of table %s has no string %s", k, s.table, attr)
	}
	return []byte(v.Value), nil
}

// put writes item k; cond (if any) must hold.
func (s *CAStore) put(ctx context.Context, k string, attrs map[string]types.AttributeValue, cond string, values map[string]types.AttributeValue) error {
	item := s.key(k)
	for a, v := range attrs {
		item[a] = v
	}
	in := &dynamodb.PutItemInput{TableName: aws.String(s.table), Item: item}
	if cond != "" {
		in.ConditionExpression = aws.String(cond)
		in.ExpressionAttributeNames = condNames(cond)
		in.ExpressionAttributeValues = values
	}
	if _, err := s.client.PutItem(ctx, in); err != nil {
		return s.err("write "+k, err)
	}
	return nil
}

func (s *CAStore) CACert(ctx context.Context) ([]byte, error) {
	if err := farm.CheckCACert(ctx); err != nil {
		return nil, err
	}
	b, err := s.getString(ctx, "ca", "cert")
	if err != nil {
		return nil, fmt.Errorf("read CA certificate: %w", err)
	}
	return b, nil
}

// Create writes the counter, the CRL and the inventory entry, each only if
// absent, and the CA certificate last, only if absent: a table without the
// ca item has no CA yet. Two processes creating at once sign with the same
// key (farm.CAKeySource.GenerateKey lets one key win), so whichever CRL lands is
// signed by the CA that lands.
func (s *CAStore) Create(ctx context.Context, g farm.CAGenesis) error {
	if err := farm.CheckCACreate(ctx, &g); err != nil {
		return err
	}
	if _, err := s.get(ctx, "ca"); err == nil {
		return fmt.Errorf("create CA in table %s: %w", s.table, farm.ErrConflict)
	}
	ifAbsent := func(k string, attrs map[string]types.AttributeValue) error {
		err := s.put(ctx, k, attrs, "attribute_not_exists(#k)", nil)
		if errors.Is(err, farm.ErrConflict) {
			return nil
		}
		return err
	}
	crlNumber, err := crlNumberOf(g.CRLPEM)
	if err != nil {
		return err
	}
	if err := ifAbsent("serial", map[string]types.AttributeValue{"next": num(g.NextSerial)}); err != nil {
		return err
	}
	if err := s.writeCRL(ctx, g.CRLPEM, crlNumber, nil); err != nil && !errors.Is(err, farm.ErrConflict) {
		return err
	}
	if err := s.RecordIssued(ctx, g.Issued); err != nil {
		return err
	}
	return s.put(ctx, "ca", map[string]types.AttributeValue{"cert": str(string(g.CertPEM)), "created": str(time.Now().UTC().Format(time.RFC3339))},
		"attribute_not_exists(#k)", nil)
}

// NextSerial adds one to the counter atomically and returns the value it
// had.
func (s *CAStore) NextSerial(ctx context.Context) (*big.Int, error) {
	if err := farm.CheckCANextSerial(ctx); err != nil {
		return nil, err
	}
	out, err := s.client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 aws.String(s.table),
		Key:                       s.key("serial"),
		UpdateExpression:          aws.String("ADD #n :one"),
		ConditionExpression:       aws.String("attribute_exists(#k)"),
		ExpressionAttributeNames:  map[string]string{"#n": "next", "#k": AttrKey},
		ExpressionAttributeValues: map[string]types.AttributeValue{":one": &types.AttributeValueMemberN{Value: "1"}},
		ReturnValues:              types.ReturnValueUpdatedOld,
	})
	if err != nil {
		return nil, s.err("take a serial number", err)
	}
	v, ok := out.Attributes["next"].(*types.AttributeValueMemberN)
	if !ok {
		return nil, fmt.Errorf("take a serial number: counter in table %s has no number", s.table)
	}
	n, ok := new(big.Int).SetString(v.Value, 10)
	if !ok || n.Sign() <= 0 {
		return nil, fmt.Errorf("take a serial number: counter %q in table %s is not a positive number", v.Value, s.table)
	}
	return n, nil
}

// RecordIssued writes issued#<serial>.
func (s *CAStore) RecordIssued(ctx context.Context, e farm.CertIssued) error {
	if err := farm.CheckCARecordIssued(ctx, &e); err != nil {
		return err
	}
	return s.put(ctx, "issued#"+serialKey(e.Serial), map[string]types.AttributeValue{
		"certname":   str(e.Certname),
		"not_before": str(e.NotBefore.UTC().Format(time.RFC3339)),
		"not_after":  str(e.NotAfter.UTC().Format(time.RFC3339)),
	}, "", nil)
}

// Request reads req#<certname>.
func (s *CAStore) Request(ctx context.Context, certname string) ([]byte, error) {
	if err := farm.CheckCARequest(ctx, certname); err != nil {
		return nil, err
	}
	return s.getString(ctx, "req#"+certname, "pem")
}

// PutRequest writes req#<certname>.
func (s *CAStore) PutRequest(ctx context.Context, certname string, csrPEM []byte) error {
	if err := farm.CheckCAPutRequest(ctx, certname, csrPEM); err != nil {
		return err
	}
	return s.put(ctx, "req#"+certname, map[string]types.AttributeValue{"pem": str(string(csrPEM))}, "", nil)
}

// DeleteRequest deletes req#<certname>.
func (s *CAStore) DeleteRequest(ctx context.Context, certname string) error {
	if err := farm.CheckCADeleteRequest(ctx, certname); err != nil {
		return err
	}
	if _, err := s.client.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String(s.table), Key: s.key("req#" + certname)}); err != nil {
		return s.err("delete request of "+certname, err)
	}
	return nil
}

// Requests scans the req# items.
func (s *CAStore) Requests(ctx context.Context) (map[string][]byte, error) {
	if err := farm.CheckCARequests(ctx); err != nil {
		return nil, err
	}
	return s.scanPrefix(ctx, "req#")
}

// Signed reads cert#<certname>.
func (s *CAStore) Signed(ctx context.Context, certname string) ([]byte, error) {
	if err := farm.CheckCASigned(ctx, certname); err != nil {
		return nil, err
	}
	return s.getString(ctx, "cert#"+certname, "pem")
}

// PutSigned writes cert#<certname> if it is absent (replace nil) or holds
// serial replace.
func (s *CAStore) PutSigned(ctx context.Context, certname string, certPEM []byte, replace *big.Int) error {
	if err := farm.CheckCAPutSigned(ctx, certname, certPEM, replace); err != nil {
		return err
	}
	serial, err := serialOf(certPEM)
	if err != nil {
		return fmt.Errorf("store certificate of %s: %w", certname, err)
	}
	attrs := map[string]types.AttributeValue{"pem": str(string(certPEM)), "serial": str(serialKey(serial))}
	if replace == nil {
		return s.put(ctx, "cert#"+certname, attrs, "attribute_not_exists(#k)", nil)
	}
	return s.put(ctx, "cert#"+certname, attrs, "#s = :old", map[string]types.AttributeValue{":old": str(serialKey(replace))})
}

// DeleteSigned removes cert#<certname> if it holds serial; a missing item
// is not an error, another serial is ErrConflict.
func (s *CAStore) DeleteSigned(ctx context.Context, certname string, serial *big.Int) error {
	if err := farm.CheckCADeleteSigned(ctx, certname, serial); err != nil {
		return err
	}
	_, err := s.client.DeleteItem(ctx, &dynamodb.DeleteItemInput{
		TableName: aws.String(s.table), Key: s.key("cert#" + certname),
		ConditionExpression:       aws.String("attribute_not_exists(#k) OR #s = :s"),
		ExpressionAttributeNames:  condNames("#k #s"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":s": str(serialKey(serial))},
	})
	if err != nil {
		return s.err("delete certificate of "+certname, err)
	}
	return nil
}

// SignedCerts scans the cert# items.
func (s *CAStore) SignedCerts(ctx context.Context) (map[string][]byte, error) {
	if err := farm.CheckCASignedCerts(ctx); err != nil {
		return nil, err
	}
	return s.scanPrefix(ctx, "cert#")
}

// PutServerCert indexes the certificate under each of its DNS names
// (srvname#<name>), then writes server#<serial>.
func (s *CAStore) PutServerCert(ctx context.Context, certname string, certPEM []byte) error {
	if err := farm.CheckCAPutServerCert(ctx, certname, certPEM); err != nil {
		return err
	}
	cert, err := parseCert(certPEM)
	if err != nil {
		return fmt.Errorf("store server certificate of %s: %w", certname, err)
	}
	// Indexed by name first: a certificate listed but not yet indexed would
	// let an agent take one of its names.
	for _, name := range cert.DNSNames {
		if _, err := s.client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName:                 aws.String(s.table),
			Key:                       s.key("srvname#" + name),
			UpdateExpression:          aws.String("SET #c = :pem"),
			ExpressionAttributeNames:  map[string]string{"#c": "c_" + serialKey(cert.SerialNumber)},
			ExpressionAttributeValues: map[string]types.AttributeValue{":pem": str(string(certPEM))},
		}); err != nil {
			return s.err("index server certificate of "+certname+" under "+name, err)
		}
	}
	return s.put(ctx, "server#"+serialKey(cert.SerialNumber), map[string]types.AttributeValue{"pem": str(string(certPEM)), "certname": str(certname)}, "", nil)
}

// ServerCerts reads the srvname#<dnsName> item, which holds every front
// door certificate carrying that name (one attribute c_<serial> each):
// one GetItem per certificate request, not a scan. All of them (dnsName
// "") is a scan, for listing.
func (s *CAStore) ServerCerts(ctx context.Context, dnsName string) ([][]byte, error) {
	if err := farm.CheckCAServerCerts(ctx, dnsName); err != nil {
		return nil, err
	}
	if dnsName == "" {
		all, err := s.scanPrefix(ctx, "server#")
		if err != nil {
			return nil, err
		}
		return slices.Collect(maps.Values(all)), nil
	}
	item, err := s.get(ctx, "srvname#"+dnsName)
	if errors.Is(err, farm.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out [][]byte
	for attr, v := range item {
		if sv, ok := v.(*types.AttributeValueMemberS); ok && strings.HasPrefix(attr, "c_") {
			out = append(out, []byte(sv.Value))
		}
	}
	return out, nil
}

// condNames maps the placeholders a condition uses to attribute names
// (some, like "number", are DynamoDB reserved words).
func condNames(cond string) map[string]string {
	names := map[string]string{}
	for ph, attr := range map[string]string{"#k": AttrKey, "#n": "number", "#s": "serial"} {
		if strings.Contains(cond, ph) {
			names[ph] = attr
		}
	}
	return names
}

// scanPrefix returns the pem attribute of every item whose key starts with
// prefix, by the rest of the key.
func (s *CAStore) scanPrefix(ctx context.Context, prefix string) (map[string][]byte, error) {
	out := map[string][]byte{}
	in := &dynamodb.ScanInput{
		TableName:                 aws.String(s.table),
		ConsistentRead:            aws.Bool(true),
		FilterExpression:          aws.String("begins_with(#k, :p)"),
		ExpressionAttributeNames:  map[string]string{"#k": AttrKey},
		ExpressionAttributeValues: map[string]types.AttributeValue{":p": str(prefix)},
	}
	err := scanItems(ctx, s.client, in, func(item map[string]types.AttributeValue) error {
		k, _ := item[AttrKey].(*types.AttributeValueMemberS)
		v, _ := item["pem"].(*types.AttributeValueMemberS)
		if k != nil && v != nil {
			out[strings.TrimPrefix(k.Value, prefix)] = []byte(v.Value)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", strings.TrimSuffix(prefix, "#"), err)
	}
	return out, nil
}

// serialKey writes a serial as the items do: upper-case hex.
func serialKey(n *big.Int) string { return strings.ToUpper(n.Text(16)) }

func serialOf(certPEM []byte) (*big.Int, error) {
	cert, err := parseCert(certPEM)
	if err != nil {
		return nil, err
	}
	return cert.SerialNumber, nil
}

func parseCert(certPEM []byte) (*x509.Certificate, error) {
	block, _ := pem.Decode(certPEM)
	if block == nil {
		return nil, errors.New("no PEM certificate")
	}
	return x509.ParseCertificate(block.Bytes)
}

func crlNumberOf(crlPEM []byte) (*big.Int, error) {
	block, _ := pem.Decode(crlPEM)
	if block == nil {
		return nil, errors.New("CRL is not PEM")
	}
	rl, err := x509.ParseRevocationList(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("parse CRL: %w", err)
	}
	if rl.Number == nil {
		return nil, errors.New("CRL has no number")
	}
	return rl.Number, nil
}

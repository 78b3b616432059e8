package dynamostate

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math/big"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/compilefarm/compilefarm/pkg/farm"
)

// The CRL of a CAStore grows with every revocation, past DynamoDB's 400 KB
// item limit at about 7,000 entries, and every front door re-reads it once a
// second. So it is written as a generation: its parts first, each in an item
// of its own (crl#<gen>#<i>, crlPartBytes at most), then the head item (crl:
// number, gen, parts, sha256) moved to the new generation with a condition
// on the CRL number it was built on. Readers read the head and, only when
// its generation is not the one they last read or wrote, the parts,
// checking the digest. The losing writer of a race and the replaced
// generation delete their parts afterwards; a reader that meets a part
// already gone reads the head again.

// crlPartBytes keeps a part well under the 400 KB item limit.
const crlPartBytes = 300_000

// crlHead is the head item of the CRL.
type crlHead struct {
	number *big.Int
	gen    string
	parts  int
	sum    string // hex sha256 of the PEM
}

func crlPartKey(gen string, i int) string { return "crl#" + gen + "#" + strconv.Itoa(i) }

// CRL returns the current CRL, reading its parts only when it changed
// since the last call.
func (s *CAStore) CRL(ctx context.Context) ([]byte, error) {
	if err := farm.CheckCACRL(ctx); err != nil {
		return nil, err
	}
	for attempt := 1; ; attempt++ {
		head, err := s.readCRLHead(ctx)
		if err != nil {
			return nil, fmt.Errorf("read CRL: %w", err)
		}
		if pem := s.cachedCRL(head.gen); pem != nil {
			return pem, nil
		}
		pem, err := s.readCRLParts(ctx, head)
		if errors.Is(err, farm.ErrNotFound) && attempt < 5 {
			continue // replaced meanwhile and its parts deleted: read the new head
		}
		if err != nil {
			return nil, fmt.Errorf("read CRL: %w", err)
		}
		s.cacheCRL(head.gen, pem)
		return pem, nil
	}
}

// cachedCRL returns the CRL this store last read or wrote if it is
// generation gen, else nil.
func (s *CAStore) cachedCRL(gen string) []byte {
	s.crlMu.Lock()
	defer s.crlMu.Unlock()
	if s.crlGen != gen {
		return nil
	}
	return s.crlPEM
}

func (s *CAStore) cacheCRL(gen string, pem []byte) {
	s.crlMu.Lock()
	s.crlGen, s.crlPEM = gen, pem
	s.crlMu.Unlock()
}

func (s *CAStore) readCRLHead(ctx context.Context) (crlHead, error) {
	item, err := s.get(ctx, "crl")
	if err != nil {
		return crlHead{}, err
	}
	var h crlHead
	n, _ := item["number"].(*types.AttributeValueMemberN)
	gen, _ := item["gen"].(*types.AttributeValueMemberS)
	parts, _ := item["parts"].(*types.AttributeValueMemberN)
	sum, _ := item["sha256"].(*types.AttributeValueMemberS)
	if n == nil || gen == nil || parts == nil || sum == nil {
		return crlHead{}, fmt.Errorf("CRL head in table %s lacks number, gen, parts or sha256", s.table)
	}
	var ok bool
	if h.number, ok = new(big.Int).SetString(n.Value, 10); !ok {
		return crlHead{}, fmt.Errorf("CRL head in table %s: number %q", s.table, n.Value)
	}
	if h.parts, err = strconv.Atoi(parts.Value); err != nil || h.parts < 1 {
		return crlHead{}, fmt.Errorf("CRL head in table %s: parts %q", s.table, parts.Value)
	}
	h.gen, h.sum = gen.Value, sum.Value
	return h, nil
}

// readCRLParts reads and joins the parts of head's generation and checks
// them against its digest. ErrNotFound when a part is gone.
func (s *CAStore) readCRLParts(ctx context.Context, head crlHead) ([]byte, error) {
	var buf bytes.Buffer
	for i := range head.parts {
		data, err := s.getString(ctx, crlPartKey(head.gen, i), "data")
		if err != nil {
			return nil, err
		}
		buf.Write(data)
	}
	sum := sha256.Sum256(buf.Bytes())
	if hex.EncodeToString(sum[:]) != head.sum {
		return nil, fmt.Errorf("CRL generation %s in table %s does not match its digest", head.gen, s.table)
	}
	return buf.Bytes(), nil
}

// PutCRL replaces the CRL if its number is still prev.
func (s *CAStore) PutCRL(ctx context.Context, crlPEM []byte, number, prev *big.Int) error {
	if err := farm.CheckCAPutCRL(ctx, crlPEM, number, prev); err != nil {
		return err
	}
	return s.writeCRL(ctx, crlPEM, number, prev)
}

// writeCRL writes crlPEM as a new generation and moves the head to it if
// the head's number is prev (nil: if there is no head yet).
func (s *CAStore) writeCRL(ctx context.Context, crlPEM []byte, number, prev *big.Int) error {
	var old crlHead
	if prev != nil {
		h, err := s.readCRLHead(ctx)
		if err != nil {
			return fmt.Errorf("replace CRL: %w", err)
		}
		if h.number.Cmp(prev) != 0 {
			return fmt.Errorf("replace CRL number %s: the current CRL has number %s: %w", prev, h.number, farm.ErrConflict)
		}
		old = h
	}
	var rnd [8]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return err
	}
	gen := number.String() + "-" + hex.EncodeToString(rnd[:])
	parts := 0
	for off := 0; off < len(crlPEM) || parts == 0; off += crlPartBytes {
		end := min(off+crlPartBytes, len(crlPEM))
		if err := s.put(ctx, crlPartKey(gen, parts), map[string]types.AttributeValue{"data": str(string(crlPEM[off:end]))}, "", nil); err != nil {
			s.deleteCRLParts(ctx, gen, parts)
			return fmt.Errorf("write CRL: %w", err)
		}
		parts++
	}
	sum := sha256.Sum256(crlPEM)
	attrs := map[string]types.AttributeValue{
		"number": num(number), "gen": str(gen), "parts": &types.AttributeValueMemberN{Value: strconv.Itoa(parts)},
		"sha256": str(hex.EncodeToString(sum[:])),
	}
	var err error
	if prev == nil {
		err = s.put(ctx, "crl", attrs, "attribute_not_exists(#k)", nil)
	} else {
		err = s.put(ctx, "crl", attrs, "#n = :prev", map[string]types.AttributeValue{":prev": num(prev)})
	}
	if err != nil {
		s.deleteCRLParts(ctx, gen, parts)
		return err
	}
	// The next CRL call of this store finds the head at gen and need not
	// read back the parts it just wrote.
	s.cacheCRL(gen, bytes.Clone(crlPEM))
	if old.gen != "" {
		s.deleteCRLParts(ctx, old.gen, old.parts)
	}
	return nil
}

// deleteCRLParts removes a generation's parts, best effort: a part left
// behind is garbage, never read.
func (s *CAStore) deleteCRLParts(ctx context.Context, gen string, parts int) {
	for i := range parts {
		_, _ = s.client.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String(s.table), Key: s.key(crlPartKey(gen, i))})
	}
}

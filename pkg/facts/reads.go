package facts

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"

	"github.com/compilefarm/compilefarm/internal/canonjson"
	"github.com/compilefarm/compilefarm/pkg/farm"
)

// ReadKind says what a compile observed of a fact path.
type ReadKind string

const (
	// ReadValue: the value at the path (or that it is missing).
	ReadValue ReadKind = "value"
	// ReadHash: only whether the value at the path is a hash.
	ReadHash ReadKind = "hash"
	// ReadPresent: only whether the path exists.
	ReadPresent ReadKind = "present"
	// ReadKeys: the key set of the hash at the path.
	ReadKeys ReadKind = "keys"
)

// Read is one observation a compile made of the node's facts: Path is the
// key path from the top of the facts hash (an empty path is the whole
// hash); Value is what was observed, in canonical JSON: the value (null
// with Missing set when absent), true/false for hash and present, the
// sorted key list for keys.
type Read struct {
	Path    []string        `json:"path"`
	Kind    ReadKind        `json:"kind"`
	Value   json.RawMessage `json:"value,omitempty"`
	Missing bool            `json:"missing,omitempty"`
}

// Observe computes what a read of this path and kind sees in values.
func Observe(values map[string]any, path []string, kind ReadKind) (Read, error) {
	r := Read{Path: path, Kind: kind}
	v, ok := Lookup(values, path)
	var obs any
	switch kind {
	case ReadValue:
		if !ok {
			r.Missing = true
			return r, nil
		}
		obs = v
	case ReadHash:
		_, isHash := v.(map[string]any)
		obs = ok && isHash
	case ReadPresent:
		obs = ok
	case ReadKeys:
		m, isHash := v.(map[string]any)
		if !ok || !isHash {
			r.Missing = true
			return r, nil
		}
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		obs = keys
	default:
		return Read{}, fmt.Errorf("fact read kind %q is not value, hash, present or keys: %w", kind, farm.ErrInvalid)
	}
	b, err := json.Marshal(obs)
	if err != nil {
		return Read{}, fmt.Errorf("encode fact read %v: %w", path, err)
	}
	r.Value = b
	return r, nil
}

// Lookup returns the value at a nested key path of a fact document, and
// whether it is there.
func Lookup(values map[string]any, path []string) (any, bool) {
	var cur any = values
	for _, k := range path {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = m[k]; !ok {
			return nil, false
		}
	}
	return cur, true
}

// Changed reports whether any read would observe something else in values:
// the recompile rule. Values must be decoded with numbers kept exact (as
// Decode does), so 1 and 1.0 differ.
func Changed(reads []Read, values map[string]any) (bool, error) {
	c, err := Changes(reads, values, 1)
	return len(c) > 0, err
}

// Change is a read that observes something else in newer facts, with both
// observations (see farm.FactChange).
type Change = farm.FactChange

// MaxChangeValue bounds the JSON of each observation a Change carries: a
// longer one is replaced by a JSON string naming its length and digest,
// "(1234 bytes of JSON, sha256 0123456789ab)".
const MaxChangeValue = 512

// Changes returns the reads that would observe something else in values,
// in order, with what each observed then and observes now: the reads that
// make Changed true. It stops after limit changes (limit ≤ 0: no limit).
// An error (an unknown read kind) comes with the changes found before it.
func Changes(reads []Read, values map[string]any, limit int) ([]Change, error) {
	var out []Change
	for _, r := range reads {
		now, err := Observe(values, r.Path, r.Kind)
		if err != nil {
			return out, err
		}
		if now.Missing == r.Missing && bytes.Equal(r.Value, now.Value) {
			continue // the same JSON (as CanonicalReads makes it): no need to re-encode
		}
		was, is := canonjson.Of(r.Value), canonjson.Of(now.Value)
		if now.Missing == r.Missing && bytes.Equal(was, is) {
			continue
		}
		out = append(out, Change{
			Path: r.Path, Kind: string(r.Kind),
			Old: boundJSON(was, r.Missing), New: boundJSON(is, now.Missing),
			OldMissing: r.Missing, NewMissing: now.Missing,
		})
		if limit > 0 && len(out) >= limit {
			break
		}
	}
	return out, nil
}

// CanonicalReads rewrites the observations of reads in canonical JSON,
// as Observe writes them (sorted keys, numbers as written), so that
// Changes finds an observation that did not change equal byte for byte
// instead of re-encoding both: for a read record that is kept and
// compared with every upload.
func CanonicalReads(reads []Read) {
	for i := range reads {
		reads[i].Value = canonjson.Of(reads[i].Value)
	}
}

// boundJSON returns the observation b to keep in a Change: nothing for a
// missing path, b when it is at most MaxChangeValue bytes, else a JSON
// string saying how long it was and its digest.
func boundJSON(b []byte, missing bool) json.RawMessage {
	if missing || len(b) == 0 {
		return nil
	}
	if len(b) <= MaxChangeValue {
		return b
	}
	marker, _ := json.Marshal(fmt.Sprintf("(%d bytes of JSON, sha256 %s)", len(b), farm.DigestOf(b)[:12]))
	return marker
}

// Projection is a digest of what the reads would observe in values (their
// paths and kinds applied to these facts): two fact sets with the same
// projection look the same to a compile that reads those paths.
func Projection(reads []Read, values map[string]any) (farm.Digest, error) {
	h := sha256.New()
	for _, r := range reads {
		o, err := Observe(values, r.Path, r.Kind)
		if err != nil {
			return "", err
		}
		b, err := json.Marshal(o)
		if err != nil {
			return "", fmt.Errorf("encode fact read %v: %w", r.Path, err)
		}
		h.Write(b)
		h.Write([]byte{'\n'})
	}
	return farm.Digest(hex.EncodeToString(h.Sum(nil))), nil
}

// ReadRecord is a compile engine's record of the facts one compile read
// (the catalog depends on these reads and on nothing else of the facts)
// and of the PuppetDB queries it made; stored as JSON in
// farm.SpaceCatalogs, named by CatalogRef.ReadsDigest.
type ReadRecord struct {
	Reads []Read `json:"reads"`
	// AlwaysRecompile marks a catalog that depends on more than facts and
	// code (generate(), Timestamp.new, ...): any fact upload recompiles it.
	AlwaysRecompile bool   `json:"always_recompile,omitempty"`
	Why             string `json:"why,omitempty"`
	// Clock marks a catalog that read the current time (Timestamp(),
	// time(), strftime(format), Time in a template; puppetlabs-apt does
	// for update frequency daily or weekly) and nothing else beyond facts
	// and code: the farm reuses it for the intake's ClockMaxAge after its
	// compile, then recompiles it at the next check-in.
	Clock    bool   `json:"clock,omitempty"`
	ClockWhy string `json:"clock_why,omitempty"`
	// Queries are the PuppetDB queries the compile made and digests of
	// what they answered, one per distinct query (by QueryDigest, in the
	// order first made): the catalog depends on their results too.
	Queries []farm.QueryRead `json:"queries,omitempty"`
}

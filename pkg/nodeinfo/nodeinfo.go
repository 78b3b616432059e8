// Package nodeinfo holds what a compile knows of a node besides its facts
// and code (trusted certificate extensions and the classifier's answer),
// in the canonical form the farm stores and digests.
package nodeinfo

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/compilefarm/compilefarm/pkg/classifier"
	"github.com/compilefarm/compilefarm/pkg/farm"
)

// Info is what a compile needs to know of a node besides its facts and
// code, as Puppet Server learns it per request: the trusted extensions of
// the node's certificate ($trusted['extensions']) and the node's
// classification by the external node classifier (its classes and
// top-scope parameters). It is a compile input like the facts: stored by
// digest (farm.SpaceNodeInfo, canonical JSON) when it changes, named by
// jobs, requests and catalogs, and a change of it recompiles the node.
type Info struct {
	TrustedExtensions map[string]string `json:"trusted_extensions,omitempty"`
	// Classes and Parameters are classifier.Classification's.
	Classes    any            `json:"classes,omitempty"`
	Parameters map[string]any `json:"parameters,omitempty"`
}

// Classified is i with the classification c.
func (i Info) Classified(c classifier.Classification) Info {
	i.Classes, i.Parameters = c.Classes, c.Parameters
	return i
}

// Encode returns the canonical JSON of the node information and its
// digest. Maps are written with sorted keys and numbers as they were read,
// so decoding and encoding again gives the same bytes. Empty node
// information (no extensions, no classifier) has no document and the empty
// digest, as a node recorded before the farm kept node information: such
// nodes do not recompile for it.
func (i Info) Encode() ([]byte, farm.Digest, error) {
	if len(i.TrustedExtensions) == 0 && i.Classes == nil && len(i.Parameters) == 0 {
		return nil, "", nil
	}
	b, err := json.Marshal(i)
	if err != nil {
		return nil, "", fmt.Errorf("encode node information: %w", err)
	}
	return b, farm.DigestOf(b), nil
}

// Decode reads stored node information, keeping numbers exact. A document
// that is not node information returns an error wrapping farm.ErrInvalid.
func Decode(b []byte) (Info, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var i Info
	if err := dec.Decode(&i); err != nil {
		return Info{}, fmt.Errorf("decode node information: %v: %w", err, farm.ErrInvalid)
	}
	return i, nil
}

// Used is the node information a slot's compile for request r was made
// with: the catalog's when it answers r (a classification at compile time
// may be newer than the request's), else the request's.
func Used(c *farm.CatalogRef, r *farm.CompileRequest) farm.Digest {
	if c != nil && c.Seq == r.Seq {
		return c.NodeInfo
	}
	return r.NodeInfo
}

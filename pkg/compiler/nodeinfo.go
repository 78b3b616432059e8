package compiler

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"

	"github.com/compilefarm/compilefarm/pkg/classifier"
	"github.com/compilefarm/compilefarm/pkg/farm"
)

// NodeInfo is what a compile needs to know of a node besides its facts and
// code, as Puppet Server learns it per request: the trusted extensions of
// the node's certificate ($trusted['extensions']) and the node's
// classification by the external node classifier (its classes and
// top-scope parameters). It is a compile input like the facts: stored by
// digest (farm.SpaceNodeInfo, canonical JSON) when it changes, named by
// jobs, requests and catalogs, and a change of it recompiles the node.
type NodeInfo struct {
	TrustedExtensions map[string]string `json:"trusted_extensions,omitempty"`
	// Classes and Parameters are classifier.Classification's.
	Classes    any            `json:"classes,omitempty"`
	Parameters map[string]any `json:"parameters,omitempty"`
}

// Classifier classifies nodes (the external node classifier). Errors wrap
// classifier.ErrFailed when the classifier itself failed.
type Classifier interface {
	Classify(ctx context.Context, certname string) (classifier.Classification, error)
}

// classified is info with the classification c.
func (i NodeInfo) classified(c classifier.Classification) NodeInfo {
	i.Classes, i.Parameters = c.Classes, c.Parameters
	return i
}

// encode returns the canonical JSON of the node information and its
// digest. Maps are written with sorted keys and numbers as they were read,
// so decoding and encoding again gives the same bytes. Empty node
// information (no extensions, no classifier) has no document and the empty
// digest, as a node recorded before the farm kept node information: such
// nodes do not recompile for it.
func (i NodeInfo) encode() ([]byte, farm.Digest, error) {
	if len(i.TrustedExtensions) == 0 && i.Classes == nil && len(i.Parameters) == 0 {
		return nil, "", nil
	}
	b, err := json.Marshal(i)
	if err != nil {
		return nil, "", fmt.Errorf("encode node information: %w", err)
	}
	return b, farm.DigestOf(b), nil
}

// decodeNodeInfo reads stored node information, keeping numbers exact.
func decodeNodeInfo(b []byte) (NodeInfo, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var i NodeInfo
	if err := dec.Decode(&i); err != nil {
		return NodeInfo{}, fmt.Errorf("decode node information: %v: %w", err, farm.ErrInvalid)
	}
	return i, nil
}

// loadNodeInfo reads the node information with digest d (immutable, so
// kept decoded in memory: most nodes of a site share a few); a zero
// NodeInfo for an empty digest (a job from before the farm kept it).
func (p *Pool) loadNodeInfo(ctx context.Context, certname string, d farm.Digest) (NodeInfo, error) {
	if d == "" {
		return NodeInfo{}, nil
	}
	if i, ok := p.nodeInfos.Load(d); ok {
		return i, nil
	}
	b, err := p.Content.Get(ctx, farm.SpaceNodeInfo, d)
	if err != nil {
		return NodeInfo{}, fmt.Errorf("read node information %s of %s: %w", d, certname, err)
	}
	i, err := decodeNodeInfo(b)
	if err != nil {
		return NodeInfo{}, err
	}
	p.nodeInfos.Store(d, i)
	return i, nil
}

// nodeInfoUsed is the node information a slot's compile for request r was
// made with: the catalog's when it answers r (a classification at compile
// time may be newer than the request's), else the request's.
func nodeInfoUsed(c *farm.CatalogRef, r *farm.CompileRequest) farm.Digest {
	if c != nil && c.Seq == r.Seq {
		return c.NodeInfo
	}
	return r.NodeInfo
}

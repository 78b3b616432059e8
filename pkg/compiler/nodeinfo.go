package compiler

import (
	"context"
	"fmt"

	"github.com/compilefarm/compilefarm/pkg/classifier"
	"github.com/compilefarm/compilefarm/pkg/farm"
	"github.com/compilefarm/compilefarm/pkg/nodeinfo"
)

// Classifier classifies nodes (the external node classifier). Errors wrap
// classifier.ErrFailed when the classifier itself failed.
type Classifier interface {
	Classify(ctx context.Context, certname string) (classifier.Classification, error)
}

// loadNodeInfo reads the node information with digest d (immutable, so
// kept decoded in memory: most nodes of a site share a few); a zero
// NodeInfo for an empty digest (a job from before the farm kept it).
func (p *Pool) loadNodeInfo(ctx context.Context, certname string, d farm.Digest) (nodeinfo.Info, error) {
	if d == "" {
		return nodeinfo.Info{}, nil
	}
	if i, ok := p.nodeInfos.Load(d); ok {
		return i, nil
	}
	b, err := p.Content.Get(ctx, farm.SpaceNodeInfo, d)
	if err != nil {
		return nodeinfo.Info{}, fmt.Errorf("read node information %s of %s: %w", d, certname, err)
	}
	i, err := nodeinfo.Decode(b)
	if err != nil {
		return nodeinfo.Info{}, err
	}
	p.nodeInfos.Store(d, i)
	return i, nil
}

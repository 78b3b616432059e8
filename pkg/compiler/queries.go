package compiler

import (
	"context"
	"log/slog"

	"github.com/compilefarm/compilefarm/pkg/farm"
)

// QueryRecorder records the PuppetDB queries the compiles in an
// environment made (farm.QueryStore.RecordQueries), so that the farm runs
// each again and recompiles the nodes whose result changed.
type QueryRecorder interface {
	RecordQueries(ctx context.Context, environment string, queries []farm.Digest) error
}

// recordQueries records the PuppetDB queries of the catalog now served to
// the node of d (its Node.Queries) unless this process recorded them
// already. It runs after the pointer moved, so that a query the store
// learns of is already in the node index under the node: a refresh that
// finds it finds the node. A failure is logged: the compile stands, and
// the next compile that makes the query records it.
func (p *Pool) recordQueries(ctx context.Context, d farm.Delivery, queries []farm.Digest, log *slog.Logger) {
	if p.Queries == nil || d.Slot != farm.SlotServed || len(queries) == 0 {
		return
	}
	var news []farm.Digest
	for _, q := range queries {
		if _, ok := p.recordedQueries.Load(recordedKey(d.Environment, q)); !ok {
			news = append(news, q)
		}
	}
	if len(news) == 0 {
		return
	}
	if err := p.Queries.RecordQueries(ctx, d.Environment, news); err != nil {
		log.Error("record PuppetDB queries: their results' changes will not recompile the node until a compile records them",
			"environment", d.Environment, "queries", len(news), "err", err)
		return
	}
	for _, q := range news {
		p.recordedQueries.Store(recordedKey(d.Environment, q), struct{}{})
	}
}

// recordedKey names query q of environment in Pool.recordedQueries.
func recordedKey(environment string, q farm.Digest) farm.Digest {
	return farm.DigestOf([]byte(environment + "|" + string(q)))
}

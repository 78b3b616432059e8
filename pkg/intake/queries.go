package intake

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/compilefarm/compilefarm/pkg/facts"
	"github.com/compilefarm/compilefarm/pkg/farm"
)

// QueryChange is a PuppetDB query that answers otherwise than before, as
// the query refresher found it.
type QueryChange struct {
	Environment string
	Query       farm.Digest // QueryRead.QueryDigest
	// Text is the query as PuppetDB takes it (farm.QueryText: PQL, or an
	// AST's JSON), named in the reason operators see (broker explain).
	Text string
	// Result is QueryResultDigest of the answer now.
	Result farm.Digest
	// Since is when the refresher saw that answer: a compile requested at
	// or after Since runs the query after the change.
	Since time.Time
}

// QueriersResult counts what RecompileQueriers did.
type QueriersResult struct {
	Nodes  int // nodes whose served catalog made the query
	Queued int // of them, the nodes queued
}

// maxNoteQuery bounds the query text a request's cause quotes.
const maxNoteQuery = 200

// RecompileQueriers queues an urgent compile, with the facts and code they
// have, of each node of the environment whose served catalog made the
// query and recorded another result than c.Result (its read record says;
// records are loaded through the digest cache), page by page through the
// node index (NodeQuery.Query). A node whose recorded result is c.Result
// is left alone, and so is one whose pending compile was requested at or
// after c.Since; a node whose read record cannot be read is queued. Nodes
// the index lists but whose catalog's record holds no such query (the
// index follows the record moments later) are not counted. An environment
// that no longer exists has no node to queue.
func (in *Intake) RecompileQueriers(ctx context.Context, c QueryChange) (QueriersResult, error) {
	var res QueriersResult
	env, err := in.Envs.GetEnvironment(ctx, c.Environment)
	if errors.Is(err, farm.ErrNotFound) {
		return res, nil // gone: its nodes compile nowhere
	}
	if err != nil {
		return res, fmt.Errorf("read environment %s: %w", c.Environment, err)
	}
	q := farm.NodeQuery{Environment: c.Environment, Query: c.Query, Limit: farm.MaxNodePage}
	err = farm.EachNode(ctx, in.Nodes, q, func(n farm.Node) error {
		if n.Environment != c.Environment || n.Catalog == nil {
			return nil
		}
		recorded, readable := in.recordedResult(ctx, &n, c.Query)
		if readable && recorded == "" {
			return nil // the index is behind: the catalog did not make it
		}
		res.Nodes++
		if recorded == c.Result {
			return nil
		}
		queued, err := in.recompileQuerier(ctx, n.Certname, env, c, recorded)
		if queued {
			res.Queued++
		}
		return err
	})
	if err != nil {
		return res, fmt.Errorf("recompile nodes of query %s in %s: %w", c.Query, c.Environment, err)
	}
	return res, nil
}

// recordedResult returns the result of query q that the read record of
// n's served catalog holds ("" when it holds none: the catalog did not
// make it), and whether that record could be read (an error is logged).
func (in *Intake) recordedResult(ctx context.Context, n *farm.Node, q farm.Digest) (farm.Digest, bool) {
	d := n.Catalog.ReadsDigest
	if d == "" {
		return "", false
	}
	if err := in.loadRecord(ctx, n, d); err != nil {
		in.log().Warn("judge a PuppetDB query's change: the catalog's read record is unreadable; the node is recompiled",
			"node", n.Certname, "reads", d, "err", err)
		return "", false
	}
	rec, _ := in.readRecords.Load(d)
	return queryResult(rec, q), true
}

// queryResult is the result of query q that rec records; "" when none.
func queryResult(rec *facts.ReadRecord, q farm.Digest) farm.Digest {
	for _, r := range rec.Queries {
		if r.QueryDigest == q {
			return r.ResultDigest
		}
	}
	return ""
}

// recompileQuerier queues an urgent compile of certname, whose catalog
// recorded result old for c's query, unless the record read now shows the
// node needs none: another catalog recording c.Result, or a compile
// requested since the change. It reports whether it queued one.
func (in *Intake) recompileQuerier(ctx context.Context, certname string, env farm.Environment, c QueryChange, old farm.Digest) (bool, error) {
	node, err := in.Nodes.UpdateNode(ctx, certname, func(n *farm.Node) error {
		switch {
		case n.Environment != c.Environment || n.Catalog == nil:
			return errRecorded
		case n.Pending() && !n.Requested.At.Before(c.Since):
			return errRecorded // its compile runs the query after the change
		}
		if rec, ok := in.readRecords.Load(n.Catalog.ReadsDigest); ok {
			if r := queryResult(rec, c.Query); r == "" || r == c.Result {
				return errRecorded // a newer catalog has the new result, or made no such query
			}
		}
		n.RequestSeq++
		w := why{reason: farm.ReasonQuery, cause: &farm.RequestCause{Input: farm.CauseQueryResult, Old: string(old), New: string(c.Result),
			Note: "PuppetDB query " + cut(c.Text, maxNoteQuery) + " answers otherwise"}}
		n.Requested = in.request(n, n.Catalog, c.Environment, env.TargetCode(n.Certname), storedInputs(n), w, farm.LaneUrgent)
		return nil
	})
	if errors.Is(err, errRecorded) || errors.Is(err, farm.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("recompile %s for query %s: %w", certname, c.Query, err)
	}
	if err := in.enqueue(ctx, node, farm.SlotServed); err != nil {
		return false, err
	}
	in.log().Info("compile queued", "node", certname, "reason", farm.ReasonQuery, "query", cut(c.Text, maxNoteQuery))
	return true, nil
}

// cut shortens s to at most max runes, marking the cut with "...".
func cut(s string, max int) string {
	r := []rune(s)
	if len(r) <= max {
		return s
	}
	return string(r[:max-3]) + "..."
}

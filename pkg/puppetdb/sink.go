package puppetdb

import (
	"context"
	"log/slog"
	"time"

	"github.com/compilefarm/compilefarm/pkg/farm"
	"github.com/compilefarm/compilefarm/pkg/metrics"
)

// Outbox is the part of a farm.Outbox the Sink sends to.
type Outbox interface {
	Send(ctx context.Context, msgs ...farm.OutboxMessage) error
}

// Spill keeps a report too large for an outbox message (the content store).
type Spill interface {
	Put(ctx context.Context, space farm.Space, data []byte) (farm.Digest, error)
}

// Sink turns what agents send the farm into PuppetDB commands in the
// outbox, as Puppet Server's termini would send them:
//
//   - replace facts when a node's stored facts change, and, so that
//     PuppetDB's view of every node that checks in is at most a day old,
//     at the check-in that falls in the node's daily slot (farm.InSlot;
//     FactsEvery, FactsSlot);
//   - replace catalog when a node's report names a catalog it had not
//     reported before: the catalog it was served and applied (a catalog
//     the farm holds back, precompiled or staged, is not sent);
//   - store report for every report.
//
// Its methods never fail the agent's run: a command that cannot be put in
// the outbox is logged with its node and counted (Metrics), and the run
// goes on. Safe for concurrent use.
type Sink struct {
	Outbox  Outbox
	Spill   Spill
	Log     *slog.Logger
	Metrics *metrics.PuppetDB
	Now     func() time.Time
	// FactsEvery is how often unchanged facts are sent anyway, per node
	// (0: 24h; negative: never); FactsSlot the width of the window a check-in must
	// fall in (default 1h: two runs of Puppet's default 30-minute
	// runinterval, so a node that runs on time is sent at least once).
	FactsEvery, FactsSlot time.Duration
}

func (s *Sink) log() *slog.Logger {
	if s.Log != nil {
		return s.Log
	}
	return slog.Default()
}

func (s *Sink) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

// Facts is told of every accepted fact upload: the node's stored facts and
// node information after it, and whether the upload changed them.
func (s *Sink) Facts(ctx context.Context, node, environment string, facts, nodeInfo farm.Digest, changed bool) {
	now := s.now()
	if !changed {
		every, slot := s.FactsEvery, s.FactsSlot
		if every == 0 {
			every = 24 * time.Hour
		}
		if slot <= 0 {
			slot = time.Hour
		}
		if !farm.InSlot(node, now, every, slot) {
			return
		}
	}
	if facts == "" {
		return
	}
	s.send(ctx, Message{Kind: KindFacts, Node: node, Environment: environment, At: now, Facts: facts, NodeInfo: nodeInfo})
}

// Report is told of every report an agent sent that the farm accepted:
// its body (read before Report returns, not kept), its summary (the
// catalog_uuid and transaction_uuid it names), and whether that catalog is
// new for the node (its first report, or one naming another catalog than
// the last).
func (s *Sink) Report(ctx context.Context, node string, body []byte, sum farm.ReportSummary, newCatalog bool) {
	now := s.now()
	var msgs []Message
	if newCatalog && sum.CatalogUUID != "" {
		msgs = append(msgs, Message{Kind: KindCatalog, Node: node, At: now, CatalogUUID: sum.CatalogUUID, TransactionUUID: sum.TransactionUUID})
	}
	rep := Message{Kind: KindReport, Node: node, At: now, ReportGzip: gzipBytes(body)}
	if len(rep.ReportGzip) > maxInlineReport {
		d, err := s.Spill.Put(ctx, farm.SpaceReports, body)
		if err != nil {
			s.Metrics.Command(string(KindReport), metrics.PuppetDBQueueFailed)
			s.log().Error("PuppetDB: report not sent: it is too large for the outbox and could not be stored", "node", node, "bytes", len(body), "err", err)
			return
		}
		rep.ReportGzip, rep.Report = nil, d
	}
	s.send(ctx, append(msgs, rep)...)
}

func (s *Sink) send(ctx context.Context, msgs ...Message) {
	out := make([]farm.OutboxMessage, 0, len(msgs))
	for _, m := range msgs {
		om, err := m.Encode()
		if err != nil {
			s.Metrics.Command(string(m.Kind), metrics.PuppetDBQueueFailed)
			s.log().Error("PuppetDB: command not sent", "node", m.Node, "command", m.Kind, "err", err)
			continue
		}
		out = append(out, om)
	}
	if len(out) == 0 {
		return
	}
	// The agent's request may end before the outbox answers; what it sent
	// is accepted and must be kept.
	ctx = context.WithoutCancel(ctx)
	if err := s.Outbox.Send(ctx, out...); err != nil {
		for _, m := range msgs {
			s.Metrics.Command(string(m.Kind), metrics.PuppetDBQueueFailed)
		}
		s.log().Error("PuppetDB: commands not put in the outbox: PuppetDB will miss them", "node", msgs[0].Node, "commands", len(out), "err", err)
		return
	}
	for _, m := range msgs {
		s.Metrics.Command(string(m.Kind), metrics.PuppetDBQueued)
	}
}

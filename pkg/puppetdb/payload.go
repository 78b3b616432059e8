package puppetdb

import (
	"context"
	"errors"
	"fmt"

	"github.com/compilefarm/compilefarm/pkg/farm"
	"github.com/compilefarm/compilefarm/pkg/nodeinfo"
	"github.com/compilefarm/compilefarm/pkg/puppetdb/command"
)

// Content reads what messages point at and keeps reports too large for
// one (the content store).
type Content interface {
	Get(ctx context.Context, space farm.Space, d farm.Digest) ([]byte, error)
	Put(ctx context.Context, space farm.Space, data []byte) (farm.Digest, error)
}

// NodeReader reads node records (a catalog message names its catalog by
// uuid; the node says where it is).
type NodeReader interface {
	GetNode(ctx context.Context, certname string) (farm.Node, error)
}

// ErrNothingToSend is a Build error for a message whose command has
// nothing to carry (a report naming a catalog the farm never served, as
// `puppet apply` sends): it is dropped, not set aside.
var ErrNothingToSend = errors.New("nothing to send")

// Commands builds messages' commands from the content store and the node
// records, in PuppetDB's wire formats (pkg/puppetdb/command).
type Commands struct {
	Content  Content
	Nodes    NodeReader
	Producer string // the farm's certname
}

var _ Builder = (*Commands)(nil)

// Build makes m's command.
func (c *Commands) Build(ctx context.Context, m Message) (Command, error) {
	cmd := Command{Name: string(m.Kind), Certname: m.Node, At: m.At}
	var err error
	switch m.Kind {
	case KindFacts:
		cmd.Version = command.ReplaceFacts.Version
		cmd.Payload, err = c.facts(ctx, m)
	case KindCatalog:
		cmd.Version = command.ReplaceCatalog.Version
		cmd.Payload, err = c.catalog(ctx, m)
	case KindReport:
		cmd.Version = command.StoreReport.Version
		cmd.Payload, err = c.report(ctx, m)
	default:
		err = fmt.Errorf("unknown kind %q: %w", m.Kind, farm.ErrInvalid)
	}
	if err != nil {
		return Command{}, fmt.Errorf("make %s for %s: %w", m.Kind, m.Node, err)
	}
	return cmd, nil
}

func (c *Commands) facts(ctx context.Context, m Message) ([]byte, error) {
	doc, err := c.Content.Get(ctx, farm.SpaceFacts, m.Facts)
	if err != nil {
		return nil, fmt.Errorf("read facts %s: %w", m.Facts, err)
	}
	var info nodeinfo.Info
	if m.NodeInfo != "" {
		b, err := c.Content.Get(ctx, farm.SpaceNodeInfo, m.NodeInfo)
		if err != nil {
			return nil, fmt.Errorf("read node information %s: %w", m.NodeInfo, err)
		}
		if info, err = nodeinfo.Decode(b); err != nil {
			return nil, fmt.Errorf("read node information %s: %w", m.NodeInfo, err)
		}
	}
	return command.Facts(command.FactsInput{
		Certname: m.Node, Environment: m.Environment, Facts: doc, TrustedExtensions: info.TrustedExtensions,
		Producer: c.Producer, ProducerTimestamp: m.At,
	})
}

func (c *Commands) catalog(ctx context.Context, m Message) ([]byte, error) {
	n, err := c.Nodes.GetNode(ctx, m.Node)
	if errors.Is(err, farm.ErrNotFound) {
		return nil, fmt.Errorf("no node record: %w", ErrNothingToSend)
	}
	if err != nil {
		return nil, fmt.Errorf("read node: %w", err)
	}
	ref, current := findCatalog(&n, m.CatalogUUID)
	if ref == nil {
		return nil, fmt.Errorf("catalog %s is neither the node's nor in its history: %w", m.CatalogUUID, ErrNothingToSend)
	}
	cat, err := c.Content.Get(ctx, farm.SpaceCatalogs, ref.Digest)
	if err != nil {
		return nil, fmt.Errorf("read catalog %s: %w", ref.Digest, err)
	}
	var exports []byte
	if current && n.ExportsDigest != "" {
		if exports, err = c.Content.Get(ctx, farm.SpaceCatalogs, n.ExportsDigest); err != nil {
			return nil, fmt.Errorf("read exported resources %s: %w", n.ExportsDigest, err)
		}
	}
	return command.Catalog(command.CatalogInput{
		Catalog: cat, Exports: exports, TransactionUUID: m.TransactionUUID, Producer: c.Producer, ProducerTimestamp: m.At,
	})
}

// findCatalog returns the node's catalog named uuid (the served one or one
// in its history), and whether it is the served one.
func findCatalog(n *farm.Node, uuid string) (*farm.CatalogRef, bool) {
	if n.Catalog != nil && n.Catalog.UUID == uuid {
		return n.Catalog, true
	}
	for i := range n.History {
		if n.History[i].UUID == uuid {
			return &n.History[i], false
		}
	}
	return nil, false
}

func (c *Commands) report(ctx context.Context, m Message) ([]byte, error) {
	var body []byte
	var err error
	if m.Report != "" {
		if body, err = c.Content.Get(ctx, farm.SpaceReports, m.Report); err != nil {
			return nil, fmt.Errorf("read report %s: %w", m.Report, err)
		}
	} else if body, err = gunzipBytes(m.ReportGzip); err != nil {
		return nil, fmt.Errorf("unpack report: %v: %w", err, farm.ErrInvalid)
	}
	return command.Report(command.ReportInput{Report: body, Producer: c.Producer, ProducerTimestamp: m.At})
}

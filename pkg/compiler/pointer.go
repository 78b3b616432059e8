package compiler

import (
	"fmt"
	"time"

	"github.com/compilefarm/compilefarm/pkg/catalog"
	"github.com/compilefarm/compilefarm/pkg/farm"
)

// compiled is what a finished compile hands to its node's record.
type compiled struct {
	Slot        farm.Slot
	Seq         uint64 // the request the compile answers
	CodeID      string
	FactsDigest farm.Digest
	NodeInfo    farm.Digest
	ReadsDigest farm.Digest
	Content     farm.Digest // the catalog's content (catalog.Seal), code_id aside
	// Stored holds the digests of the stored catalog bytes; zero when the
	// compile did not store them because the slot already held this
	// content (movePointer then returns errNeedStore if it no longer does).
	Stored farm.CatalogRef
	// What the catalog exports, collects and queries (the served slot
	// publishes them).
	ExportsDigest farm.Digest
	ExportTypes   []string
	Collects      []string
	Queries       []farm.Digest // the PuppetDB queries it made (QueryDigest), sorted
	At            time.Time
	Duration      time.Duration
}

// moved says what movePointer did.
type moved struct {
	// Unchanged: the slot already held this content; it now answers this
	// request too and keeps its bytes and code_id.
	Unchanged bool
	// ExportsChanged names the types whose exports changed (served slot
	// only): their collectors must be recompiled.
	ExportsChanged []string
}

// movePointer moves the node's catalog pointer for c.Slot to the compile c,
// the one rule that keeps a farm of racing workers right: an older compile
// never replaces a newer one. It returns an error wrapping farm.ErrConflict
// when the slot holds a catalog of c.Seq or later, and errNeedStore when
// the catalog's bytes must be stored first. It changes n only when it
// returns nil; it does no I/O, so it can run inside NodeStore.UpdateNode
// (and again when that retries).
func movePointer(n *farm.Node, c compiled) (moved, error) {
	s := n.Slot(c.Slot)
	cur := s.Catalog
	if cur != nil && cur.Seq >= c.Seq {
		return moved{}, fmt.Errorf("catalog seq %d is not newer than stored %d: %w", c.Seq, cur.Seq, farm.ErrConflict)
	}
	unchanged := s.Holds(c.Content)
	if !unchanged && c.Stored.Digest == "" {
		return moved{}, errNeedStore // another catalog moved in since the compile looked
	}
	var out moved
	if c.Slot == farm.SlotServed {
		// Only the served catalog publishes exports.
		if n.ExportsDigest != c.ExportsDigest {
			out.ExportsChanged = union(n.ExportTypes, c.ExportTypes)
		}
		n.ExportsDigest, n.ExportTypes, n.Collects = c.ExportsDigest, c.ExportTypes, c.Collects
		n.Queries = c.Queries
	}
	status := farm.CompileStatus{Result: farm.ResultOK, Seq: c.Seq, CodeID: c.CodeID, At: c.At, Duration: c.Duration}
	if unchanged {
		// Same content: no History entry, the bytes and code_id kept.
		k := *cur
		k.Seq, k.FactsDigest, k.ReadsDigest, k.NodeInfo = c.Seq, c.FactsDigest, c.ReadsDigest, c.NodeInfo
		status.Result = farm.ResultUnchanged
		n.SetCompiled(c.Slot, k, status)
		out.Unchanged = true
		return out, nil
	}
	ref := c.Stored
	ref.CodeID, ref.FactsDigest, ref.Seq, ref.ContentDigest, ref.ReadsDigest = c.CodeID, c.FactsDigest, c.Seq, c.Content, c.ReadsDigest
	ref.NodeInfo = c.NodeInfo
	ref.UUID = catalog.UUIDOf(c.Content)
	ref.CompiledAt, ref.Duration = c.At, c.Duration
	n.SetCompiled(c.Slot, ref, status)
	return out, nil
}

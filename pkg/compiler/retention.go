package compiler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"

	"github.com/compilefarm/compilefarm/pkg/farm"
)

// What a compile tells a content store that removes catalogs no node
// refers to (a farm.ContentRetirer, pkg/s3store): after a write that moved
// a node's pointers, the catalogs the write dropped are retired
// (farm.RetireCatalogs); a catalog the node refers to again, whose bytes
// were stored before, is kept before the write and again after it. With
// any other store the pool retires nothing.
//
// AWS calls per compile: none for an unchanged catalog, nor for a changed
// one while the node's History has room (HistoryLen); once it is full,
// one CopyObject for each of the two blobs of the catalog that falls out
// of it (plain and gzipped) and one consistent GetItem of the node
// record. A candidate compile drops the candidate it replaces in the
// same way. A catalog whose bytes were stored already (a node back to a
// catalog it had more than HistoryLen changes ago) costs one
// PutObjectTagging per blob before the write and one after.

// retirer returns the pool's content store as a farm.ContentRetirer, or
// nil when it retires nothing.
func (p *Pool) retirer() farm.ContentRetirer {
	r, _ := p.Content.(farm.ContentRetirer)
	return r
}

// storeCatalog stores the catalog and its gzip form (store) and returns
// the digests of those that were stored already (existed). The ones the
// node, as refs lists its catalog blobs, does not refer to may carry a
// retirement from an earlier drop: they are kept before the pointer moves
// (a failure fails the compile, which is retried), and stored again when
// they turn out to be gone.
func (p *Pool) storeCatalog(ctx context.Context, catalog []byte, refs []farm.Digest) (farm.CatalogRef, []farm.Digest, error) {
	ref, existed, err := p.store(ctx, catalog)
	if err != nil || len(existed) == 0 {
		return ref, existed, err
	}
	r := p.retirer()
	for _, d := range existed {
		if _, found := slices.BinarySearch(refs, d); found {
			continue
		}
		err := r.Keep(ctx, farm.SpaceCatalogs, d)
		if errors.Is(err, farm.ErrNotFound) {
			// Removed since the Put found it: put it again, new.
			ref, existed, err = p.store(ctx, catalog)
			return ref, existed, err
		}
		if err != nil {
			return farm.CatalogRef{}, nil, fmt.Errorf("keep stored catalog %s: %w", d, err)
		}
	}
	return ref, existed, nil
}

// putCatalog puts b in SpaceCatalogs; existed is always false for a store
// that retires nothing.
func (p *Pool) putCatalog(ctx context.Context, b []byte) (d farm.Digest, existed bool, err error) {
	if r := p.retirer(); r != nil {
		return r.PutNew(ctx, farm.SpaceCatalogs, b)
	}
	d, err = p.Content.Put(ctx, farm.SpaceCatalogs, b)
	return d, false, err
}

// retire runs after a write of the node's record turned the catalog blobs
// before into those of after: it keeps again the ones among existed the
// write brought back (a retire racing with the write may have marked them
// after storeCatalog's keep), then retires the ones it dropped. It has
// its own time (finishTimeout), whatever is left of the compile's, and
// logs what failed: a blob left unretired is only kept longer.
func (p *Pool) retire(ctx context.Context, certname string, before []farm.Digest, after *farm.Node, existed []farm.Digest, log *slog.Logger) {
	r := p.retirer()
	dropped := farm.Dropped(before, after)
	if r == nil || (len(existed) == 0 && len(dropped) == 0) {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finishTimeout)
	defer cancel()
	refs := after.CatalogBlobs()
	for _, d := range existed {
		_, had := slices.BinarySearch(before, d)
		if _, has := slices.BinarySearch(refs, d); !has || had {
			continue
		}
		if err := r.Keep(ctx, farm.SpaceCatalogs, d); err != nil {
			log.Error("keep the catalog the node refers to again: it may be removed when its retirement's retention ends",
				"digest", d, "err", err)
		}
	}
	if err := farm.RetireCatalogs(ctx, p.Nodes, r, certname, dropped); err != nil {
		log.Warn("retire catalogs the node no longer refers to: they stay stored", "err", err)
		return
	}
	if len(dropped) > 0 {
		log.Debug("catalogs retired", "digests", dropped)
	}
}

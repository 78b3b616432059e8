package farm

import (
	"context"
	"errors"
	"fmt"
	"slices"
)

// ContentRetirer is a ContentStore that removes blobs nothing refers to
// any more, a retention after it is told so. The store decides nothing
// itself: whoever moves the references (the compiler and the intake, for
// catalogs) tells it which blobs a change stopped referring to (Retire)
// and which it refers to again (Keep).
//
// PutNew stores data as Put does and also reports whether the blob was
// stored before the call (existed): only such a blob can carry a mark.
//
// Retire marks the blob d of space as referred to by nothing: the store
// removes it once the mark is its retention old (the deployment's; the
// pkg/s3store bucket's lifecycle rule), unless Keep took the mark back
// before. Until then the blob is read, found by Has and kept by Put as any
// other. Retiring a marked blob marks it again (its retention may start
// over). Keep takes the mark back; a blob without one stays as it is.
// Retired reports whether d carries a mark. Put and PutNew neither set nor
// take back a mark. Retire, Keep and Retired of a blob that is not there
// return ErrNotFound: from Keep, it tells the caller that the blob is gone
// and must be put again.
//
// Of concurrent Retires and Keeps of a blob the last one to take effect
// holds; one that returned is seen by every later Retired, Retire and
// Keep. A removal the store began before a Keep may still complete (S3
// queues expired objects for removal): callers that find a kept blob gone
// put it again.
//
// ErrInvalid (CheckContentPut, CheckContentRetire, CheckContentKeep,
// CheckContentRetired) for an invalid space or digest, as in ContentStore.
// A call whose ctx has ended returns an error wrapping ctx.Err(), and
// PutNew, Retire and Keep then change nothing. Safe for concurrent use,
// across processes for shared backends.
type ContentRetirer interface {
	ContentStore
	PutNew(ctx context.Context, space Space, data []byte) (d Digest, existed bool, err error)
	Retire(ctx context.Context, space Space, d Digest) error
	Keep(ctx context.Context, space Space, d Digest) error
	Retired(ctx context.Context, space Space, d Digest) (bool, error)
}

// CheckContentRetire checks a ContentRetirer.Retire of d in space
// (ValidateAddress).
func CheckContentRetire(ctx context.Context, space Space, d Digest) error {
	return checkAddress(ctx, "retire", space, d)
}

// CheckContentKeep checks a ContentRetirer.Keep of d in space
// (ValidateAddress).
func CheckContentKeep(ctx context.Context, space Space, d Digest) error {
	return checkAddress(ctx, "keep", space, d)
}

// CheckContentRetired checks a ContentRetirer.Retired of d in space
// (ValidateAddress).
func CheckContentRetired(ctx context.Context, space Space, d Digest) error {
	return checkAddress(ctx, "retired", space, d)
}

// CatalogBlobs returns the catalog blobs (in SpaceCatalogs) the node
// refers to, sorted, each once: the plain and gzipped catalog of its
// served slot, its candidate slot and its History. These are the node's
// own: a catalog names its node, so no two nodes share catalog bytes.
// What else a node refers to in SpaceCatalogs (read records, exports,
// query texts) may be shared with other nodes and is not among them.
func (n *Node) CatalogBlobs() []Digest {
	var out []Digest
	add := func(r *CatalogRef) {
		if r == nil {
			return
		}
		for _, d := range []Digest{r.Digest, r.GzipDigest} {
			if d != "" {
				out = append(out, d)
			}
		}
	}
	add(n.Catalog)
	add(n.Candidate)
	for i := range n.History {
		add(&n.History[i])
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// Dropped returns the blobs of before (a node's CatalogBlobs before a
// write) that after (the record the write left) no longer refers to.
func Dropped(before []Digest, after *Node) []Digest {
	now := after.CatalogBlobs()
	var out []Digest
	for _, d := range before {
		if _, found := slices.BinarySearch(now, d); !found {
			out = append(out, d)
		}
	}
	return out
}

// NodeGetter is the one method of NodeStore that RetireCatalogs needs.
type NodeGetter interface {
	GetNode(ctx context.Context, certname string) (Node, error)
}

// RetireCatalogs retires the catalog blobs a write of certname's record
// dropped (Dropped), once that write has returned. It then reads the
// record again (NodeStore reads are consistent) and keeps the dropped
// blobs the node refers to again: a concurrent write that brought one
// back may have kept it before the Retire here took effect. This order
// (write, retire, read, keep) is what makes it safe: whichever way a
// retire and a later write referring to the blob again interleave, the
// last mark on the blob is a keep, as long as every writer that refers to
// a blob again keeps it after its write too. A crash after the write
// leaves blobs unretired, never a referred-to blob retired. When the
// record cannot be read again, every blob retired here is kept. The error
// joins what failed; a blob already gone counts as retired.
func RetireCatalogs(ctx context.Context, nodes NodeGetter, store ContentRetirer, certname string, dropped []Digest) error {
	if len(dropped) == 0 {
		return nil
	}
	var errs []error
	var check []Digest // retired, or maybe (a failed call may have taken effect)
	for _, d := range dropped {
		err := store.Retire(ctx, SpaceCatalogs, d)
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("retire catalog %s of %s: %w", d, certname, err))
		}
		check = append(check, d)
	}
	if len(check) == 0 {
		return errors.Join(errs...)
	}
	n, err := nodes.GetNode(ctx, certname)
	var refs []Digest
	undo := false
	switch {
	case err == nil:
		refs = n.CatalogBlobs()
	case errors.Is(err, ErrNotFound):
	default:
		errs = append(errs, fmt.Errorf("read node %s again after retiring its old catalogs (keeping them): %w", certname, err))
		undo = true
	}
	for _, d := range check {
		if _, found := slices.BinarySearch(refs, d); !found && !undo {
			continue
		}
		if err := store.Keep(ctx, SpaceCatalogs, d); err != nil && !errors.Is(err, ErrNotFound) {
			errs = append(errs, fmt.Errorf("keep catalog %s of %s, which it refers to again: %w", d, certname, err))
		}
	}
	return errors.Join(errs...)
}

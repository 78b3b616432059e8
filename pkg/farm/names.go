package farm

import (
	"context"
	"fmt"
	"regexp"
	"strings"
)

// SpaceFilebucket holds the server filebucket: old file content that agents
// back up before they change a file (Puppet's file_bucket_file endpoint). It
// is a space of its own because backups can hold secrets and outlive no
// catalog: drivers keep it under its own prefix, where access and lifecycle
// rules can select it.
const SpaceFilebucket Space = "filebucket"

// nameRE: slash-separated segments of letters, digits, '.', '_' and '-'.
var nameRE = regexp.MustCompile(`^[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*$`)

// MaxNameLen bounds the length of a name in a NameStore, MaxNameSegment
// the length of each of its '/'-separated segments (a file name's limit,
// for stores that keep keys as paths).
const (
	MaxNameLen     = 512
	MaxNameSegment = 200
)

// ValidateName returns an ErrInvalid error unless name can name content in
// a NameStore: 1 to MaxNameLen characters, '/'-separated segments of 1 to
// MaxNameSegment letters, digits, '.', '_' and '-', none of them "." or ".."
// (drivers use names in object keys and file names).
func ValidateName(name string) error {
	ok := len(name) <= MaxNameLen && nameRE.MatchString(name)
	for seg := range strings.SplitSeq(name, "/") {
		if seg == "." || seg == ".." || len(seg) > MaxNameSegment {
			ok = false
		}
	}
	if !ok {
		return fmt.Errorf("name %q must be '/'-separated segments of letters, digits, '.', '_' or '-' (at most %d characters, %d a segment, no '.' or '..' segment): %w",
			name, MaxNameLen, MaxNameSegment, ErrInvalid)
	}
	return nil
}

// NameStore gives content other names than its SHA-256: each name of a space
// points at one digest, for good. The filebucket uses it for what agents
// call content by (an md5 sum) and to record the paths content was backed up
// from.
//
// PutName makes name point at d. A name is written once: PutName of a name
// that already points at d succeeds and changes nothing; of a name that
// points at another digest it returns an error wrapping ErrConflict and the
// name keeps its digest. Of concurrent PutNames of one new name, exactly one
// digest wins; each of the others succeeds if it put the same digest and
// gets ErrConflict otherwise. GetName returns the digest name points at, or
// an error wrapping ErrNotFound when it points at none.
//
// A name does not keep content alive or check that it exists: put the
// content first, then the name, and a name that resolves points at stored
// content. A malformed space, name (see ValidateName) or digest is
// ErrInvalid (CheckPutName, CheckGetName), and a call whose ctx has ended
// returns an error wrapping ctx.Err(); PutName then writes nothing. Names
// of different spaces are separate, and names are compared byte for byte:
// case matters, and a name may be a prefix, or a parent "directory", of
// another, each pointing at its own digest. A PutName that returned is
// visible to every later GetName. Safe for concurrent use, across
// processes for shared backends.
type NameStore interface {
	PutName(ctx context.Context, space Space, name string, d Digest) error
	GetName(ctx context.Context, space Space, name string) (Digest, error)
}

// ValidateNameAddress returns an ErrInvalid error unless space and name are
// valid: the check every NameStore makes.
func ValidateNameAddress(space Space, name string) error {
	if err := space.Validate(); err != nil {
		return err
	}
	return ValidateName(name)
}

package catalog

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/compilefarm/compilefarm/pkg/farm"
)

// Values of FileMetadata.Links and MetadataOptions.Links.
const (
	LinksManage = "manage" // report links as links (lstat)
	LinksFollow = "follow" // report what links point at (stat)
)

// Values of FileMetadata.Type.
const (
	TypeFile      = "file"
	TypeDirectory = "directory"
	TypeLink      = "link"
)

// Values of MetadataOptions.SourcePermissions.
const (
	PermissionsIgnore          = "ignore"            // mode 0644, owner/group of the server
	PermissionsUse             = "use"               // the source's own mode
	PermissionsUseWhenCreating = "use_when_creating" // served like "use"
)

// ChecksumTypes lists the checksum types Puppet 7 knows (Puppet::Util::Checksums),
// in its order. All of them are supported: the digests are computed from the
// content, the "lite" ones from its first 512 bytes, "mtime" and "ctime"
// report a fixed time and "none" an empty value.
var ChecksumTypes = []string{
	"sha256", "sha256lite", "md5", "md5lite", "sha1", "sha1lite",
	"sha512", "sha384", "sha224", "mtime", "ctime", "none",
}

// DefaultChecksumType is the checksum type the farm uses for static catalogs:
// the first one a Puppet 7 agent asks for (checksum_type=sha256.sha384...).
const DefaultChecksumType = "sha256"

// Checksum is a file metadata checksum. Value carries the type in braces,
// e.g. "{sha256}2c8b...". An empty Value is written as JSON null (Puppet sends
// null for a link it cannot read through, e.g. a link to a directory).
type Checksum struct {
	Type  string
	Value string
}

type checksumWire struct {
	Type  string  `json:"type"`
	Value *string `json:"value"`
}

// MarshalJSON writes {"type":...,"value":...}, with null for an empty value.
func (c Checksum) MarshalJSON() ([]byte, error) {
	w := checksumWire{Type: c.Type}
	if c.Value != "" {
		w.Value = &c.Value
	}
	return Marshal(w)
}

// UnmarshalJSON reads what MarshalJSON writes.
func (c *Checksum) UnmarshalJSON(b []byte) error {
	var w checksumWire
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	c.Type = w.Type
	c.Value = ""
	if w.Value != nil {
		c.Value = *w.Value
	}
	return nil
}

// FileMetadata is Puppet's file metadata (Puppet::FileServing::Metadata) as
// GET /puppet/v3/file_metadata(s) answers it and as static catalogs carry it.
//
// Path is the absolute path of the file on the server (for a recursive search,
// of the search root). RelativePath is empty for a single lookup (written as
// null) and "." or a slash-separated path for search results. Destination is
// a link's target (empty, written as null, for anything else). ContentURI and
// Source appear only in static catalogs.
type FileMetadata struct {
	Path         string
	RelativePath string
	Links        string
	Owner        int
	Group        int
	Mode         int
	Checksum     Checksum
	Type         string
	Destination  string
	ContentURI   string
	Source       string
}

type fileMetadataWire struct {
	Path         string   `json:"path"`
	RelativePath *string  `json:"relative_path"`
	Links        string   `json:"links"`
	Owner        int      `json:"owner"`
	Group        int      `json:"group"`
	Mode         int      `json:"mode"`
	Checksum     Checksum `json:"checksum"`
	Type         string   `json:"type"`
	Destination  *string  `json:"destination"`
	ContentURI   string   `json:"content_uri,omitempty"`
	Source       string   `json:"source,omitempty"`
}

// MarshalJSON writes the metadata with Puppet's keys in Puppet's order.
func (m FileMetadata) MarshalJSON() ([]byte, error) {
	w := fileMetadataWire{
		Path: m.Path, Links: m.Links, Owner: m.Owner, Group: m.Group, Mode: m.Mode,
		Checksum: m.Checksum, Type: m.Type, ContentURI: m.ContentURI, Source: m.Source,
	}
	if m.RelativePath != "" {
		w.RelativePath = &m.RelativePath
	}
	if m.Destination != "" {
		w.Destination = &m.Destination
	}
	return Marshal(w)
}

// UnmarshalJSON reads what MarshalJSON writes (and what Puppet Server sends).
func (m *FileMetadata) UnmarshalJSON(b []byte) error {
	var w fileMetadataWire
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*m = FileMetadata{
		Path: w.Path, Links: w.Links, Owner: w.Owner, Group: w.Group, Mode: w.Mode,
		Checksum: w.Checksum, Type: w.Type, ContentURI: w.ContentURI, Source: w.Source,
	}
	if w.RelativePath != nil {
		m.RelativePath = *w.RelativePath
	}
	if w.Destination != nil {
		m.Destination = *w.Destination
	}
	return nil
}

// MetadataOptions are the parameters of a file_metadata(s) request (and of a
// File resource that a static catalog inlines). The zero value asks what
// Puppet's defaults ask: links=manage, checksum_type=sha256,
// source_permissions=ignore, no recursion.
type MetadataOptions struct {
	Links             string // LinksManage (default; "ignore" means the same) or LinksFollow
	ChecksumType      string // one of ChecksumTypes; default DefaultChecksumType
	SourcePermissions string // PermissionsIgnore (default), PermissionsUse, PermissionsUseWhenCreating
	// Recurse walks a directory (file_metadatas only). RecurseLimit bounds the
	// depth (0: no limit; Puppet's recurselimit=0 is the same as Recurse=false).
	Recurse      bool
	RecurseLimit int
	// MaxFiles: 0 (default) and negative mean no limit; a positive value makes
	// a search that finds more entries (below the root) fail, as Puppet does.
	MaxFiles int
	// Ignore holds glob patterns (Ruby File.fnmatch without flags) matched
	// against each entry's base name; matching directories are not entered.
	Ignore []string
}

// Normalize fills in defaults and checks the values, returning an error
// wrapping farm.ErrInvalid for an unknown links, checksum or permissions value.
func (o MetadataOptions) Normalize() (MetadataOptions, error) {
	switch o.Links {
	case "", "ignore", LinksManage:
		o.Links = LinksManage
	case LinksFollow:
	default:
		return o, fmt.Errorf("links must be manage or follow, not %q: %w", o.Links, farm.ErrInvalid)
	}
	if o.ChecksumType == "" {
		o.ChecksumType = DefaultChecksumType
	}
	known := false
	for _, t := range ChecksumTypes {
		known = known || t == o.ChecksumType
	}
	if !known {
		return o, fmt.Errorf("unsupported checksum type %q: %w", o.ChecksumType, farm.ErrInvalid)
	}
	switch o.SourcePermissions {
	case "":
		o.SourcePermissions = PermissionsIgnore
	case PermissionsIgnore, PermissionsUse, PermissionsUseWhenCreating:
	default:
		return o, fmt.Errorf("source_permissions must be ignore, use or use_when_creating, not %q: %w", o.SourcePermissions, farm.ErrInvalid)
	}
	if o.RecurseLimit < 0 {
		o.RecurseLimit = 0
	}
	return o, nil
}

// FileResolver answers file metadata requests for one environment's code,
// the way Puppet Server's file_metadata and file_metadatas endpoints do.
// pkg/code implements it over a code snapshot.
//
// key is the request key: a mount and a path, without the leading slash, e.g.
// "modules/pupdemo/static.txt" (from puppet:///modules/pupdemo/static.txt).
// Both methods return an error wrapping farm.ErrNotFound when nothing is
// there and farm.ErrInvalid for a malformed key or options. FileMetadatas
// always includes the root entry (relative path "."). EnvironmentDir is the
// absolute directory of the environment that metadata paths start with.
type FileResolver interface {
	FileMetadata(ctx context.Context, key string, opts MetadataOptions) (FileMetadata, error)
	FileMetadatas(ctx context.Context, key string, opts MetadataOptions) ([]FileMetadata, error)
	EnvironmentDir() string
}

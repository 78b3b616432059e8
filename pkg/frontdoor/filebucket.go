package frontdoor

import (
	"context"
	"crypto/md5"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"

	"github.com/compilefarm/compilefarm/pkg/farm"
)

// Bucket keeps the server filebucket in farm.SpaceFilebucket: the backed-up
// bytes (content addressed), and names for what agents call them by (see
// bucketKey).
type Bucket interface {
	Put(ctx context.Context, space farm.Space, data []byte) (farm.Digest, error)
	Get(ctx context.Context, space farm.Space, d farm.Digest) ([]byte, error)
	Has(ctx context.Context, space farm.Space, d farm.Digest) (bool, error)
	PutName(ctx context.Context, space farm.Space, name string, d farm.Digest) error
	GetName(ctx context.Context, space farm.Space, name string) (farm.Digest, error)
}

// DefaultMaxBucketFile bounds a file backed up to the filebucket when
// Server.MaxBucketFile is unset.
const DefaultMaxBucketFile = 64 << 20

// bucketKey is the key of a file_bucket_file request,
// <algorithm>/<sum>[/<original path>], as Puppet's dipper builds it: the
// agent's digest_algorithm, the file's checksum in it, and the absolute path
// the file was backed up from (so "sha256/<sum>//etc/motd").
//
// The bytes are stored under their SHA-256 whatever the algorithm. An md5
// sum is the name "md5/<sum>" of that digest; a path the content was backed
// up from is recorded as the name "paths/<sha256>/<sha256 of the path>",
// which Puppet keeps as lines of a "paths" file: a request with a path finds
// the content only if it was backed up from that path.
type bucketKey struct {
	algo, sum string
	path      string // "" when the key has none
}

var sumRE = map[string]*regexp.Regexp{
	"sha256": regexp.MustCompile(`^[0-9a-f]{64}$`),
	"md5":    regexp.MustCompile(`^[0-9a-f]{32}$`),
}

// parseBucketKey splits a request key as Puppet's file terminus does
// (split at the first two slashes; an empty path is none) and checks the
// algorithm and the sum. Errors wrap farm.ErrInvalid, with Puppet's
// messages.
func parseBucketKey(key string) (bucketKey, error) {
	algo, rest, _ := strings.Cut(key, "/")
	sum, path, _ := strings.Cut(rest, "/")
	re, ok := sumRE[algo]
	if !ok {
		return bucketKey{}, fmt.Errorf("Unsupported checksum type %q (this server's filebucket takes sha256 and md5: set the agent's digest_algorithm to one of them): %w",
			algo, farm.ErrInvalid)
	}
	if !re.MatchString(sum) {
		return bucketKey{}, fmt.Errorf("Invalid checksum %q: %w", sum, farm.ErrInvalid)
	}
	return bucketKey{algo: algo, sum: sum, path: path}, nil
}

// checksum is the key's sum as Puppet writes it: "{md5}0123…".
func (k bucketKey) checksum() string { return "{" + k.algo + "}" + k.sum }

// sumOf returns the hex digest of data in the key's algorithm.
func (k bucketKey) sumOf(data []byte) string {
	if k.algo == "md5" {
		s := md5.Sum(data)
		return hex.EncodeToString(s[:])
	}
	s := sha256.Sum256(data)
	return hex.EncodeToString(s[:])
}

// sumName is the name of an md5 sum; a sha256 sum is the digest itself.
func (k bucketKey) sumName() string { return k.algo + "/" + k.sum }

// pathName is the name recording that the content d was backed up from
// path.
func pathName(d farm.Digest, path string) string {
	h := sha256.Sum256([]byte(path))
	return "paths/" + string(d) + "/" + hex.EncodeToString(h[:])
}

// bucketRequest checks what every file_bucket_file request needs, in
// Puppet Server's order (a known environment, although the bucket does not
// depend on it; then, unless check refuses the request first, a valid
// key), and answers the request itself when something is wrong.
func (s *Server) bucketRequest(w http.ResponseWriter, r *http.Request, check func() bool) (bucketKey, bool) {
	env := r.URL.Query().Get("environment")
	if env == "" {
		jsonError(w, http.StatusBadRequest, "RUNTIME_ERROR", "Bad Request: An environment parameter must be specified")
		return bucketKey{}, false
	}
	if _, err := s.environment(r, env); err != nil {
		s.envError(w, r, err)
		return bucketKey{}, false
	}
	if check != nil && !check() {
		return bucketKey{}, false
	}
	k, err := parseBucketKey(r.PathValue("key"))
	if err != nil {
		s.apiError(w, r, err)
		return bucketKey{}, false
	}
	return k, true
}

// findBucketFile returns the digest of the content k names: stored, and,
// when k has a path, backed up from that path. Errors wrap ErrNotFound
// when there is none.
func (s *Server) findBucketFile(ctx context.Context, k bucketKey) (farm.Digest, error) {
	d := farm.Digest(k.sum)
	if k.algo != "sha256" {
		var err error
		if d, err = s.Bucket.GetName(ctx, farm.SpaceFilebucket, k.sumName()); err != nil {
			return "", fmt.Errorf("look up %s: %w", k.checksum(), err)
		}
	}
	if k.path != "" {
		if _, err := s.Bucket.GetName(ctx, farm.SpaceFilebucket, pathName(d, k.path)); err != nil {
			return "", fmt.Errorf("look up %s backed up from %s: %w", k.checksum(), k.path, err)
		}
	}
	return d, nil
}

// bucketError answers a failed filebucket request as Puppet Server does:
// 404 "Could not find file_bucket_file <key>" when there is nothing.
func (s *Server) bucketError(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, farm.ErrNotFound) {
		jsonError(w, http.StatusNotFound, "RESOURCE_NOT_FOUND", "Not Found: Could not find file_bucket_file "+r.PathValue("key"))
		return
	}
	s.apiError(w, r, err)
}

// headBucketFile answers whether the bucket holds a file (the agent asks
// before it uploads a backup): 200 or 404, no body.
func (s *Server) headBucketFile(w http.ResponseWriter, r *http.Request) {
	k, ok := s.bucketRequest(w, r, nil)
	if !ok {
		return
	}
	d, err := s.findBucketFile(r.Context(), k)
	if err == nil {
		var has bool
		if has, err = s.Bucket.Has(r.Context(), farm.SpaceFilebucket, d); err == nil && !has {
			err = fmt.Errorf("content of %s: %w", k.checksum(), farm.ErrNotFound)
		}
	}
	if err != nil {
		s.bucketError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusOK)
}

// getBucketFile serves a backed-up file (puppet filebucket get and
// restore).
func (s *Server) getBucketFile(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	k, ok := s.bucketRequest(w, r, func() bool {
		switch {
		case q.Has("list_all"):
			jsonError(w, http.StatusBadRequest, "RUNTIME_ERROR", "Bad Request: Listing remote file buckets is not allowed")
			return false
		case q.Has("diff_with"):
			jsonError(w, http.StatusNotImplemented, "RUNTIME_ERROR",
				"Not Implemented: this server does not diff filebucket files (diff_with); "+
					"run `puppet filebucket get` for each sum and diff them, or `puppet filebucket diff <sum> <file>`")
			return false
		}
		return true
	})
	if !ok {
		return
	}
	d, err := s.findBucketFile(r.Context(), k)
	var b []byte
	if err == nil {
		b, err = s.Bucket.Get(r.Context(), farm.SpaceFilebucket, d)
	}
	if err != nil {
		s.bucketError(w, r, err)
		return
	}
	s.log().Info("filebucket: file read", "node", peerName(r), "checksum", k.checksum(), "path", k.path)
	writeOctets(w, b)
}

// putBucketFile stores a backup. The body must have the sum in the key: a
// file that changed while the agent read it is refused, and nothing is
// stored.
func (s *Server) putBucketFile(w http.ResponseWriter, r *http.Request) {
	k, ok := s.bucketRequest(w, r, nil)
	if !ok {
		return
	}
	body, err := readBody(r, s.MaxBucketFile)
	if err != nil {
		s.apiError(w, r, err)
		return
	}
	if got := k.sumOf(body); got != k.sum {
		jsonError(w, http.StatusBadRequest, "RUNTIME_ERROR", fmt.Sprintf(
			"Bad Request: the %d bytes sent have the %s sum %s, not %s: nothing was stored (did the file change while it was read?)",
			len(body), k.algo, got, k.sum))
		return
	}
	ctx := r.Context()
	d, err := s.Bucket.Put(ctx, farm.SpaceFilebucket, body)
	if err == nil && k.algo != "sha256" {
		err = s.Bucket.PutName(ctx, farm.SpaceFilebucket, k.sumName(), d)
	}
	if err == nil && k.path != "" {
		err = s.Bucket.PutName(ctx, farm.SpaceFilebucket, pathName(d, k.path), d)
	}
	if errors.Is(err, farm.ErrConflict) {
		// Two contents with one md5 sum: keep the first, as Puppet does.
		s.log().Error("filebucket: md5 collision", "node", peerName(r), "checksum", k.checksum(), "sha256", d, "err", err)
		jsonError(w, http.StatusConflict, "RUNTIME_ERROR", fmt.Sprintf(
			"Conflict: Existing backup and new file have different content but same checksum, %s. Verify existing backup and remove if incorrect.",
			k.checksum()))
		return
	}
	if err != nil {
		s.apiError(w, r, fmt.Errorf("store backup %s: %w", k.checksum(), err))
		return
	}
	s.log().Info("filebucket: backup stored", "node", peerName(r), "checksum", k.checksum(), "path", k.path, "bytes", len(body))
	w.Header().Set("Content-Type", "application/octet-stream")
	w.WriteHeader(http.StatusOK)
}

// peerName is the CN of the request's client certificate ("" without one).
func peerName(r *http.Request) string {
	if c := peerCert(r); c != nil {
		return c.Subject.CommonName
	}
	return ""
}

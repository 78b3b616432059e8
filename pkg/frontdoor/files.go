package frontdoor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/compilefarm/compilefarm/pkg/catalog"
	"github.com/compilefarm/compilefarm/pkg/code"
	"github.com/compilefarm/compilefarm/pkg/farm"
)

// Files serves Puppet's file mounts (modules/<mod>/..., plugins,
// pluginfacts, locales) and static content from code snapshots.
type Files interface {
	FileMetadata(ctx context.Context, codeID, key string, opts catalog.MetadataOptions) (catalog.FileMetadata, error)
	FileMetadatas(ctx context.Context, codeID, key string, opts catalog.MetadataOptions) ([]catalog.FileMetadata, error)
	FileContent(ctx context.Context, codeID, key string) ([]byte, error)
	StaticFileContent(ctx context.Context, codeID, path string) ([]byte, error)
}

// currentCode returns the code_id the request's environment runs.
func (s *Server) currentCode(r *http.Request) (string, error) {
	env := r.URL.Query().Get("environment")
	if env == "" {
		return "", fmt.Errorf("the environment query parameter is required: %w", farm.ErrInvalid)
	}
	e, err := s.environment(r, env)
	if err != nil {
		return "", err
	}
	return e.CodeID, nil
}

// fileError answers as Puppet Server does for file endpoints: 404 with
// "Could not find <what> <key>", 400 for a bad path or parameter.
func (s *Server) fileError(w http.ResponseWriter, r *http.Request, what, key string, err error) {
	if errors.Is(err, farm.ErrNotFound) {
		jsonError(w, http.StatusNotFound, "RESOURCE_NOT_FOUND", fmt.Sprintf("Not Found: Could not find %s %s", what, key))
		return
	}
	s.apiError(w, r, err)
}

func writeOctets(w http.ResponseWriter, b []byte) {
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.Write(b)
}

func (s *Server) fileMetadatas(w http.ResponseWriter, r *http.Request) {
	s.serveMetadata(w, r, "file_metadatas", func(codeID, key string, opts catalog.MetadataOptions) (any, error) {
		return s.Files.FileMetadatas(r.Context(), codeID, key, opts)
	})
}

func (s *Server) fileMetadata(w http.ResponseWriter, r *http.Request) {
	s.serveMetadata(w, r, "file_metadata", func(codeID, key string, opts catalog.MetadataOptions) (any, error) {
		return s.Files.FileMetadata(r.Context(), codeID, key, opts)
	})
}

// serveMetadata answers a file_metadata(s) request for the environment's
// current code with what lookup finds. Answers are kept (metadataAnswers)
// by code_id, path and query: a code snapshot never changes, and every
// agent run asks the same (pluginsync of plugins, pluginfacts, locales).
func (s *Server) serveMetadata(w http.ResponseWriter, r *http.Request, what string,
	lookup func(codeID, key string, opts catalog.MetadataOptions) (any, error)) {
	key := r.PathValue("path")
	codeID, err := s.currentCode(r)
	if err != nil {
		s.envError(w, r, err)
		return
	}
	cacheKey := what + "\x00" + codeID + "\x00" + key + "\x00" + r.URL.RawQuery
	if b, ok := s.metadata.get(cacheKey); ok {
		writeJSONBytes(w, b)
		return
	}
	opts, err := code.ParseMetadataQuery(r.URL.Query())
	if err != nil {
		s.apiError(w, r, err)
		return
	}
	v, err := lookup(codeID, key, opts)
	if err != nil {
		s.fileError(w, r, what, key, err)
		return
	}
	b, err := json.Marshal(v)
	if err != nil {
		s.apiError(w, r, fmt.Errorf("encode %s of %s: %w", what, key, err))
		return
	}
	b = append(b, '\n') // as json.Encoder ends it
	s.metadata.put(cacheKey, b)
	writeJSONBytes(w, b)
}

// writeJSONBytes answers 200 with b, JSON.
func writeJSONBytes(w http.ResponseWriter, b []byte) {
	w.Header().Set("Content-Type", "application/json;charset=utf-8")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.Write(b)
}

func (s *Server) fileContent(w http.ResponseWriter, r *http.Request) {
	key := r.PathValue("path")
	codeID, err := s.currentCode(r)
	if err != nil {
		s.envError(w, r, err)
		return
	}
	b, err := s.Files.FileContent(r.Context(), codeID, key)
	if err != nil {
		s.fileError(w, r, "file_content", key, err)
		return
	}
	writeOctets(w, b)
}

// staticFileContent serves a file of the exact code a static catalog was
// compiled from, named by the catalog's code_id.
func (s *Server) staticFileContent(w http.ResponseWriter, r *http.Request) {
	path := r.PathValue("path")
	q := r.URL.Query()
	env, codeID := q.Get("environment"), q.Get("code_id")
	if env == "" || codeID == "" || path == "" {
		textError(w, http.StatusBadRequest, "Error: A /static_file_content request requires an environment, a code-id, and a file-path")
		return
	}
	if err := farm.ValidateEnvironment(env); err != nil {
		s.apiError(w, r, err)
		return
	}
	b, err := s.Files.StaticFileContent(r.Context(), codeID, path)
	if err != nil {
		s.fileError(w, r, "static_file_content", path, err)
		return
	}
	writeOctets(w, b)
}

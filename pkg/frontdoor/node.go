package frontdoor

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/compilefarm/compilefarm/pkg/classifier"
	"github.com/compilefarm/compilefarm/pkg/facts"
	"github.com/compilefarm/compilefarm/pkg/farm"
	"github.com/compilefarm/compilefarm/pkg/intake"
	"github.com/compilefarm/compilefarm/pkg/trusted"
)

// Classifier is the external node classifier.
type Classifier interface {
	Classify(ctx context.Context, certname string) (classifier.Classification, error)
}

// trustedExtensions are the extensions of the request's client certificate
// as a compile sees them in $trusted['extensions'] (the handlers that call
// it only serve verified certificates).
func trustedExtensions(r *http.Request) map[string]string {
	if c := peerCert(r); c != nil {
		return trusted.Extensions(c)
	}
	return nil
}

// getNode answers the agent's node request as Puppet's node object: its
// environment, the facts the farm holds for it, and, with a classifier,
// the classifier's classes, its parameters (which win over facts) and its
// environment (which wins over the agent's: the agent switches to it).
func (s *Server) getNode(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	env := r.URL.Query().Get("environment")
	var class classifier.Classification
	if s.Classifier != nil {
		var err error
		if class, err = s.Classifier.Classify(r.Context(), name); err != nil {
			s.log().Warn("external node classifier failed", "node", name, "err", err)
			s.apiError(w, r, err)
			return
		}
		if class.Environment != "" {
			env = class.Environment
		}
	}
	if env != "" {
		if _, err := s.environment(r, env); err != nil {
			s.envError(w, r, err)
			return
		}
	}
	params := map[string]any{}
	n, err := s.Nodes.GetNode(r.Context(), name)
	switch {
	case err == nil:
		s.runs.keepNode(n) // for the catalog request of this run (runs.go)
		if env == "" {
			env = n.Environment
		}
		if n.FactsDigest != "" {
			doc, err := s.factsDoc(r.Context(), n.FactsDigest)
			if err != nil {
				s.apiError(w, r, fmt.Errorf("read facts of %s: %w", name, err))
				return
			}
			d, err := facts.Decode(name, doc)
			if err != nil {
				s.apiError(w, r, fmt.Errorf("stored facts of %s: %v", name, err))
				return
			}
			params = d.Values
		}
	case !errors.Is(err, farm.ErrNotFound):
		s.apiError(w, r, err)
		return
	}
	if env == "" {
		env = "production"
	}
	for k, v := range class.Parameters {
		params[k] = v
	}
	node := map[string]any{"name": name, "environment": env, "parameters": params}
	if class.Classes != nil {
		node["classes"] = class.Classes
	}
	writeJSON(w, node)
}

// environment reads a valid, known environment: ErrInvalid for a bad
// name, ErrNotFound (with Puppet's message) for an unknown one.
func (s *Server) environment(r *http.Request, env string) (farm.Environment, error) {
	if err := farm.ValidateEnvironment(env); err != nil {
		return farm.Environment{}, err
	}
	e, err := s.Envs.GetEnvironment(r.Context(), env)
	if errors.Is(err, farm.ErrNotFound) {
		return farm.Environment{}, fmt.Errorf("Could not find environment '%s': %w", env, farm.ErrNotFound)
	}
	return e, err
}

// envError answers an unknown environment as Puppet Server does.
func (s *Server) envError(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, farm.ErrNotFound) {
		jsonError(w, http.StatusNotFound, "RUNTIME_ERROR", "Not Found: "+trimKind(err))
		return
	}
	s.apiError(w, r, err)
}

// putFacts takes a facts upload (puppet facts upload) without a catalog.
func (s *Server) putFacts(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	body, err := readBody(r, s.MaxBody)
	if err != nil {
		s.apiError(w, r, err)
		return
	}
	env := r.URL.Query().Get("environment")
	if env == "" {
		env = "production"
		if n, err := s.Nodes.GetNode(r.Context(), name); err == nil && n.Environment != "" {
			env = n.Environment
		}
	}
	out, err := s.Intake.Submit(r.Context(), intake.Upload{
		Certname: name, Environment: env, Facts: facts.JSONDocument(body), TrustedExtensions: trustedExtensions(r),
	})
	if err != nil {
		s.envError(w, r, err)
		return
	}
	s.Metrics.ObserveFactUpload(out.Queued)
	s.factsToPuppetDB(r.Context(), out)
	writeJSON(w, map[string]any{"queued": out.Queued, "reason": out.Reason})
}

// getEnvironments lists the environments the farm has code for.
func (s *Server) getEnvironments(w http.ResponseWriter, r *http.Request) {
	envs, err := s.Envs.ListEnvironments(r.Context())
	if err != nil {
		s.apiError(w, r, err)
		return
	}
	out := map[string]any{}
	for _, e := range envs {
		out[e.Name] = map[string]any{"settings": map[string]any{
			"modulepath":          []string{"/compilefarm/code/" + e.Name + "/modules"},
			"manifest":            "/compilefarm/code/" + e.Name + "/manifests",
			"environment_timeout": "unlimited",
			"config_version":      e.CodeID,
		}}
	}
	writeJSON(w, map[string]any{
		"search_paths": []string{"compilefarm://code"},
		"environments": out,
	})
}

package frontdoor

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/compilefarm/compilefarm/pkg/facts"
	"github.com/compilefarm/compilefarm/pkg/farm"
	"github.com/compilefarm/compilefarm/pkg/intake"
	"github.com/compilefarm/compilefarm/pkg/metrics"
)

// postCatalog takes the agent's facts and answers with its stored catalog.
// The body, read into a pooled buffer (bodyBuffers), is not kept: the
// intake reads the facts from it (facts.Upload) and keeps nothing of it.
func (s *Server) postCatalog(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	buf := bodyBuffers.Get().(*[]byte)
	body, err := readBodyInto(r, s.MaxBody, *buf)
	if err != nil {
		s.apiError(w, r, err)
		return
	}
	defer recycleBody(buf, body)
	env := r.URL.Query().Get("environment")
	if env == "" {
		env = facts.FormValue(body, "environment")
	}
	up, ok := facts.CatalogForm(body)
	if !ok {
		// No facts: serve from the facts the farm already has, like GET.
		s.serveStored(w, r, name, env)
		return
	}
	out, err := s.Intake.Submit(r.Context(), intake.Upload{
		Certname: name, Environment: env, Facts: up, TrustedExtensions: trustedExtensions(r),
		Node: s.runs.takeNode(name), // read by this run's node request, if any (runs.go)
	})
	if err != nil {
		s.apiError(w, r, err)
		return
	}
	s.Metrics.ObserveFactUpload(out.Queued)
	s.factsToPuppetDB(r.Context(), out)
	s.serveCatalog(w, r, out.Node)
}

// factsToPuppetDB tells the PuppetDB sink, if any, of a fact upload.
func (s *Server) factsToPuppetDB(ctx context.Context, out intake.Outcome) {
	if s.PuppetDB != nil {
		n := out.Node
		s.PuppetDB.Facts(ctx, n.Certname, n.Environment, n.FactsDigest, n.NodeInfo, out.FactsChanged)
	}
}

// getCatalog serves the catalog compiled from the facts the farm has.
func (s *Server) getCatalog(w http.ResponseWriter, r *http.Request) {
	s.serveStored(w, r, r.PathValue("name"), r.URL.Query().Get("environment"))
}

func (s *Server) serveStored(w http.ResponseWriter, r *http.Request, name, env string) {
	n, err := s.Nodes.GetNode(r.Context(), name)
	if errors.Is(err, farm.ErrNotFound) || (err == nil && n.Requested == nil) {
		jsonError(w, http.StatusNotFound, "RESOURCE_NOT_FOUND",
			fmt.Sprintf("Not Found: no facts for node %s: send them with POST /puppet/v3/catalog/%s or PUT /puppet/v3/facts/%s", name, name, name))
		return
	}
	if err != nil {
		s.apiError(w, r, err)
		return
	}
	if env != "" && env != n.Environment {
		jsonError(w, http.StatusNotFound, "RESOURCE_NOT_FOUND",
			fmt.Sprintf("Not Found: node %s is in environment '%s', not '%s'; send facts for '%s' first", name, n.Environment, env, env))
		return
	}
	s.serveCatalog(w, r, n)
}

// serveCatalog applies the serving rule: a current catalog at once; a
// pending compile is waited for (bounded, longer for a first compile); then
// the last good catalog, or 503 with Retry-After when there is none; a failed
// compile with no catalog to fall back on is Puppet's 500 with the error.
func (s *Server) serveCatalog(w http.ResponseWriter, r *http.Request, n farm.Node) {
	outcome := metrics.CatalogFresh
	if n.Pending() {
		wait := s.ChangedCompileWait
		if n.Catalog == nil {
			wait = s.FirstCompileWait
		}
		var waited farm.Node
		var err error
		// A compile wait holds no body: the slot serves others meanwhile.
		withoutSlot(r, func() { waited, err = s.waitCompile(r.Context(), n.Certname, wait) })
		if err != nil && r.Context().Err() != nil {
			return
		}
		if err == nil {
			n = waited
			outcome = metrics.CatalogWaited
		}
		if n.Pending() {
			if n.Catalog == nil {
				s.Metrics.ObserveCatalogRequest(metrics.CatalogPending)
				retry := int((wait + time.Second - 1) / time.Second)
				w.Header().Set("Retry-After", strconv.Itoa(max(retry, 5)))
				jsonError(w, http.StatusServiceUnavailable, "RUNTIME_ERROR", fmt.Sprintf(
					"Service Unavailable: the catalog of %s is still compiling (queued %s ago); try again after Retry-After seconds",
					n.Certname, time.Since(n.Requested.At).Round(time.Second)))
				return
			}
			outcome = metrics.CatalogStale
			s.log().Info("serving last good catalog while a new compile runs", "node", n.Certname,
				"catalog_seq", n.Catalog.Seq, "requested_seq", n.Requested.Seq, "reason", n.Requested.Reason)
		}
	}
	if n.Catalog == nil {
		s.Metrics.ObserveCatalogRequest(metrics.CatalogFailed)
		msg := "compile failed"
		if n.Compile != nil {
			msg = n.Compile.Error
		}
		jsonError(w, http.StatusInternalServerError, "RUNTIME_ERROR", "Server Error: "+msg)
		return
	}
	if n.Compile != nil && n.Compile.Result == farm.ResultFailed && n.Compile.Seq > n.Catalog.Seq {
		outcome = metrics.CatalogStale
		s.log().Warn("serving last good catalog: the latest compile failed", "node", n.Certname,
			"catalog_seq", n.Catalog.Seq, "error", n.Compile.Error)
	}
	if err := s.writeCatalog(w, r, n.Catalog); err != nil {
		s.apiError(w, r, err)
		return
	}
	s.Metrics.ObserveCatalogRequest(outcome)
}

// waitCompile polls the node until its latest requested compile finished,
// for at most wait. The node store is the only channel between front door
// and compile workers, in one process or across a fleet. The polls start
// at waitPollFirst and back off to waitPollMax: most compiles take most of
// a second, and a herd of new agents holds hundreds of waiting requests,
// whose reads (a DynamoDB read each on AWS) would otherwise cost more than
// the compiles they wait for.
func (s *Server) waitCompile(ctx context.Context, certname string, wait time.Duration) (farm.Node, error) {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	delay := waitPollFirst
	timer := time.NewTimer(delay)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return farm.Node{}, ctx.Err()
		case <-timer.C:
		}
		n, err := s.Nodes.GetNode(ctx, certname)
		if err == nil && !n.Pending() {
			return n, nil
		}
		delay = min(delay*3/2, waitPollMax)
		timer.Reset(delay)
	}
}

// The polls of a waiting catalog request: the first after waitPollFirst,
// each next one half as late again, up to waitPollMax apart.
const (
	waitPollFirst = 50 * time.Millisecond
	waitPollMax   = 500 * time.Millisecond
)

// writeCatalog sends the stored catalog, gzipped as stored when the agent
// accepts gzip, so no request pays for compression.
func (s *Server) writeCatalog(w http.ResponseWriter, r *http.Request, ref *farm.CatalogRef) error {
	gz := acceptsGzip(r) && ref.GzipDigest != ""
	d := ref.Digest
	if gz {
		d = ref.GzipDigest
	}
	b, err := s.catalogBytes(r.Context(), d)
	if err != nil {
		return fmt.Errorf("read catalog %s: %w", d, err)
	}
	h := w.Header()
	if strings.Contains(r.Header.Get("Accept"), "application/vnd.puppet.rich+json") {
		h.Set("Content-Type", "application/vnd.puppet.rich+json; charset=utf-8")
	} else {
		h.Set("Content-Type", "application/json;charset=utf-8")
	}
	h.Set("Vary", "Accept-Encoding, User-Agent")
	if gz {
		h.Set("Content-Encoding", "gzip")
	}
	h.Set("Content-Length", strconv.Itoa(len(b)))
	w.Write(b)
	return nil
}

func (s *Server) catalogBytes(ctx context.Context, d farm.Digest) ([]byte, error) {
	if b, ok := s.catalogs.get(string(d)); ok {
		return b, nil
	}
	b, err := s.Content.Get(ctx, farm.SpaceCatalogs, d)
	if err != nil {
		return nil, err
	}
	s.catalogs.put(string(d), b)
	return b, nil
}

// acceptsGzip reports whether Accept-Encoding allows gzip (q > 0).
func acceptsGzip(r *http.Request) bool {
	for _, part := range strings.Split(r.Header.Get("Accept-Encoding"), ",") {
		enc, params, _ := strings.Cut(strings.TrimSpace(part), ";")
		if strings.TrimSpace(enc) != "gzip" {
			continue
		}
		params = strings.ReplaceAll(params, " ", "")
		if q, ok := strings.CutPrefix(params, "q="); ok {
			v, err := strconv.ParseFloat(q, 64)
			return err == nil && v > 0
		}
		return true
	}
	return false
}

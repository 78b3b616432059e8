// Package admin is the operator API of a farm (nodes, CA, code deploys, jobs) and
// the client the broker's operator verbs call it with: served on a
// broker's loopback --admin-listen, on its front door to operator
// certificates (frontdoor.OperatorPrefix), or in the command's own process
// over the AWS drivers (InProcess).
package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/compilefarm/compilefarm/pkg/catalog"
	"github.com/compilefarm/compilefarm/pkg/farm"
	"github.com/compilefarm/compilefarm/pkg/intake"
	"github.com/compilefarm/compilefarm/pkg/release"
)

// CA is what the operator API needs of the certificate authority (see
// farm.CA for what each method returns).
type CA interface {
	SignWith(ctx context.Context, certname string, opts farm.SignOptions) error
	SubmitCSR(ctx context.Context, certname string, csrPEM []byte) error
	Certificate(ctx context.Context, certname string) ([]byte, error)
	CACertificate(ctx context.Context) ([]byte, error)
	Revoke(ctx context.Context, certname string) error
	List(ctx context.Context) ([]farm.CertStatus, error)
}

// Nodes queries node records (farm.NodeStore's query).
type Nodes interface {
	QueryNodes(ctx context.Context, q farm.NodeQuery) (farm.NodePage, error)
}

// Environments lists the environments the farm has code for.
type Environments interface {
	ListEnvironments(ctx context.Context) ([]farm.Environment, error)
}

// Deployer snapshots an environment's code and queues recompiles.
type Deployer interface {
	Deploy(ctx context.Context, environment, fromDir string) (release.DeployResult, error)
	DeployEnvironments(ctx context.Context) ([]release.DeployResult, error)
	Status(ctx context.Context, environment string) (release.DeployStatus, error)
	Release(ctx context.Context, environment string, ch release.ReleaseChange) (release.ReleaseResult, error)
	ReleaseStatus(ctx context.Context, environment string) (release.ReleaseStatus, error)
	Diff(ctx context.Context, certname, from, to string) (catalog.Diff, error)
}

// Explainer says why the farm last queued a compile for a node.
type Explainer interface {
	Explain(ctx context.Context, certname string) (intake.Explanation, error)
}

// Server serves the operator API.
type Server struct {
	CA        CA
	Nodes     Nodes
	Envs      Environments
	Deployer  Deployer
	Explainer Explainer
	// Jobs runs on-demand Puppet runs through the PCP broker; nil when
	// this server runs none (the job routes answer 503).
	Jobs Jobs
	// Reports reads stored agent reports (the content store); nil when
	// this server keeps none (the report route answers 503).
	Reports Reports
}

// Register adds the operator API's routes to mux.
func (s *Server) Register(mux *http.ServeMux) {
	mux.HandleFunc("GET /admin/v1/nodes", s.listNodes)
	s.registerJobs(mux)
	mux.HandleFunc("GET "+ReportsPath+"{digest}", s.getReport)
	mux.HandleFunc("GET /admin/v1/ca/certs", func(w http.ResponseWriter, r *http.Request) {
		certs, err := s.CA.List(r.Context())
		reply(w, certs, err)
	})
	mux.HandleFunc("POST /admin/v1/ca/sign/{name}", func(w http.ResponseWriter, r *http.Request) {
		opts := farm.SignOptions{AllowAuthorizationExtensions: r.URL.Query().Get("allow-authorization-extensions") == "true"}
		reply(w, map[string]string{"signed": r.PathValue("name")}, s.CA.SignWith(r.Context(), r.PathValue("name"), opts))
	})
	mux.HandleFunc("POST /admin/v1/ca/generate/{name}", s.generate)
	mux.HandleFunc("POST /admin/v1/ca/revoke/{name}", func(w http.ResponseWriter, r *http.Request) {
		reply(w, map[string]string{"revoked": r.PathValue("name")}, s.CA.Revoke(r.Context(), r.PathValue("name")))
	})
	mux.HandleFunc("POST /admin/v1/code/deploy/{env}", func(w http.ResponseWriter, r *http.Request) {
		res, err := s.Deployer.Deploy(r.Context(), r.PathValue("env"), r.URL.Query().Get("from"))
		reply(w, res, err)
	})
	mux.HandleFunc("POST /admin/v1/code/deploy", func(w http.ResponseWriter, r *http.Request) {
		res, err := s.Deployer.DeployEnvironments(r.Context())
		reply(w, res, err)
	})
	mux.HandleFunc("POST /admin/v1/release/{env}", func(w http.ResponseWriter, r *http.Request) {
		var ch release.ReleaseChange
		if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&ch); err != nil {
			reply(w, nil, fmt.Errorf("release change is not JSON: %v: %w", err, farm.ErrInvalid))
			return
		}
		res, err := s.Deployer.Release(r.Context(), r.PathValue("env"), ch)
		reply(w, res, err)
	})
	mux.HandleFunc("GET /admin/v1/release/{env}", func(w http.ResponseWriter, r *http.Request) {
		st, err := s.Deployer.ReleaseStatus(r.Context(), r.PathValue("env"))
		reply(w, st, err)
	})
	mux.HandleFunc("GET /admin/v1/nodes/{name}/diff", func(w http.ResponseWriter, r *http.Request) {
		d, err := s.Deployer.Diff(r.Context(), r.PathValue("name"), r.URL.Query().Get("from"), r.URL.Query().Get("to"))
		reply(w, d, err)
	})
	mux.HandleFunc("GET /admin/v1/nodes/{name}/explain", func(w http.ResponseWriter, r *http.Request) {
		ex, err := s.Explainer.Explain(r.Context(), r.PathValue("name"))
		reply(w, ex, err)
	})
	mux.HandleFunc("GET /admin/v1/code/status/{env}", func(w http.ResponseWriter, r *http.Request) {
		st, err := s.Deployer.Status(r.Context(), r.PathValue("env"))
		reply(w, st, err)
	})
}

// Issued is a certificate the operator API signed for a request the
// operator sent (POST /admin/v1/ca/generate/{name}), with the CA's.
type Issued struct {
	Certificate string `json:"certificate"` // PEM
	CA          string `json:"ca"`          // PEM
}

// generate signs the certificate request in the body (PEM) for {name} at
// once, with its authorization extensions: `broker ca generate NAME
// --operator` sends one for pp_cli_auth made with a key it keeps.
func (s *Server) generate(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	csrPEM, err := io.ReadAll(io.LimitReader(r.Body, 64<<10))
	if err != nil {
		reply(w, nil, fmt.Errorf("read certificate request: %v: %w", err, farm.ErrInvalid))
		return
	}
	ctx := r.Context()
	if err := s.CA.SubmitCSR(ctx, name, csrPEM); err != nil {
		reply(w, nil, err)
		return
	}
	if err := s.CA.SignWith(ctx, name, farm.SignOptions{AllowAuthorizationExtensions: true}); err != nil {
		reply(w, nil, err)
		return
	}
	cert, err := s.CA.Certificate(ctx, name)
	if err != nil {
		reply(w, nil, err)
		return
	}
	caPEM, err := s.CA.CACertificate(ctx)
	reply(w, Issued{Certificate: string(cert), CA: string(caPEM)}, err)
}

type errorBody struct {
	Error string `json:"error"`
	Kind  string `json:"kind"`
}

func reply(w http.ResponseWriter, v any, err error) {
	w.Header().Set("Content-Type", "application/json")
	if err != nil {
		status, kind := http.StatusInternalServerError, "internal"
		switch {
		case errors.Is(err, farm.ErrNotFound):
			status, kind = http.StatusNotFound, "not-found"
		case errors.Is(err, farm.ErrInvalid):
			status, kind = http.StatusBadRequest, "invalid"
		case errors.Is(err, farm.ErrConflict):
			status, kind = http.StatusConflict, "conflict"
		}
		w.WriteHeader(status)
		json.NewEncoder(w).Encode(errorBody{Error: err.Error(), Kind: kind})
		return
	}
	json.NewEncoder(w).Encode(v)
}

// Client calls a broker's operator API.
type Client struct {
	Base string // e.g. http://127.0.0.1:9141
	HTTP *http.Client
}

func (c *Client) do(ctx context.Context, method, path string, out any) error {
	return c.call(ctx, method, path, nil, out)
}

func (c *Client) call(ctx context.Context, method, path string, in, out any) error {
	var body []byte
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("encode request %s %s: %w", method, path, err)
		}
		body = b
	}
	return c.callRaw(ctx, method, path, body, out)
}

// callRaw sends body (nil: none) and decodes the JSON answer into out.
func (c *Client) callRaw(ctx context.Context, method, path string, body []byte, out any) error {
	resp, err := c.send(ctx, method, path, body)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("read broker answer to %s %s: %w", method, path, err)
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(answer, out); err != nil {
		return fmt.Errorf("decode broker answer to %s %s: %w", method, path, err)
	}
	return nil
}

// stream GETs path, whose answer is a JSON array, and calls each with a
// decoder positioned inside the array.
func (c *Client) stream(ctx context.Context, path string, each func(*json.Decoder) error) error {
	resp, err := c.send(ctx, http.MethodGet, path, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	dec := json.NewDecoder(resp.Body)
	if tok, err := dec.Token(); err != nil || tok != json.Delim('[') {
		return fmt.Errorf("broker answer to GET %s is not a JSON array (%v)", path, err)
	}
	if err := each(dec); err != nil {
		return fmt.Errorf("GET %s: %w", path, err)
	}
	if _, err := dec.Token(); err != nil {
		return fmt.Errorf("GET %s: the list ended early: %w", path, err)
	}
	return nil
}

// send makes the request and returns the response when its status is 200
// OK; otherwise the broker's error.
func (c *Client) send(ctx context.Context, method, path string, body []byte) (*http.Response, error) {
	hc := c.HTTP
	if hc == nil {
		hc = &http.Client{Timeout: 10 * time.Minute}
	}
	var reqBody io.Reader
	if body != nil {
		reqBody = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.Base+path, reqBody)
	if err != nil {
		return nil, fmt.Errorf("build request %s %s: %w", method, path, err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("call broker at %s (is the broker running, and is --admin its --admin-listen address?): %w", c.Base, err)
	}
	if resp.StatusCode == http.StatusOK {
		return resp, nil
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	var eb errorBody
	if json.Unmarshal(answer, &eb) == nil && eb.Error != "" {
		return nil, fmt.Errorf("broker: %s", eb.Error)
	}
	return nil, fmt.Errorf("broker answered %s to %s %s: %s", resp.Status, method, path, bytes.TrimSpace(answer))
}

// Certs lists the CA's certificates and requests.
func (c *Client) Certs(ctx context.Context) ([]farm.CertStatus, error) {
	var out []farm.CertStatus
	return out, c.do(ctx, http.MethodGet, "/admin/v1/ca/certs", &out)
}

// Sign signs a pending certificate request; opts.AllowAuthorizationExtensions
// signs one requesting authorization extensions (pp_cli_auth) too.
func (c *Client) Sign(ctx context.Context, certname string, opts farm.SignOptions) error {
	q := ""
	if opts.AllowAuthorizationExtensions {
		q = "?allow-authorization-extensions=true"
	}
	return c.do(ctx, http.MethodPost, "/admin/v1/ca/sign/"+url.PathEscape(certname)+q, nil)
}

// Generate has the CA sign csrPEM for certname at once, authorization
// extensions included, and returns the certificate and the CA's.
func (c *Client) Generate(ctx context.Context, certname string, csrPEM []byte) (Issued, error) {
	var out Issued
	return out, c.callRaw(ctx, http.MethodPost, "/admin/v1/ca/generate/"+url.PathEscape(certname), csrPEM, &out)
}

// Revoke revokes a certificate.
func (c *Client) Revoke(ctx context.Context, certname string) error {
	return c.do(ctx, http.MethodPost, "/admin/v1/ca/revoke/"+url.PathEscape(certname), nil)
}

// Deploy snapshots an environment's code and queues recompiles.
func (c *Client) Deploy(ctx context.Context, env, from string) (release.DeployResult, error) {
	var out release.DeployResult
	q := ""
	if from != "" {
		q = "?from=" + url.QueryEscape(from)
	}
	return out, c.do(ctx, http.MethodPost, "/admin/v1/code/deploy/"+url.PathEscape(env)+q, &out)
}

// DeployAll snapshots every environment of the broker's environments
// directory (with the global module directories) and queues the
// recompiles of those whose code changed.
func (c *Client) DeployAll(ctx context.Context) ([]release.DeployResult, error) {
	var out []release.DeployResult
	return out, c.do(ctx, http.MethodPost, "/admin/v1/code/deploy", &out)
}

// DeployStatus reports how far an environment's nodes are with its code.
func (c *Client) DeployStatus(ctx context.Context, env string) (release.DeployStatus, error) {
	var out release.DeployStatus
	return out, c.do(ctx, http.MethodGet, "/admin/v1/code/status/"+url.PathEscape(env), &out)
}

// Release changes an environment's release policy.
func (c *Client) Release(ctx context.Context, env string, ch release.ReleaseChange) (release.ReleaseResult, error) {
	var out release.ReleaseResult
	return out, c.call(ctx, http.MethodPost, "/admin/v1/release/"+url.PathEscape(env), ch, &out)
}

// ReleaseStatus reports an environment's release per code_id.
func (c *Client) ReleaseStatus(ctx context.Context, env string) (release.ReleaseStatus, error) {
	var out release.ReleaseStatus
	return out, c.do(ctx, http.MethodGet, "/admin/v1/release/"+url.PathEscape(env), &out)
}

// Diff compares two stored catalogs of a node.
func (c *Client) Diff(ctx context.Context, certname, from, to string) (catalog.Diff, error) {
	var out catalog.Diff
	q := url.Values{}
	if from != "" {
		q.Set("from", from)
	}
	if to != "" {
		q.Set("to", to)
	}
	return out, c.do(ctx, http.MethodGet, "/admin/v1/nodes/"+url.PathEscape(certname)+"/diff?"+q.Encode(), &out)
}

// Explain says why a node's latest compile was queued and what its
// catalog reads of its facts.
func (c *Client) Explain(ctx context.Context, certname string) (intake.Explanation, error) {
	var out intake.Explanation
	return out, c.do(ctx, http.MethodGet, "/admin/v1/nodes/"+url.PathEscape(certname)+"/explain", &out)
}

package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/compilefarm/compilefarm/pkg/farm"
	"github.com/compilefarm/compilefarm/pkg/pcp/jobs"
)

// Jobs runs Puppet on nodes on demand through the PCP broker
// (*jobs.Runner).
type Jobs interface {
	Start(ctx context.Context, spec jobs.Spec) (farm.RunJob, error)
	Get(ctx context.Context, id, after string, limit int) (farm.RunJob, farm.RunJobNodePage, error)
	List(ctx context.Context, after string, limit int) (farm.RunJobPage, error)
}

// JobRequest is the body of POST /admin/v1/jobs: Nodes or Environment.
type JobRequest struct {
	Nodes       []string `json:"nodes,omitempty"`
	Environment string   `json:"environment,omitempty"`
	Noop        bool     `json:"noop,omitempty"`
	Concurrency *int     `json:"concurrency,omitempty"` // default jobs.DefaultConcurrency
	Timeout     string   `json:"timeout,omitempty"`     // per node run, a Go duration ("30m"); default jobs.DefaultTimeout
	Release     string   `json:"release,omitempty"`     // the release that starts the job (broker release --run)
}

// JobDetail is a job and a page of its nodes (GET /admin/v1/jobs/{id}).
type JobDetail struct {
	Job   farm.RunJob       `json:"job"`
	Nodes []farm.RunJobNode `json:"nodes"`
	Next  string            `json:"next,omitempty"` // ?after= of the next page of nodes
}

// JobList is a page of jobs, newest first (GET /admin/v1/jobs).
type JobList struct {
	Jobs []farm.RunJob `json:"jobs"`
	Next string        `json:"next,omitempty"` // ?after= of the next page
}

// errNoBroker answers job requests on a server without a PCP broker.
const errNoBroker = "this server runs no PCP broker (start it with --pcp-listen), so it cannot run jobs"

func (s *Server) registerJobs(mux *http.ServeMux) {
	mux.HandleFunc("POST /admin/v1/jobs", s.startJob)
	mux.HandleFunc("GET /admin/v1/jobs", s.listJobs)
	mux.HandleFunc("GET /admin/v1/jobs/{id}", s.getJob)
}

// noBroker answers 503 when the server cannot run jobs, and reports it.
func (s *Server) noBroker(w http.ResponseWriter, err error) bool {
	if s.Jobs != nil && !errors.Is(err, jobs.ErrNoBroker) {
		return false
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusServiceUnavailable)
	json.NewEncoder(w).Encode(errorBody{Error: errNoBroker, Kind: "unavailable"})
	return true
}

func (s *Server) startJob(w http.ResponseWriter, r *http.Request) {
	if s.noBroker(w, nil) {
		return
	}
	var req JobRequest
	dec := json.NewDecoder(io.LimitReader(r.Body, 16<<20))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		reply(w, nil, fmt.Errorf("the job request is not JSON with nodes or environment, noop, concurrency, timeout: %v: %w", err, farm.ErrInvalid))
		return
	}
	spec, err := req.spec()
	if err != nil {
		reply(w, nil, err)
		return
	}
	spec.Owner = owner(r)
	job, err := s.Jobs.Start(r.Context(), spec)
	if s.noBroker(w, err) {
		return
	}
	reply(w, job, err)
}

// spec checks what the request's JSON cannot say by itself; the runner
// checks the rest (nodes, environment).
func (req JobRequest) spec() (jobs.Spec, error) {
	spec := jobs.Spec{Nodes: req.Nodes, Environment: req.Environment, Noop: req.Noop, Release: req.Release}
	if req.Concurrency != nil {
		if *req.Concurrency < 1 {
			return spec, fmt.Errorf("concurrency %d: give at least 1 (nodes run at once): %w", *req.Concurrency, farm.ErrInvalid)
		}
		spec.Concurrency = *req.Concurrency
	}
	if req.Timeout != "" {
		d, err := time.ParseDuration(req.Timeout)
		if err != nil || d <= 0 {
			return spec, fmt.Errorf("timeout %q: give a positive duration such as 30m or 90s: %w", req.Timeout, farm.ErrInvalid)
		}
		spec.Timeout = d
	}
	return spec, spec.Validate()
}

// owner names who asks: the operator certificate's name on the front
// door, "loopback" on the loopback listener.
func owner(r *http.Request) string {
	if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
		return r.TLS.PeerCertificates[0].Subject.CommonName
	}
	return "loopback"
}

// pageParams reads the page a listing of jobs asks for: ?after= and
// ?limit= (0 when absent). ok is false when it answered already: the
// server cannot run jobs, or the limit is not 1 to farm.MaxNodePage.
func (s *Server) pageParams(w http.ResponseWriter, r *http.Request) (after string, limit int, ok bool) {
	if s.noBroker(w, nil) {
		return "", 0, false
	}
	q := r.URL.Query()
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > farm.MaxNodePage {
			reply(w, nil, fmt.Errorf("limit %q: give 1 to %d: %w", v, farm.MaxNodePage, farm.ErrInvalid))
			return "", 0, false
		}
		limit = n
	}
	return q.Get("after"), limit, true
}

func (s *Server) listJobs(w http.ResponseWriter, r *http.Request) {
	after, limit, ok := s.pageParams(w, r)
	if !ok {
		return
	}
	page, err := s.Jobs.List(r.Context(), after, limit)
	if err != nil {
		reply(w, nil, err)
		return
	}
	if page.Jobs == nil {
		page.Jobs = []farm.RunJob{}
	}
	reply(w, JobList{Jobs: page.Jobs, Next: page.Next}, nil)
}

func (s *Server) getJob(w http.ResponseWriter, r *http.Request) {
	after, limit, ok := s.pageParams(w, r)
	if !ok {
		return
	}
	job, page, err := s.Jobs.Get(r.Context(), r.PathValue("id"), after, limit)
	if err != nil {
		reply(w, nil, err)
		return
	}
	if page.Nodes == nil {
		page.Nodes = []farm.RunJobNode{}
	}
	reply(w, JobDetail{Job: job, Nodes: page.Nodes, Next: page.Next}, nil)
}

// StartJob starts an on-demand Puppet run of nodes.
func (c *Client) StartJob(ctx context.Context, req JobRequest) (farm.RunJob, error) {
	var out farm.RunJob
	return out, c.call(ctx, http.MethodPost, "/admin/v1/jobs", req, &out)
}

// Job returns a job and the page of its nodes after the certname after
// ("" for the first).
func (c *Client) Job(ctx context.Context, id, after string) (JobDetail, error) {
	var out JobDetail
	q := ""
	if after != "" {
		q = "?after=" + url.QueryEscape(after)
	}
	return out, c.do(ctx, http.MethodGet, "/admin/v1/jobs/"+url.PathEscape(id)+q, &out)
}

// EachJobNode calls fn on every node of job id, a page at a time, and
// returns the job as its first page showed it.
func (c *Client) EachJobNode(ctx context.Context, id string, fn func(farm.RunJobNode) error) (farm.RunJob, error) {
	d, err := c.Job(ctx, id, "")
	job := d.Job
	for err == nil {
		for _, n := range d.Nodes {
			if err := fn(n); err != nil {
				return job, err
			}
		}
		if d.Next == "" {
			return job, nil
		}
		d, err = c.Job(ctx, id, d.Next)
	}
	return job, err
}

// Jobs returns a page of jobs, newest first (after: the previous page's
// Next; limit 0 for the server's default).
func (c *Client) Jobs(ctx context.Context, after string, limit int) (JobList, error) {
	var out JobList
	q := url.Values{}
	if after != "" {
		q.Set("after", after)
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	path := "/admin/v1/jobs"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	return out, c.do(ctx, http.MethodGet, path, &out)
}

// Package jobs runs Puppet on nodes on demand over PXP: a job sends each
// node's pxp-agent a pxp-module-puppet run request through the farm's PCP
// broker, a few nodes at a time, and records every node's result in the
// farm's RunJobStore, where `broker job show` reads it.
package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/compilefarm/compilefarm/pkg/farm"
	"github.com/compilefarm/compilefarm/pkg/pcp/message"
)

// Defaults and bounds of a Spec.
const (
	DefaultConcurrency = 10
	MaxConcurrency     = 1000
	DefaultTimeout     = 30 * time.Minute
	// MaxNodes bounds one job (an environment's nodes are listed into it).
	MaxNodes = 100_000
)

// Messenger is the runner's PCP client of the broker (pkg/pcp/broker's
// in-process client): its URI, and Send, which routes a message as the
// broker routes any client's.
type Messenger interface {
	URI() string
	Send(ctx context.Context, m *message.Message) error
}

// Presence says whether a PCP client is connected to any task of the
// fleet (the broker's Connected).
type Presence interface {
	Connected(ctx context.Context, uri string) (bool, error)
}

// NodeLister pages through an environment's nodes (farm.NodeStore's
// query).
type NodeLister interface {
	QueryNodes(ctx context.Context, q farm.NodeQuery) (farm.NodePage, error)
}

// NodeReader reads a node's record (farm.NodeStore's GetNode), whose
// Report is the summary of the node's latest report.
type NodeReader interface {
	GetNode(ctx context.Context, certname string) (farm.Node, error)
}

// ReportPath is the operator API's route to a stored report (pkg/admin's
// GET /admin/v1/reports/{digest}): a node's RunJobNode.ReportURL is
// ReportPath + digest, a path on the operator API, which the front door
// serves under frontdoor.OperatorPrefix (/compilefarm/admin/v1/reports/...)
// and a broker's --admin-listen as it is.
const ReportPath = "/admin/v1/reports/"

// Config is what a Runner needs.
type Config struct {
	Store    farm.RunJobStore
	Presence Presence
	Nodes    NodeLister
	// Reports, when set, links each node's result to the run's report:
	// the runner reads the node's latest report summary and, when it is
	// this run's (its transaction_uuid) and the farm kept the full report,
	// sets RunJobNode.ReportURL to ReportPath + the report's digest (an
	// operator API path: under /compilefarm on the front door).
	Reports NodeReader
	// Messenger may be set later with SetMessenger (it is made by
	// attaching Deliver to the broker).
	Messenger Messenger
	// Name is this task's name, recorded as RunJob.Runner.
	Name string
	// Now is the clock of the records (time.Now when nil).
	Now func() time.Time
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// RequestTTL is how long a request may take to reach an agent before
	// the broker drops it (ttl_expired): 10s when 0.
	RequestTTL time.Duration
	// StatusWait is how long the runner waits for the answer to a status
	// query: 30s when 0.
	StatusWait time.Duration
	// StaleAfter is how long a running job's record may go without an
	// update before another runner adopts it (Resume): 2m when 0. The
	// runner touches the records of its jobs four times as often.
	StaleAfter time.Duration
}

// Runner starts jobs and runs them in the background, on its own context:
// a job goes on when the request that started it ends, and stops (to be
// resumed) when the Runner is closed. Safe for concurrent use.
type Runner struct {
	cfg Config
	log *slog.Logger

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	// reportTries reads of a node find its run's report at most,
	// reportPause apart (reportLink).
	reportTries int
	reportPause time.Duration

	mu        sync.Mutex
	messenger Messenger
	byTx      map[string]*call // by transaction_id
	byMsg     map[string]*call // by the request message's id
	active    map[string]bool  // jobs running here, by id
}

// call is one request waiting for its answers.
type call struct {
	tx, msgID string
	answers   chan *message.Message
}

// New returns a Runner. Wiring into a broker:
//
//	r := jobs.New(jobs.Config{Store: state, Presence: b, Nodes: state, Reports: state, Name: task, Logger: log})
//	local, err := b.Attach(..., "controller", r.Deliver) // a URI unique to this task
//	r.SetMessenger(local)
//	r.Resume(ctx)
//	defer r.Close()
func New(cfg Config) *Runner {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.RequestTTL <= 0 {
		cfg.RequestTTL = 10 * time.Second
	}
	if cfg.StatusWait <= 0 {
		cfg.StatusWait = 30 * time.Second
	}
	if cfg.StaleAfter <= 0 {
		cfg.StaleAfter = 2 * time.Minute
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Runner{cfg: cfg, log: cfg.Logger, ctx: ctx, cancel: cancel, messenger: cfg.Messenger,
		reportTries: 5, reportPause: 500 * time.Millisecond,
		byTx: map[string]*call{}, byMsg: map[string]*call{}}
}

// SetMessenger sets the runner's PCP client, once the broker has attached
// Deliver.
func (r *Runner) SetMessenger(m Messenger) {
	r.mu.Lock()
	r.messenger = m
	r.mu.Unlock()
}

func (r *Runner) client() Messenger {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.messenger
}

// Close stops the runner's jobs and waits for them: their records stay
// running, for Resume (here or on another task) to finish them.
func (r *Runner) Close() {
	r.cancel()
	r.wg.Wait()
}

// Spec is what to run: Nodes or every node of Environment.
type Spec struct {
	Nodes       []string
	Environment string
	Noop        bool
	Concurrency int           // nodes in flight at most; DefaultConcurrency when 0
	Timeout     time.Duration // per node run; DefaultTimeout when 0
	Release     string        // the release that starts the job, if any
	Owner       string        // who starts it
}

// Validate returns an ErrInvalid error, saying what to change, for a spec
// Start refuses; it applies the defaults to s.
func (s *Spec) Validate() error {
	switch {
	case len(s.Nodes) == 0 && s.Environment == "":
		return fmt.Errorf("a job needs nodes (--nodes a,b) or an environment (--environment ENV): %w", farm.ErrInvalid)
	case len(s.Nodes) > 0 && s.Environment != "":
		return fmt.Errorf("a job runs either named nodes (--nodes) or an environment's nodes (--environment), not both: %w", farm.ErrInvalid)
	case s.Concurrency < 0 || s.Concurrency > MaxConcurrency:
		return fmt.Errorf("concurrency %d must be between 1 and %d: %w", s.Concurrency, MaxConcurrency, farm.ErrInvalid)
	case s.Timeout < 0:
		return fmt.Errorf("timeout %v must be positive: %w", s.Timeout, farm.ErrInvalid)
	case len(s.Nodes) > MaxNodes:
		return fmt.Errorf("a job runs at most %d nodes (%d given): split it: %w", MaxNodes, len(s.Nodes), farm.ErrInvalid)
	}
	if s.Environment != "" {
		if err := farm.ValidateEnvironment(s.Environment); err != nil {
			return err
		}
	}
	seen := make(map[string]bool, len(s.Nodes))
	nodes := s.Nodes[:0:0]
	for _, n := range s.Nodes {
		if err := farm.ValidateCertname(n); err != nil {
			return err
		}
		if !seen[n] {
			seen[n] = true
			nodes = append(nodes, n)
		}
	}
	slices.Sort(nodes)
	s.Nodes = nodes
	if s.Concurrency == 0 {
		s.Concurrency = DefaultConcurrency
	}
	if s.Timeout == 0 {
		s.Timeout = DefaultTimeout
	}
	return nil
}

// ErrNoBroker: the runner has no PCP client (SetMessenger was not called).
var ErrNoBroker = errors.New("the job runner is not attached to a PCP broker")

// Start creates a job for spec, stores it with its nodes queued, and runs
// it in the background. It returns the job as stored; ErrInvalid for a bad
// spec or an environment without nodes.
func (r *Runner) Start(ctx context.Context, spec Spec) (farm.RunJob, error) {
	if r.client() == nil {
		return farm.RunJob{}, ErrNoBroker
	}
	if err := spec.Validate(); err != nil {
		return farm.RunJob{}, err
	}
	nodes := spec.Nodes
	if spec.Environment != "" {
		var err error
		if nodes, err = r.environmentNodes(ctx, spec.Environment); err != nil {
			return farm.RunJob{}, err
		}
	}
	now := r.cfg.Now().UTC()
	job := farm.RunJob{
		ID: newJobID(now), Created: now, Updated: now, State: farm.JobRunning,
		Environment: spec.Environment, Release: spec.Release, Noop: spec.Noop,
		Concurrency: spec.Concurrency, Timeout: spec.Timeout, Owner: spec.Owner, Runner: r.cfg.Name,
		Total: len(nodes), Counts: map[string]int{farm.JobNodeQueued: len(nodes)},
	}
	// Ours before it is stored: a Resume that lists it meanwhile leaves it.
	r.setActive(job.ID, true)
	if err := r.cfg.Store.CreateJob(ctx, job, nodes); err != nil {
		r.setActive(job.ID, false)
		return farm.RunJob{}, fmt.Errorf("store job %s: %w", job.ID, err)
	}
	r.log.Info("job started", "job", job.ID, "nodes", len(nodes), "environment", spec.Environment,
		"noop", spec.Noop, "concurrency", spec.Concurrency, "owner", spec.Owner)
	r.spawn(job, nodes, nil)
	return job, nil
}

// environmentNodes lists the certnames of env's nodes, a page at a time.
func (r *Runner) environmentNodes(ctx context.Context, env string) ([]string, error) {
	if r.cfg.Nodes == nil {
		return nil, fmt.Errorf("this runner cannot list an environment's nodes: name them with --nodes: %w", farm.ErrInvalid)
	}
	var nodes []string
	err := farm.EachNode(ctx, r.cfg.Nodes, farm.NodeQuery{Environment: env, Limit: farm.MaxNodePage}, func(n farm.Node) error {
		if len(nodes) == MaxNodes {
			return fmt.Errorf("environment %s has more than %d nodes: run it in parts with --nodes: %w", env, MaxNodes, farm.ErrInvalid)
		}
		nodes = append(nodes, n.Certname)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list the nodes of environment %s: %w", env, err)
	}
	if len(nodes) == 0 {
		return nil, fmt.Errorf("environment %s has no nodes (none has checked in): %w", env, farm.ErrInvalid)
	}
	return nodes, nil
}

// Get returns a job and a page of its nodes (after: the last certname of
// the previous page).
func (r *Runner) Get(ctx context.Context, id, after string, limit int) (farm.RunJob, farm.RunJobNodePage, error) {
	if err := farm.ValidateJobID(id); err != nil {
		return farm.RunJob{}, farm.RunJobNodePage{}, err
	}
	job, err := r.cfg.Store.GetJob(ctx, id)
	if err != nil {
		return farm.RunJob{}, farm.RunJobNodePage{}, fmt.Errorf("read job %s: %w", id, err)
	}
	page, err := r.cfg.Store.ListJobNodes(ctx, farm.RunJobNodeQuery{Job: id, After: after, Limit: limit})
	if err != nil {
		return farm.RunJob{}, farm.RunJobNodePage{}, fmt.Errorf("list the nodes of job %s: %w", id, err)
	}
	return job, page, nil
}

// List returns a page of jobs, newest first.
func (r *Runner) List(ctx context.Context, after string, limit int) (farm.RunJobPage, error) {
	page, err := r.cfg.Store.ListJobs(ctx, farm.RunJobQuery{After: after, Limit: limit})
	if err != nil {
		return farm.RunJobPage{}, fmt.Errorf("list jobs: %w", err)
	}
	return page, nil
}

// Deliver takes a message the broker routed to the runner's URI: an
// agent's answer (provisional, final, blocking response, RPC error) or the
// broker's (error_message, ttl_expired). It never blocks; answers nobody
// waits for any more are dropped.
func (r *Runner) Deliver(m *message.Message) {
	var a answer
	if len(m.Data) > 0 {
		if err := json.Unmarshal(m.Data, &a); err != nil {
			r.log.Warn("PCP message to the job runner has data that is not JSON: dropped",
				"message_type", m.MessageType, "sender", m.Sender, "err", err)
			return
		}
	}
	r.mu.Lock()
	c := r.byTx[a.TransactionID]
	if c == nil && m.InReplyTo != "" {
		c = r.byMsg[m.InReplyTo]
	}
	if c == nil && a.ID != "" {
		c = r.byMsg[a.ID]
	}
	r.mu.Unlock()
	if c == nil {
		r.log.Debug("PCP message for no waiting request: dropped", "message_type", m.MessageType, "sender", m.Sender,
			"transaction_id", a.TransactionID)
		return
	}
	select {
	case c.answers <- m:
	default:
		r.log.Warn("too many answers to one request: dropped", "message_type", m.MessageType, "sender", m.Sender)
	}
}

// setActive marks job id as running here (or not).
func (r *Runner) setActive(id string, on bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.active == nil {
		r.active = map[string]bool{}
	}
	if on {
		r.active[id] = true
	} else {
		delete(r.active, id)
	}
}

// register makes a call waiting for the answers to msg (transaction tx).
func (r *Runner) register(tx, msgID string) *call {
	c := &call{tx: tx, msgID: msgID, answers: make(chan *message.Message, 8)}
	r.mu.Lock()
	r.byTx[tx] = c
	if msgID != "" {
		r.byMsg[msgID] = c
	}
	r.mu.Unlock()
	return c
}

func (r *Runner) unregister(c *call) {
	r.mu.Lock()
	if r.byTx[c.tx] == c {
		delete(r.byTx, c.tx)
	}
	if c.msgID != "" {
		delete(r.byMsg, c.msgID)
	}
	r.mu.Unlock()
}

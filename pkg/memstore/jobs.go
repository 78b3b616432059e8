package memstore

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/compilefarm/compilefarm/pkg/farm"
)

var _ farm.RunJobStore = (*Store)(nil)

// jobStore keeps run jobs and their nodes JSON encoded, as the node
// records are. The zero value is ready.
type jobStore struct {
	mu    sync.RWMutex
	jobs  map[string][]byte            // id -> farm.RunJob JSON
	nodes map[string]map[string][]byte // id -> certname -> farm.RunJobNode JSON
}

// jobCursor is a job's place in ListJobs order, and the Next of a page.
func jobCursor(j *farm.RunJob) string {
	return j.Created.UTC().Format(time.RFC3339Nano) + " " + j.ID
}

// jobOrder orders jobs as ListJobs lists them: newer first, then the
// greater id.
func jobOrder(a, b *farm.RunJob) int {
	if c := b.Created.Compare(a.Created); c != 0 {
		return c
	}
	return cmp.Compare(b.ID, a.ID)
}

// parseJobCursor reads a Next back into the position it names.
func parseJobCursor(after string) (farm.RunJob, error) {
	var j farm.RunJob
	i := len(after) - 1
	for i >= 0 && after[i] != ' ' {
		i--
	}
	if i < 0 {
		return j, fmt.Errorf("job cursor %q: %w", after, farm.ErrInvalid)
	}
	t, err := time.Parse(time.RFC3339Nano, after[:i])
	if err != nil {
		return j, fmt.Errorf("job cursor %q: %v: %w", after, err, farm.ErrInvalid)
	}
	j.Created, j.ID = t, after[i+1:]
	return j, nil
}

// CreateJob stores job and its queued nodes at once.
func (s *Store) CreateJob(ctx context.Context, job farm.RunJob, nodes []string) error {
	if err := farm.CheckCreateJob(ctx, &job, nodes); err != nil {
		return err
	}
	b, err := json.Marshal(job)
	if err != nil {
		return fmt.Errorf("create job %s: encode: %v: %w", job.ID, err, farm.ErrInvalid)
	}
	nm := make(map[string][]byte, len(nodes))
	for _, n := range nodes {
		nb, err := json.Marshal(job.QueuedNode(n))
		if err != nil {
			return fmt.Errorf("create job %s: encode node %s: %v: %w", job.ID, n, err, farm.ErrInvalid)
		}
		nm[n] = nb
	}
	js := &s.jobs
	js.mu.Lock()
	defer js.mu.Unlock()
	if _, ok := js.jobs[job.ID]; ok {
		return fmt.Errorf("create job %s: it exists: %w", job.ID, farm.ErrConflict)
	}
	if js.jobs == nil {
		js.jobs = map[string][]byte{}
		js.nodes = map[string]map[string][]byte{}
	}
	js.jobs[job.ID] = b
	js.nodes[job.ID] = nm
	return nil
}

// GetJob returns the record of job id.
func (s *Store) GetJob(ctx context.Context, id string) (farm.RunJob, error) {
	if err := farm.CheckGetJob(ctx, id); err != nil {
		return farm.RunJob{}, err
	}
	js := &s.jobs
	j, ok := lookup[farm.RunJob](&js.mu, js.jobs, id)
	if !ok {
		return farm.RunJob{}, fmt.Errorf("get job %s: %w", id, farm.ErrNotFound)
	}
	return j, nil
}

// UpdateJob runs fn on a copy of job id's record under the store's lock
// and stores the result unless fn fails; fn must not call back into the
// store.
func (s *Store) UpdateJob(ctx context.Context, id string, fn func(*farm.RunJob) error) (farm.RunJob, error) {
	if err := farm.CheckUpdateJob(ctx, id); err != nil {
		return farm.RunJob{}, err
	}
	js := &s.jobs
	js.mu.Lock()
	defer js.mu.Unlock()
	b, ok := js.jobs[id]
	if !ok {
		return farm.RunJob{}, fmt.Errorf("update job %s: %w", id, farm.ErrNotFound)
	}
	j := decode[farm.RunJob](b)
	created := j.Created
	if err := fn(&j); err != nil {
		return farm.RunJob{}, err
	}
	if err := farm.CheckUpdatedJob(id, created, &j); err != nil {
		return farm.RunJob{}, err
	}
	b, err := json.Marshal(j)
	if err != nil {
		return farm.RunJob{}, fmt.Errorf("update job %s: encode: %v: %w", id, err, farm.ErrInvalid)
	}
	js.jobs[id] = b
	return decode[farm.RunJob](b), nil
}

// UpdateJobNode runs fn on a copy of node's record in job id under the
// store's lock and stores the result unless fn fails.
func (s *Store) UpdateJobNode(ctx context.Context, id, node string, fn func(*farm.RunJobNode) error) (farm.RunJobNode, error) {
	if err := farm.CheckUpdateJobNode(ctx, id, node); err != nil {
		return farm.RunJobNode{}, err
	}
	js := &s.jobs
	js.mu.Lock()
	defer js.mu.Unlock()
	b, ok := js.nodes[id][node]
	if !ok {
		return farm.RunJobNode{}, fmt.Errorf("update node %s of job %s: %w", node, id, farm.ErrNotFound)
	}
	n := decode[farm.RunJobNode](b)
	if err := fn(&n); err != nil {
		return farm.RunJobNode{}, err
	}
	if err := farm.CheckUpdatedJobNode(id, node, &n); err != nil {
		return farm.RunJobNode{}, err
	}
	b, err := json.Marshal(n)
	if err != nil {
		return farm.RunJobNode{}, fmt.Errorf("update node %s of job %s: encode: %v: %w", node, id, err, farm.ErrInvalid)
	}
	js.nodes[id][node] = b
	return decode[farm.RunJobNode](b), nil
}

// ListJobs sorts every job for each page: a driver for tests.
func (s *Store) ListJobs(ctx context.Context, q farm.RunJobQuery) (farm.RunJobPage, error) {
	if err := farm.CheckListJobs(ctx, q); err != nil {
		return farm.RunJobPage{}, err
	}
	var after *farm.RunJob
	if q.After != "" {
		a, err := parseJobCursor(q.After)
		if err != nil {
			return farm.RunJobPage{}, fmt.Errorf("list jobs: %w", err)
		}
		after = &a
	}
	js := &s.jobs
	js.mu.RLock()
	jobs := make([]farm.RunJob, 0, len(js.jobs))
	for _, b := range js.jobs {
		if j := decode[farm.RunJob](b); after == nil || jobOrder(after, &j) < 0 {
			jobs = append(jobs, j)
		}
	}
	js.mu.RUnlock()
	slices.SortFunc(jobs, func(a, b farm.RunJob) int { return jobOrder(&a, &b) })
	var page farm.RunJobPage
	if len(jobs) > q.PageSize() {
		jobs = jobs[:q.PageSize()]
		page.Next = jobCursor(&jobs[len(jobs)-1])
	}
	page.Jobs = jobs
	return page, nil
}

// ListJobNodes sorts the job's certnames for each page.
func (s *Store) ListJobNodes(ctx context.Context, q farm.RunJobNodeQuery) (farm.RunJobNodePage, error) {
	if err := farm.CheckListJobNodes(ctx, q); err != nil {
		return farm.RunJobNodePage{}, err
	}
	js := &s.jobs
	js.mu.RLock()
	defer js.mu.RUnlock()
	var names []string
	for c := range js.nodes[q.Job] {
		if c > q.After {
			names = append(names, c)
		}
	}
	var page farm.RunJobNodePage
	names, page.Next = sortedPage(names, q.PageSize())
	for _, c := range names {
		page.Nodes = append(page.Nodes, decode[farm.RunJobNode](js.nodes[q.Job][c]))
	}
	return page, nil
}

package jobs

import (
	"context"
	"errors"
	"fmt"

	"github.com/compilefarm/compilefarm/pkg/farm"
)

// resumePages bounds how far back Resume looks: the newest
// resumePages*farm.DefaultNodePage jobs. A job older than that which is
// still running was abandoned long ago; `broker job show` shows it as it
// was left.
const resumePages = 5

var errNotOurs = errors.New("job is not ours to resume")

// Resume takes over the running jobs that no runner is running any more:
// those this runner's name ran before a restart, and those whose record
// has not been touched for StaleAfter (their task died). Each job is
// claimed with an atomic update, so two tasks never both take one; its
// queued nodes are run and its running nodes' agents are asked how their
// runs ended. Call it once at start; it returns once the jobs are running
// in the background.
func (r *Runner) Resume(ctx context.Context) error {
	if r.client() == nil {
		return ErrNoBroker
	}
	q := farm.RunJobQuery{}
	for range resumePages {
		page, err := r.cfg.Store.ListJobs(ctx, q)
		if err != nil {
			return fmt.Errorf("list jobs to resume: %w", err)
		}
		for _, j := range page.Jobs {
			if j.State != farm.JobRunning || !r.adoptable(j) {
				continue
			}
			if err := r.resume(ctx, j.ID); err != nil {
				return err
			}
		}
		if page.Next == "" {
			break
		}
		q.After = page.Next
	}
	return nil
}

// adoptable reports whether j is a running job no live runner runs.
func (r *Runner) adoptable(j farm.RunJob) bool {
	r.mu.Lock()
	here := r.active[j.ID]
	r.mu.Unlock()
	if here || j.State != farm.JobRunning {
		return false
	}
	return j.Runner == r.cfg.Name || r.now().Sub(j.Updated) >= r.cfg.StaleAfter
}

// resume claims job id and runs what is left of it.
func (r *Runner) resume(ctx context.Context, id string) (err error) {
	if !r.claimHere(id) {
		return nil // running here already
	}
	spawned := false
	defer func() {
		if !spawned {
			r.setActive(id, false)
		}
	}()
	job, err := r.cfg.Store.UpdateJob(ctx, id, func(j *farm.RunJob) error {
		if j.State != farm.JobRunning || (j.Runner != r.cfg.Name && r.now().Sub(j.Updated) < r.cfg.StaleAfter) {
			return errNotOurs
		}
		j.Runner, j.Updated = r.cfg.Name, r.now()
		return nil
	})
	if errors.Is(err, errNotOurs) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("claim job %s: %w", id, err)
	}
	var queued []string
	var recovering []farm.RunJobNode
	q := farm.RunJobNodeQuery{Job: id, Limit: farm.MaxNodePage}
	for {
		page, err := r.cfg.Store.ListJobNodes(ctx, q)
		if err != nil {
			return fmt.Errorf("list the nodes of job %s to resume: %w", id, err)
		}
		for _, n := range page.Nodes {
			switch n.State {
			case farm.JobNodeQueued:
				queued = append(queued, n.Node)
			case farm.JobNodeRunning:
				recovering = append(recovering, n)
			}
		}
		if page.Next == "" {
			break
		}
		q.After = page.Next
	}
	r.log.Info("job resumed", "job", id, "queued", len(queued), "running", len(recovering))
	spawned = true
	r.spawn(job, queued, recovering)
	return nil
}

// claimHere marks job id as running here unless it is already.
func (r *Runner) claimHere(id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.active == nil {
		r.active = map[string]bool{}
	}
	if r.active[id] {
		return false
	}
	r.active[id] = true
	return true
}

package localstore

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"regexp"

	bolt "go.etcd.io/bbolt"

	"github.com/compilefarm/compilefarm/pkg/farm"
)

var _ farm.RunJobStore = (*Store)(nil)

// Run jobs live in three buckets, made by the first CreateJob (a state.db
// without them holds no job, and a program that does not know them leaves
// them alone):
//
//	run_jobs             job id → JSON farm.RunJob
//	run_jobs_by_created  jobCreatedKey → "" (ListJobs walks it backwards)
//	run_job_nodes        one nested bucket per job id: certname → JSON farm.RunJobNode
var (
	bucketRunJobs        = []byte("run_jobs")
	bucketRunJobsCreated = []byte("run_jobs_by_created")
	bucketRunJobNodes    = []byte("run_job_nodes")
)

// jobCreatedKey orders jobs by created time, then id: 16 hex digits of
// the time in Unix nanoseconds with the sign bit flipped (so earlier times
// sort first, before 1970 too), then the id. Printable, so it is also the
// Next of a ListJobs page.
func jobCreatedKey(j *farm.RunJob) []byte {
	return fmt.Appendf(nil, "%016x%s", uint64(j.Created.UnixNano())^(1<<63), j.ID)
}

var jobCreatedKeyRE = regexp.MustCompile(`^[0-9a-f]{16}[0-9A-Za-z][0-9A-Za-z_-]{0,63}$`)

// CreateJob stores job, its index entry and its queued nodes in one write
// transaction.
func (s *Store) CreateJob(ctx context.Context, job farm.RunJob, nodes []string) error {
	if err := farm.CheckCreateJob(ctx, &job, nodes); err != nil {
		return err
	}
	v, err := json.Marshal(job)
	if err != nil {
		return fmt.Errorf("create job %s: encode: %v: %w", job.ID, err, farm.ErrInvalid)
	}
	err = s.db.Update(func(tx *bolt.Tx) error {
		jobs, err := tx.CreateBucketIfNotExists(bucketRunJobs)
		if err != nil {
			return err
		}
		if jobs.Get([]byte(job.ID)) != nil {
			return fmt.Errorf("it exists: %w", farm.ErrConflict)
		}
		byCreated, err := tx.CreateBucketIfNotExists(bucketRunJobsCreated)
		if err != nil {
			return err
		}
		all, err := tx.CreateBucketIfNotExists(bucketRunJobNodes)
		if err != nil {
			return err
		}
		b, err := all.CreateBucket([]byte(job.ID))
		if err != nil {
			return err
		}
		for _, n := range nodes {
			nv, err := json.Marshal(job.QueuedNode(n))
			if err != nil {
				return fmt.Errorf("encode node %s: %v: %w", n, err, farm.ErrInvalid)
			}
			if err := b.Put([]byte(n), nv); err != nil {
				return err
			}
		}
		if err := jobs.Put([]byte(job.ID), v); err != nil {
			return err
		}
		return byCreated.Put(jobCreatedKey(&job), nil)
	})
	if err != nil {
		return fmt.Errorf("create job %s: %w", job.ID, s.storageErr(err))
	}
	return nil
}

// GetJob returns the record of job id.
func (s *Store) GetJob(ctx context.Context, id string) (farm.RunJob, error) {
	if err := farm.CheckGetJob(ctx, id); err != nil {
		return farm.RunJob{}, err
	}
	var j farm.RunJob
	err := s.db.View(func(tx *bolt.Tx) error {
		var v []byte
		if b := tx.Bucket(bucketRunJobs); b != nil {
			v = b.Get([]byte(id))
		}
		if v == nil {
			return farm.ErrNotFound
		}
		var err error
		j, err = decode[farm.RunJob]("job "+id, v)
		return err
	})
	if err != nil {
		return farm.RunJob{}, fmt.Errorf("get job %s: %w", id, s.storageErr(err))
	}
	return j, nil
}

// UpdateJob runs fn on job id's record inside one bbolt write transaction
// and stores the result unless fn fails; fn's error is returned as is. fn
// runs while the database is locked for writing, so it must be quick and
// must not call back into the store.
func (s *Store) UpdateJob(ctx context.Context, id string, fn func(*farm.RunJob) error) (farm.RunJob, error) {
	if err := farm.CheckUpdateJob(ctx, id); err != nil {
		return farm.RunJob{}, err
	}
	var (
		out   farm.RunJob
		fnErr error
	)
	err := s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketRunJobs)
		var v []byte
		if b != nil {
			v = b.Get([]byte(id))
		}
		if v == nil {
			return farm.ErrNotFound
		}
		j, err := decode[farm.RunJob]("job "+id, v)
		if err != nil {
			return err
		}
		created := j.Created
		if fnErr = fn(&j); fnErr != nil {
			return fnErr
		}
		if fnErr = farm.CheckUpdatedJob(id, created, &j); fnErr != nil {
			return fnErr
		}
		if v, err = json.Marshal(j); err != nil {
			return fmt.Errorf("encode: %v: %w", err, farm.ErrInvalid)
		}
		if err := b.Put([]byte(id), v); err != nil {
			return err
		}
		out, err = decode[farm.RunJob]("job "+id, v) // a copy fn cannot reach
		return err
	})
	if fnErr != nil {
		return farm.RunJob{}, fnErr
	}
	if err != nil {
		return farm.RunJob{}, fmt.Errorf("update job %s: %w", id, s.storageErr(err))
	}
	return out, nil
}

// UpdateJobNode runs fn on node's record in job id inside one bbolt write
// transaction, as UpdateJob.
func (s *Store) UpdateJobNode(ctx context.Context, id, node string, fn func(*farm.RunJobNode) error) (farm.RunJobNode, error) {
	if err := farm.CheckUpdateJobNode(ctx, id, node); err != nil {
		return farm.RunJobNode{}, err
	}
	var (
		out   farm.RunJobNode
		fnErr error
	)
	err := s.db.Update(func(tx *bolt.Tx) error {
		b := jobNodes(tx, id)
		var v []byte
		if b != nil {
			v = b.Get([]byte(node))
		}
		if v == nil {
			return farm.ErrNotFound
		}
		n, err := decode[farm.RunJobNode]("node "+node+" of job "+id, v)
		if err != nil {
			return err
		}
		if fnErr = fn(&n); fnErr != nil {
			return fnErr
		}
		if fnErr = farm.CheckUpdatedJobNode(id, node, &n); fnErr != nil {
			return fnErr
		}
		if v, err = json.Marshal(n); err != nil {
			return fmt.Errorf("encode: %v: %w", err, farm.ErrInvalid)
		}
		if err := b.Put([]byte(node), v); err != nil {
			return err
		}
		out, err = decode[farm.RunJobNode]("node "+node+" of job "+id, v)
		return err
	})
	if fnErr != nil {
		return farm.RunJobNode{}, fnErr
	}
	if err != nil {
		return farm.RunJobNode{}, fmt.Errorf("update node %s of job %s: %w", node, id, s.storageErr(err))
	}
	return out, nil
}

// jobNodes returns the node bucket of job id, nil when there is none.
func jobNodes(tx *bolt.Tx, id string) *bolt.Bucket {
	all := tx.Bucket(bucketRunJobNodes)
	if all == nil {
		return nil
	}
	return all.Bucket([]byte(id))
}

// ListJobs walks run_jobs_by_created backwards from q.After and reads one
// record per job returned, in one read transaction.
func (s *Store) ListJobs(ctx context.Context, q farm.RunJobQuery) (farm.RunJobPage, error) {
	if err := farm.CheckListJobs(ctx, q); err != nil {
		return farm.RunJobPage{}, err
	}
	if q.After != "" && !jobCreatedKeyRE.MatchString(q.After) {
		return farm.RunJobPage{}, fmt.Errorf("list jobs: after %q is not the Next of a page: %w", q.After, farm.ErrInvalid)
	}
	page := farm.RunJobPage{Jobs: []farm.RunJob{}}
	err := s.db.View(func(tx *bolt.Tx) error {
		idx, jobs := tx.Bucket(bucketRunJobsCreated), tx.Bucket(bucketRunJobs)
		if idx == nil || jobs == nil {
			return nil
		}
		c := idx.Cursor()
		var k []byte
		if q.After == "" {
			k, _ = c.Last()
		} else if k, _ = c.Seek([]byte(q.After)); k == nil {
			k, _ = c.Last()
		} else {
			k, _ = c.Prev() // the first key below After: Seek found one at or above it
		}
		var last []byte
		for ; k != nil; k, _ = c.Prev() {
			if len(page.Jobs) == q.PageSize() {
				page.Next = string(last)
				return nil
			}
			id := k[16:]
			v := jobs.Get(id)
			if v == nil {
				return fmt.Errorf("index entry %q names job %s, which has no record: %w", k, id, farm.ErrInvalid)
			}
			j, err := decode[farm.RunJob]("job "+string(id), v)
			if err != nil {
				return err
			}
			page.Jobs = append(page.Jobs, j)
			last = bytes.Clone(k)
		}
		return nil
	})
	if err != nil {
		return farm.RunJobPage{}, fmt.Errorf("list jobs: %w", s.storageErr(err))
	}
	return page, nil
}

// ListJobNodes reads the job's node bucket from q.After on, in one read
// transaction.
func (s *Store) ListJobNodes(ctx context.Context, q farm.RunJobNodeQuery) (farm.RunJobNodePage, error) {
	if err := farm.CheckListJobNodes(ctx, q); err != nil {
		return farm.RunJobNodePage{}, err
	}
	page := farm.RunJobNodePage{Nodes: []farm.RunJobNode{}}
	err := s.db.View(func(tx *bolt.Tx) error {
		b := jobNodes(tx, q.Job)
		if b == nil {
			return nil
		}
		c := b.Cursor()
		k, v := c.Seek([]byte(q.After))
		for ; k != nil; k, v = c.Next() {
			if string(k) <= q.After {
				continue
			}
			if len(page.Nodes) == q.PageSize() {
				page.Next = page.Nodes[len(page.Nodes)-1].Node
				return nil
			}
			n, err := decode[farm.RunJobNode]("node "+string(k)+" of job "+q.Job, v)
			if err != nil {
				return err
			}
			page.Nodes = append(page.Nodes, n)
		}
		return nil
	})
	if err != nil {
		return farm.RunJobNodePage{}, fmt.Errorf("list nodes of job %s: %w", q.Job, s.storageErr(err))
	}
	return page, nil
}

// Package localstore is the farm's embedded storage: the default driver of
// the content store, node store, environment store, run job store, query
// store, compile queue and outbox, all kept in one data directory (broker
// dev's --data).
//
// Layout of the data directory:
//
//	content/<space>/<first 2 hex>/<digest>   one file per blob, its name the
//	                                         SHA-256 of its bytes
//	state.db                                 bbolt: buckets "nodes"
//	                                         (certname → JSON farm.Node),
//	                                         "environments" (name → JSON
//	                                         farm.Environment), "queue"
//	                                         (8-byte big-endian job ID → JSON
//	                                         job record), "names"
//	                                         ("<space>/<name>" → digest, see
//	                                         farm.NameStore), "node_index"
//	                                         ("<entry>\x00<certname>" → "",
//	                                         see farm.Node.IndexEntries),
//	                                         "reports" (certname → JSON
//	                                         farm.ReportSummary, RecordReport's),
//	                                         "run_jobs", "run_jobs_by_created"
//	                                         and "run_job_nodes" (farm.RunJobStore,
//	                                         see runjobs.go), "queries"
//	                                         ("ENV|DIGEST" → JSON farm.QueryState,
//	                                         see queries.go), "outbox_messages",
//	                                         "outbox_bodies" and "outbox_dead"
//	                                         (farm.Outbox, see outbox.go) and
//	                                         "meta"
//
// Content files are written atomically (a temporary file in the same
// directory, fsync, rename, fsync of the directory) and verified on every
// read. Node, environment, job, queue and outbox changes are bbolt transactions,
// synced before the call returns. One process at a time owns a data directory: Open
// waits for bbolt's file lock (Options.LockTimeout) and fails after it.
package localstore

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"github.com/compilefarm/compilefarm/internal/atomicfile"
	"github.com/compilefarm/compilefarm/pkg/farm"
	"github.com/compilefarm/compilefarm/pkg/jobqueue"
	"github.com/compilefarm/compilefarm/pkg/outboxqueue"
)

var (
	_ farm.ContentStore     = (*Store)(nil)
	_ farm.NodeStore        = (*Store)(nil)
	_ farm.EnvironmentStore = (*Store)(nil)
	_ farm.NameStore        = (*Store)(nil)
	_ farm.Queue            = (*Queue)(nil)
)

// ErrClosed is returned by every method of a closed Store or its Queue.
var ErrClosed = jobqueue.ErrClosed

// DefaultLockTimeout is how long Open waits for another process to release
// the data directory when Options leave it unset.
const DefaultLockTimeout = 5 * time.Second

// schemaVersion is the layout of state.db this code reads and writes.
// Version 1 had no node index; Open builds it and moves such a file to 2.
const schemaVersion = 2

var (
	bucketMeta         = []byte("meta")
	bucketNodes        = []byte("nodes")
	bucketEnvironments = []byte("environments")
	bucketQueue        = []byte("queue")
	bucketNames        = []byte("names")
	bucketNodeIndex    = []byte("node_index")
	keySchema          = []byte("schema")
)

// Options configures Open.
type Options struct {
	// Logger receives what the store does on its own (recovery at Open,
	// timed-out deliveries, replaced corrupt files); slog.Default() when nil.
	Logger *slog.Logger
	// LockTimeout is how long Open waits for the data directory's lock;
	// DefaultLockTimeout when zero.
	LockTimeout time.Duration
}

// Store is the embedded farm storage in one data directory. It implements
// farm.ContentStore, farm.NameStore, farm.NodeStore, farm.EnvironmentStore,
// farm.RunJobStore and farm.QueryStore; Queue returns its durable
// farm.Queue and Outbox its durable farm.Outbox. Safe for concurrent use.
type Store struct {
	dir     string
	content string // dir/content
	db      *bolt.DB
	log     *slog.Logger
	q       *jobqueue.Core
	outbox  *outboxqueue.Core
	closed  atomic.Bool
	nodes   *nodeCache // node records decoded, by node (GetNode, UpdateNode)
}

// Open opens (creating it if needed) the data directory dir. Jobs that were
// in flight when the previous process stopped are waiting again.
func Open(ctx context.Context, dir string, opts Options) (*Store, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("open data dir %s: %w", dir, err)
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.LockTimeout <= 0 {
		opts.LockTimeout = DefaultLockTimeout
	}
	if dl, ok := ctx.Deadline(); ok {
		opts.LockTimeout = max(min(opts.LockTimeout, time.Until(dl)), time.Millisecond)
	}
	s := &Store{dir: dir, content: filepath.Join(dir, "content"), log: opts.Logger, nodes: newNodeCache(nodeCacheEntries)}
	if err := atomicfile.MkdirAll(s.content, 0o750); err != nil {
		return nil, fmt.Errorf("open data dir %s: %w", dir, err)
	}
	dbPath := filepath.Join(dir, "state.db")
	db, err := bolt.Open(dbPath, 0o600, &bolt.Options{Timeout: opts.LockTimeout})
	if errors.Is(err, berrors.ErrTimeout) {
		return nil, fmt.Errorf("open %s: another process holds the data dir (waited %v)", dbPath, opts.LockTimeout)
	}
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", dbPath, err)
	}
	db.MaxBatchDelay = reportBatchDelay
	s.db = db
	if err := s.init(); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("open data dir %s: %w", dir, err)
	}
	return s, nil
}

// init creates the buckets, checks the schema and loads the queue and the
// outbox.
func (s *Store) init() error {
	var (
		jobs     []jobqueue.Stored
		messages []outboxqueue.Stored
		dead     int
	)
	err := s.db.Update(func(tx *bolt.Tx) error {
		meta, err := tx.CreateBucketIfNotExists(bucketMeta)
		if err != nil {
			return err
		}
		v := meta.Get(keySchema)
		upgrade := len(v) == 8 && binary.BigEndian.Uint64(v) == 1
		if v != nil && !upgrade && (len(v) != 8 || binary.BigEndian.Uint64(v) != schemaVersion) {
			return fmt.Errorf("state.db has schema %x, this program reads %d", v, schemaVersion)
		}
		for _, name := range [][]byte{bucketNodes, bucketEnvironments, bucketQueue, bucketNames, bucketNodeIndex} {
			if _, err := tx.CreateBucketIfNotExists(name); err != nil {
				return err
			}
		}
		if upgrade {
			n, err := buildNodeIndex(tx)
			if err != nil {
				return fmt.Errorf("build the node index of schema 1: %w", err)
			}
			s.log.Info("localstore: built the node index (schema 1 to 2)", "nodes", n)
		}
		if err := meta.Put(keySchema, binary.BigEndian.AppendUint64(nil, schemaVersion)); err != nil {
			return err
		}
		err = tx.Bucket(bucketQueue).ForEach(func(k, v []byte) error {
			var j jobqueue.Stored
			if err := json.Unmarshal(v, &j); err != nil || len(k) != 8 || j.ID != binary.BigEndian.Uint64(k) {
				return fmt.Errorf("queue record %x is unreadable (%v): %w", k, err, farm.ErrInvalid)
			}
			jobs = append(jobs, j)
			return nil
		})
		if err != nil {
			return err
		}
		messages, dead, err = loadOutbox(tx)
		return err
	})
	if err != nil {
		return fmt.Errorf("initialise state.db: %w", err)
	}
	s.q = jobqueue.New(s.log, s.persistJobs)
	puts, dels := s.q.Load(jobs)
	if len(puts)+len(dels) > 0 {
		if err := s.persistJobs(puts, dels); err != nil {
			return fmt.Errorf("collapse queued jobs: %w", err)
		}
	}
	s.outbox = outboxqueue.New(outboxBackend{s}, outboxqueue.Options{Logger: s.log, Closed: ErrClosed})
	s.outbox.Load(messages, dead)
	s.log.Info("localstore: opened", "dir", s.dir, "queued_jobs", len(jobs)-len(dels), "collapsed", len(dels),
		"outbox_messages", len(messages), "outbox_dead_letters", dead)
	return nil
}

// Close stops the queue and the outbox (waiting Receives return
// ErrClosed) and closes the database. Closing twice is harmless.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	s.q.Close()
	s.outbox.Close()
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("close %s: %w", s.db.Path(), err)
	}
	return nil
}

// Dir returns the data directory.
func (s *Store) Dir() string { return s.dir }

// storageErr classifies a database or file system failure: ErrClosed after
// Close, otherwise farm.ErrTransient (a full or failing disk may recover).
func (s *Store) storageErr(err error) error {
	if errors.Is(err, berrors.ErrDatabaseNotOpen) || s.closed.Load() {
		return ErrClosed
	}
	if errors.Is(err, farm.ErrInvalid) || errors.Is(err, farm.ErrNotFound) || errors.Is(err, farm.ErrConflict) || errors.Is(err, farm.ErrTransient) {
		return err
	}
	return fmt.Errorf("%w (%w)", err, farm.ErrTransient)
}

func (s *Store) checkOpen() error {
	if s.closed.Load() {
		return ErrClosed
	}
	return nil
}

func jobKey(id uint64) []byte { return binary.BigEndian.AppendUint64(nil, id) }

// persistJobs writes queue changes in one synced transaction.
func (s *Store) persistJobs(puts []jobqueue.Stored, dels []uint64) error {
	err := s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketQueue)
		for _, j := range puts {
			v, err := json.Marshal(j)
			if err != nil {
				return fmt.Errorf("encode job of %s: %v: %w", j.Job.Certname, err, farm.ErrInvalid)
			}
			if err := b.Put(jobKey(j.ID), v); err != nil {
				return err
			}
		}
		for _, id := range dels {
			if err := b.Delete(jobKey(id)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("write queue: %w", s.storageErr(err))
	}
	return nil
}

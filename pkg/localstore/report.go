package localstore

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/compilefarm/compilefarm/pkg/farm"
)

// bucketReports holds the summaries RecordReport records beside the node
// records (certname → farm.ReportSummary JSON). It is made by the first
// RecordReport; a state.db without it has recorded none, and a program
// that does not know it leaves it alone.
var bucketReports = []byte("reports")

// reportBatchDelay is how long RecordReport waits for other reports to
// share its commit (bolt's MaxBatchDelay; RecordReport is the store's only
// Batch). A herd of 170 runs/s commits about 20 times a second instead of
// 100 (bolt's 10 ms default), each commit a page write and an fdatasync.
// An agent sends its report last, so nobody waits for the answer, and the
// heavy admission slot it holds meanwhile is one of 16 per CPU: at 50 ms,
// reports would fill them only at about 600 runs/s per CPU, several times
// what a CPU serves.
const reportBatchDelay = 50 * time.Millisecond

// overlayReport lays the summary recorded for n over its Report, inside a
// read or write transaction.
func overlayReport(tx *bolt.Tx, n *farm.Node) error {
	b := tx.Bucket(bucketReports)
	if b == nil {
		return nil
	}
	v := b.Get([]byte(n.Certname))
	if v == nil {
		return nil
	}
	rec, err := decode[farm.ReportSummary]("report summary of node "+n.Certname, v)
	if err != nil {
		return err
	}
	n.OverlayReport(&rec)
	return nil
}

// RecordReport keeps sum as certname's latest report summary unless the
// one kept is newer (farm.ErrConflict), and returns the one it replaced.
// It writes the reports bucket only: the node's record is not rewritten.
func (s *Store) RecordReport(ctx context.Context, certname string, sum farm.ReportSummary) (*farm.ReportSummary, error) {
	if err := farm.CheckRecordReport(ctx, certname, sum); err != nil {
		return nil, err
	}
	v, err := json.Marshal(sum)
	if err != nil {
		return nil, fmt.Errorf("record report of %s: encode: %v: %w", certname, err, farm.ErrInvalid)
	}
	var prev *farm.ReportSummary
	// Batch: the reports of a herd of agents share commits (and their
	// fsync), at the cost of up to reportBatchDelay per report. It
	// may call the function more than once.
	err = s.db.Batch(func(tx *bolt.Tx) error {
		prev = nil
		key := []byte(certname)
		if tx.Bucket(bucketNodes).Get(key) == nil {
			return farm.ErrNotFound
		}
		b, err := tx.CreateBucketIfNotExists(bucketReports)
		if err != nil {
			return err
		}
		if old := b.Get(key); old != nil {
			p, err := decode[farm.ReportSummary]("report summary of node "+certname, old)
			if err != nil {
				return err
			}
			if sum.At.Before(p.At) {
				return farm.ReportOlder(p, sum)
			}
			prev = &p
		}
		return b.Put(key, v)
	})
	if err != nil {
		return nil, fmt.Errorf("record report of %s: %w", certname, s.storageErr(err))
	}
	return prev, nil
}

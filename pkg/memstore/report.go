package memstore

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/compilefarm/compilefarm/pkg/farm"
)

// reportStore keeps the summaries RecordReport records, beside the node
// records (farm.NodeStore's contract). The zero value is ready.
type reportStore struct {
	mu sync.Mutex
	m  map[string][]byte // certname -> farm.ReportSummary JSON
}

// overlay returns n with its recorded summary laid over its Report.
func (r *reportStore) overlay(n farm.Node) farm.Node {
	r.mu.Lock()
	b, ok := r.m[n.Certname]
	r.mu.Unlock()
	if ok {
		rec := decode[farm.ReportSummary](b)
		n.OverlayReport(&rec)
	}
	return n
}

// RecordReport keeps sum as certname's latest report summary unless the
// one kept is newer (farm.ErrConflict), and returns the one it replaced.
func (s *Store) RecordReport(ctx context.Context, certname string, sum farm.ReportSummary) (*farm.ReportSummary, error) {
	if err := farm.CheckRecordReport(ctx, certname, sum); err != nil {
		return nil, err
	}
	b, err := json.Marshal(sum)
	if err != nil {
		return nil, fmt.Errorf("record report of %s: encode: %v: %w", certname, err, farm.ErrInvalid)
	}
	s.nodeMu.RLock()
	_, known := s.nodes[certname]
	s.nodeMu.RUnlock()
	if !known { // records are never deleted: it cannot vanish below
		return nil, fmt.Errorf("record report of %s: %w", certname, farm.ErrNotFound)
	}
	r := &s.reports
	r.mu.Lock()
	defer r.mu.Unlock()
	var prev *farm.ReportSummary
	if old, ok := r.m[certname]; ok {
		p := decode[farm.ReportSummary](old)
		if sum.At.Before(p.At) {
			return nil, fmt.Errorf("record report of %s: %w", certname, farm.ReportOlder(p, sum))
		}
		prev = &p
	}
	if r.m == nil {
		r.m = map[string][]byte{}
	}
	r.m[certname] = b
	return prev, nil
}

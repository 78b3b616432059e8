package farm

import (
	"fmt"
	"time"
)

// ReportMetrics is the part of a Puppet report's metrics the farm keeps in
// a ReportSummary: enough to tell a run that did nothing from one that
// changed, failed or drifted, without the full report.
type ReportMetrics struct {
	Resources  int     `json:"resources"`             // resources managed (resources.total)
	Changed    int     `json:"changed,omitempty"`     // resources changed
	OutOfSync  int     `json:"out_of_sync,omitempty"` // resources out of sync (noop runs count them here)
	Failed     int     `json:"failed,omitempty"`      // resources that failed
	Corrective int     `json:"corrective,omitempty"`  // changes that corrected drift (corrective_change)
	Seconds    float64 `json:"seconds"`               // the run's total time (time.total)
}

// OverlayReport makes rec, a summary NodeStore.RecordReport kept, the
// node's Report unless the record's own Report is newer: how every driver
// presents the two as one on reads. A nil rec changes nothing.
func (n *Node) OverlayReport(rec *ReportSummary) {
	if rec == nil || (n.Report != nil && rec.At.Before(n.Report.At)) {
		return
	}
	c := *rec
	if c.Metrics != nil {
		m := *c.Metrics
		c.Metrics = &m
	}
	n.Report = &c
}

// ReportOlder is the error of a RecordReport that keeps nothing because
// the node's recorded summary kept is newer than sum: it wraps ErrConflict.
func ReportOlder(kept, sum ReportSummary) error {
	return fmt.Errorf("the report of %s is older than the one recorded, of %s: %w",
		sum.At.UTC().Format(time.RFC3339Nano), kept.At.UTC().Format(time.RFC3339Nano), ErrConflict)
}

// Validate checks what NodeStore.RecordReport needs of a summary: its
// time, by which the newer report wins. The error wraps ErrInvalid.
func (r ReportSummary) Validate() error {
	if r.At.IsZero() {
		return fmt.Errorf("report summary without a time: %w", ErrInvalid)
	}
	return nil
}

package frontdoor

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/compilefarm/compilefarm/pkg/farm"
)

// ReportPolicy says which agent reports the front door keeps whole in the
// content store (an S3 PUT on AWS). Of every report it keeps a summary on
// the node (farm.NodeStore.RecordReport, one small write); the full report
// of a run is kept when it is worth reading later:
//
//   - the run changed something, failed, has pending noop changes, or
//     applied a cached catalog because the farm failed it (judged from the
//     report itself);
//   - it is the node's first report, the first after a new catalog, or the
//     first after a failed run (judged from the summary it replaces, which
//     RecordReport returns at no read cost);
//   - and, so that every node has a recent full report, one unchanged run
//     about every Every (judged from the node and the report's time, see
//     InSlot).
//
// A steady-state run (unchanged, same catalog, outside its slot) costs one
// write and no PUT.
type ReportPolicy struct {
	// Every is how often an unchanged run is kept anyway, per node: the run
	// whose time falls in the node's slot. Default 24h; negative: never.
	Every time.Duration
	// Slot is the width of that slot. It should be the agents' run
	// interval (Puppet's runinterval, default 30m), so that about one run
	// per Every falls in it. Default 30m.
	Slot time.Duration
}

// Reasons a full report is kept.
const (
	KeepChanged   = "changed"        // the run changed something
	KeepFailed    = "failed"         // the run failed
	KeepNoop      = "noop-pending"   // a noop run found changes to make
	KeepCached    = "cached-catalog" // the agent applied its cached catalog after a failure
	KeepPeriodic  = "periodic"       // the node's slot: one unchanged run per Every
	KeepFirst     = "first"          // the node's first recorded report
	KeepCatalog   = "new-catalog"    // the first report of another catalog
	KeepRecovered = "recovered"      // the first report after a failed run
)

func (p ReportPolicy) every() time.Duration {
	if p.Every == 0 {
		return 24 * time.Hour
	}
	return p.Every
}

func (p ReportPolicy) slot() time.Duration {
	if p.Slot <= 0 {
		return 30 * time.Minute
	}
	return p.Slot
}

// InSlot reports whether at falls in certname's slot: the Slot-wide window
// that starts once every Every, at an offset of the node's own (from a
// hash of its name), so that a fleet's periodic full reports spread
// evenly over the period instead of all arriving at midnight.
func (p ReportPolicy) InSlot(certname string, at time.Time) bool {
	every := p.every()
	if every < 0 {
		return false
	}
	e := uint64(every)
	h := sha256.Sum256([]byte(certname))
	offset := binary.BigEndian.Uint64(h[:8]) % e
	phase := (uint64(at.UnixNano())%e + e - offset) % e
	return time.Duration(phase) < p.slot()
}

// keepBefore returns why the run's full report is kept, judged from the
// report alone, before its summary is recorded; "" when that cannot tell.
func (p ReportPolicy) keepBefore(certname string, h reportHeader, at time.Time) string {
	switch {
	case h.Status == "changed":
		return KeepChanged
	case h.Status == "failed":
		return KeepFailed
	case h.NoopPending:
		return KeepNoop
	case h.CachedCatalogStatus == "on_failure":
		return KeepCached
	case p.InSlot(certname, at):
		return KeepPeriodic
	}
	return ""
}

// keepAfter returns why the run's full report is kept, judged from the
// summary its own replaced (nil when it is the first); "" when it is not.
func keepAfter(prev *farm.ReportSummary, sum farm.ReportSummary) string {
	switch {
	case prev == nil:
		return KeepFirst
	case prev.CatalogUUID != sum.CatalogUUID:
		return KeepCatalog
	case prev.Status == "failed":
		return KeepRecovered
	}
	return ""
}

// reportHeader is the part of a Puppet report (format 12) the farm reads.
type reportHeader struct {
	Host                string                  `json:"host"`
	Time                string                  `json:"time"`
	Status              string                  `json:"status"`
	ConfigVersion       any                     `json:"configuration_version"`
	CatalogUUID         string                  `json:"catalog_uuid"`
	TransactionUUID     string                  `json:"transaction_uuid"`
	Environment         string                  `json:"environment"`
	NoopPending         bool                    `json:"noop_pending"`
	CachedCatalogStatus string                  `json:"cached_catalog_status"`
	Metrics             map[string]reportMetric `json:"metrics"`
}

// reportMetric is one of a report's metric groups: rows of name, label and
// value.
type reportMetric struct {
	Values [][]any `json:"values"`
}

// value returns the named row's value of the group (0 when absent).
func (m reportMetric) value(name string) float64 {
	for _, row := range m.Values {
		if len(row) == 3 && row[0] == name {
			if v, ok := row[2].(float64); ok {
				return v
			}
		}
	}
	return 0
}

// summary is what the farm keeps of the report on the node (no Digest:
// that is set when the full report is stored).
func (h reportHeader) summary() farm.ReportSummary {
	at, err := time.Parse(time.RFC3339Nano, h.Time)
	if err != nil {
		at = time.Now()
	}
	sum := farm.ReportSummary{Status: h.Status, At: at, CatalogUUID: h.CatalogUUID, TransactionUUID: h.TransactionUUID}
	switch v := h.ConfigVersion.(type) {
	case nil:
	case float64: // a timestamp, as Puppet's default config_version is: no exponent
		sum.ConfigVersion = strconv.FormatFloat(v, 'f', -1, 64)
	default:
		sum.ConfigVersion = fmt.Sprint(v)
	}
	if res, ok := h.Metrics["resources"]; ok {
		sum.Metrics = &farm.ReportMetrics{
			Resources: int(res.value("total")), Changed: int(res.value("changed")), OutOfSync: int(res.value("out_of_sync")),
			Failed: int(res.value("failed")), Corrective: int(res.value("corrective_change")),
			Seconds: h.Metrics["time"].value("total"),
		}
	}
	return sum
}

// putReport keeps the report's summary on the node and, when it is worth
// keeping (ReportPolicy), the report itself.
func (s *Server) putReport(w http.ResponseWriter, r *http.Request) {
	ctx, name := r.Context(), r.PathValue("name")
	body, err := readBody(r, s.MaxReport)
	if err != nil {
		s.apiError(w, r, err)
		return
	}
	var h reportHeader
	if err := json.Unmarshal(body, &h); err != nil {
		s.apiError(w, r, fmt.Errorf("report from %s is not JSON: %v: %w", name, err, farm.ErrInvalid))
		return
	}
	if h.Host != name {
		s.apiError(w, r, fmt.Errorf("report host %q does not match node %q: %w", h.Host, name, farm.ErrInvalid))
		return
	}
	switch h.Status {
	case "changed", "unchanged", "failed":
	default:
		s.apiError(w, r, fmt.Errorf("report status %q is not changed, unchanged or failed: %w", h.Status, farm.ErrInvalid))
		return
	}
	sum := h.summary()
	kept := s.Reports.keepBefore(name, h, sum.At)
	if kept != "" {
		if sum.Digest, err = s.storeReport(ctx, name, body); err != nil {
			s.apiError(w, r, err)
			return
		}
	}
	prev, err := s.Nodes.RecordReport(ctx, name, sum)
	switch {
	case errors.Is(err, farm.ErrConflict):
		// An older report arriving late: the node keeps the newer summary.
		s.log().Info("report older than the node's latest: not recorded", "node", name, "time", sum.At, "stored", sum.Digest != "")
		writeStored(w)
		return
	case errors.Is(err, farm.ErrNotFound):
		// A node that never asked for a catalog (puppet apply sending its
		// reports here): keep the report and make the record.
		err = s.recordFirstReport(ctx, name, body, &sum)
		kept = KeepFirst
	case err == nil && kept == "":
		if kept = keepAfter(prev, sum); kept != "" {
			err = s.keepAfterAll(ctx, name, body, &sum)
		}
	}
	if err != nil {
		s.apiError(w, r, fmt.Errorf("record report of %s: %w", name, err))
		return
	}
	if kept != "" {
		s.log().Info("report stored", "node", name, "status", h.Status, "kept", kept, "digest", sum.Digest)
	} else {
		s.log().Debug("report summarised", "node", name, "status", h.Status)
	}
	writeStored(w)
}

func writeStored(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "application/json;charset=utf-8")
	w.Write([]byte(`["store"]`))
}

func (s *Server) storeReport(ctx context.Context, name string, body []byte) (farm.Digest, error) {
	d, err := s.Content.Put(ctx, farm.SpaceReports, body)
	if err != nil {
		return "", fmt.Errorf("store report of %s: %w", name, err)
	}
	return d, nil
}

// keepAfterAll stores the full report that the replaced summary showed
// worth keeping, and records the summary again with its digest (a second
// write, in runs that are not steady state: a node's first, a new
// catalog's first, the first after a failure).
func (s *Server) keepAfterAll(ctx context.Context, name string, body []byte, sum *farm.ReportSummary) error {
	d, err := s.storeReport(ctx, name, body)
	if err != nil {
		return err
	}
	sum.Digest = d
	if _, err := s.Nodes.RecordReport(ctx, name, *sum); err != nil && !errors.Is(err, farm.ErrConflict) {
		return err // a newer report in between keeps its own summary
	}
	return nil
}

// recordFirstReport stores the report of a node without a record, makes
// the record, and records the summary.
func (s *Server) recordFirstReport(ctx context.Context, name string, body []byte, sum *farm.ReportSummary) error {
	if sum.Digest == "" {
		d, err := s.storeReport(ctx, name, body)
		if err != nil {
			return err
		}
		sum.Digest = d
	}
	if _, err := s.Nodes.UpdateNode(ctx, name, func(n *farm.Node) error { return nil }); err != nil {
		return err
	}
	if _, err := s.Nodes.RecordReport(ctx, name, *sum); err != nil && !errors.Is(err, farm.ErrConflict) {
		return err
	}
	return nil
}

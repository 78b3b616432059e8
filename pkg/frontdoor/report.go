package frontdoor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/compilefarm/compilefarm/internal/jsonscan"
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
// that starts once every Every, at an offset of the node's own
// (farm.InSlot).
func (p ReportPolicy) InSlot(certname string, at time.Time) bool {
	return farm.InSlot(certname, at, p.every(), p.slot())
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

// reportHeader is the part of a Puppet report (format 12) the farm reads
// (scanReport).
type reportHeader struct {
	Host                string
	Time                string
	Status              string
	ConfigVersion       any // as encoding/json decodes it: string, float64, ...
	CatalogUUID         string
	TransactionUUID     string
	Environment         string
	NoopPending         bool
	CachedCatalogStatus string
	// Metrics are the metric groups the summary reads (summaryMetrics).
	Metrics map[string]reportMetric
}

// reportMetric is one of a report's metric groups, whose rows are
// [name, label, value]: the numeric values by name (the first row of a
// name).
type reportMetric map[string]float64

// value returns the named row's value of the group (0 when absent).
func (m reportMetric) value(name string) float64 { return m[name] }

// reportFields are the report's fields scanReport decodes, each into its
// field of reportHeader as encoding/json decodes it.
var reportFields = map[string]func(h *reportHeader) any{
	"host":                  func(h *reportHeader) any { return &h.Host },
	"time":                  func(h *reportHeader) any { return &h.Time },
	"status":                func(h *reportHeader) any { return &h.Status },
	"configuration_version": func(h *reportHeader) any { return &h.ConfigVersion },
	"catalog_uuid":          func(h *reportHeader) any { return &h.CatalogUUID },
	"transaction_uuid":      func(h *reportHeader) any { return &h.TransactionUUID },
	"environment":           func(h *reportHeader) any { return &h.Environment },
	"noop_pending":          func(h *reportHeader) any { return &h.NoopPending },
	"cached_catalog_status": func(h *reportHeader) any { return &h.CachedCatalogStatus },
}

// summaryMetrics are the metric groups the summary reads.
var summaryMetrics = []string{"resources", "time"}

// scanReport reads the report's header from its JSON without decoding the
// rest: a report is mostly resource_statuses and logs (330 KB for a
// catalog of 300 resources), of which a summary reads nothing, and
// encoding/json would validate and build all of it (~4 ms of CPU). Those
// are skipped (jsonscan: their structure is checked, their contents are
// not); the fields the farm reads are decoded as encoding/json decodes
// them, and of the metrics the rows of the groups the summary reads. A
// report stored whole is stored as sent: the farm never reads it back.
func scanReport(body []byte) (reportHeader, error) {
	var h reportHeader
	var err error
	keep := func(e error) {
		if err == nil {
			err = e
		}
	}
	s := jsonscan.New(body)
	s.Object(func(key []byte) {
		if key := string(key); key == "metrics" {
			h.Metrics = scanMetrics(s, h.Metrics, keep)
		} else if field, ok := reportFields[key]; ok {
			if e := scanField(s, field(&h)); e != nil {
				keep(fmt.Errorf("field %s: %w", key, e))
			}
		} else {
			s.Skip()
		}
	})
	s.End()
	if s.Err() != nil {
		return reportHeader{}, s.Err()
	}
	return h, err
}

// scanField decodes the next value into v as encoding/json does: a plain
// string (no escapes nor control characters, valid UTF-8) into a *string
// directly, anything else by encoding/json.
func scanField(s *jsonscan.Scanner, v any) error {
	raw := s.Raw()
	if raw == nil {
		return nil // s.Err says why
	}
	if p, ok := v.(*string); ok && len(raw) >= 2 && raw[0] == '"' && plainString(raw[1:len(raw)-1]) {
		*p = string(raw[1 : len(raw)-1])
		return nil
	}
	return json.Unmarshal(raw, v)
}

// plainString reports whether b, the content of a JSON string, means
// itself: no escapes, no control characters, valid UTF-8.
func plainString(b []byte) bool {
	for _, c := range b {
		if c == '\\' || c < 0x20 {
			return false
		}
	}
	return utf8.Valid(b)
}

// scanMetrics reads the report's metrics object (null: none): the groups
// the summary reads into m (made when nil), the others skipped. Such a
// group must be an object (or null) whose values are an array of arrays,
// else the scanner fails; a row value that is not a float64 goes to fail.
func scanMetrics(s *jsonscan.Scanner, m map[string]reportMetric, fail func(error)) map[string]reportMetric {
	if s.Peek() == 'n' {
		s.Skip()
		return m
	}
	s.Object(func(group []byte) {
		if !slices.Contains(summaryMetrics, string(group)) {
			s.Skip()
			return
		}
		if m == nil {
			m = map[string]reportMetric{}
		}
		g := reportMetric{}
		m[string(group)] = g
		if s.Peek() == 'n' {
			s.Skip()
			return
		}
		s.Object(func(key []byte) {
			if string(key) != "values" {
				s.Skip()
				return
			}
			if s.Peek() == 'n' {
				s.Skip()
				return
			}
			s.Array(func() { scanMetricRow(s, g, fail) })
		})
	})
	return m
}

// scanMetricRow reads one row of a metric group into g: its value by its
// name when it is [name, label, number] and the name is new.
func scanMetricRow(s *jsonscan.Scanner, g reportMetric, fail func(error)) {
	if s.Peek() == 'n' {
		s.Skip()
		return
	}
	var name []byte
	var value float64
	named, numeric, n := false, false, 0
	s.Array(func() {
		switch c := s.Peek(); {
		case n == 0 && c == '"':
			name, named = s.String(), true
		case n == 2 && (c == '-' || c >= '0' && c <= '9'):
			raw := s.Raw()
			v, err := strconv.ParseFloat(string(raw), 64)
			if err != nil {
				fail(fmt.Errorf("metric value %s is not a number", raw))
			}
			value, numeric = v, true
		default:
			s.Skip()
		}
		n++
	})
	if n == 3 && named && numeric {
		if _, ok := g[string(name)]; !ok {
			g[string(name)] = value
		}
	}
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
// keeping (ReportPolicy), the report itself. The body is read into a
// pooled buffer (bodyBuffers), reused unless the content store was given
// it.
func (s *Server) putReport(w http.ResponseWriter, r *http.Request) {
	buf := bodyBuffers.Get().(*[]byte)
	body, err := readBodyInto(r, s.MaxReport, *buf)
	if err != nil {
		s.apiError(w, r, err)
		return
	}
	if !s.takeReport(w, r, body) {
		recycleBody(buf, body)
	}
}

// takeReport answers a report whose body was read; it returns whether the
// content store was given body (which it may hold on to).
func (s *Server) takeReport(w http.ResponseWriter, r *http.Request, body []byte) (stored bool) {
	ctx, name := r.Context(), r.PathValue("name")
	h, err := scanReport(body)
	if err != nil {
		s.apiError(w, r, fmt.Errorf("report from %s is not a JSON report: %v: %w", name, err, farm.ErrInvalid))
		return false
	}
	if h.Host != name {
		s.apiError(w, r, fmt.Errorf("report host %q does not match node %q: %w", h.Host, name, farm.ErrInvalid))
		return false
	}
	switch h.Status {
	case "changed", "unchanged", "failed":
	default:
		s.apiError(w, r, fmt.Errorf("report status %q is not changed, unchanged or failed: %w", h.Status, farm.ErrInvalid))
		return false
	}
	sum := h.summary()
	// kept is set before every storeReport: stored is kept != "".
	kept := s.Reports.keepBefore(name, h, sum.At)
	if kept != "" {
		if sum.Digest, err = s.storeReport(ctx, name, body); err != nil {
			s.reportToPuppetDB(ctx, name, body, sum, false)
			s.apiError(w, r, err)
			return true
		}
	}
	prev, err := s.Nodes.RecordReport(ctx, name, sum)
	// PuppetDB gets every report, and the catalog it names when the node
	// had not reported it before (the replaced summary says so for free).
	s.reportToPuppetDB(ctx, name, body, sum, errors.Is(err, farm.ErrNotFound) ||
		(err == nil && (prev == nil || prev.CatalogUUID != sum.CatalogUUID)))
	switch {
	case errors.Is(err, farm.ErrConflict):
		// An older report arriving late: the node keeps the newer summary.
		s.log().Info("report older than the node's latest: not recorded", "node", name, "time", sum.At, "stored", sum.Digest != "")
		writeStored(w)
		return kept != ""
	case errors.Is(err, farm.ErrNotFound):
		// A node that never asked for a catalog (puppet apply sending its
		// reports here): keep the report and make the record.
		kept = KeepFirst
		err = s.recordFirstReport(ctx, name, body, &sum)
	case err == nil && kept == "":
		if kept = keepAfter(prev, sum); kept != "" {
			err = s.keepAfterAll(ctx, name, body, &sum)
		}
	}
	if err != nil {
		s.apiError(w, r, fmt.Errorf("record report of %s: %w", name, err))
		return kept != ""
	}
	if kept != "" {
		s.log().Info("report stored", "node", name, "status", h.Status, "kept", kept, "digest", sum.Digest)
	} else {
		s.log().Debug("report summarised", "node", name, "status", h.Status)
	}
	writeStored(w)
	return kept != ""
}

// reportToPuppetDB tells the PuppetDB sink, if any, of a report.
func (s *Server) reportToPuppetDB(ctx context.Context, name string, body []byte, sum farm.ReportSummary, newCatalog bool) {
	if s.PuppetDB != nil {
		s.PuppetDB.Report(ctx, name, body, sum, newCatalog)
	}
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

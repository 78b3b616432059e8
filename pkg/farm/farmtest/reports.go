package farmtest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/compilefarm/compilefarm/pkg/farm"
)

// TestNodeReports checks the report half of the farm.NodeStore contract:
// RecordReport, and how every read lays the summary it kept over the
// record's own Report. newStore returns a fresh, empty store for each
// subtest.
func TestNodeReports(t *testing.T, newStore func(t *testing.T) farm.NodeStore) {
	t.Helper()
	tests := []struct {
		name string
		run  func(t *testing.T, s farm.NodeStore)
	}{
		{"UnknownNodeIsNotFound", reportUnknownNode},
		{"ReturnsTheSummaryReplaced", reportReturnsReplaced},
		{"NewerReportWins", reportNewerWins},
		{"ReadsShowTheNewerOfRecordAndRecorded", reportOverlay},
		{"UpdateNodeKeepsTheRecorded", reportSurvivesUpdate},
		{"ConcurrentWithUpdateNode", reportConcurrentWithUpdate},
		{"ReturnedSummariesAreCopies", reportCopies},
		{"InvalidIsInvalid", reportInvalid},
		{"EndedContextChangesNothing", reportEndedContext},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.run(t, newStore(t)) })
	}
}

// summaryAt is a summary with every field set (found by reflection, so a
// driver that drops a field added later fails), at base plus d.
func summaryAt(d time.Duration) farm.ReportSummary {
	var s farm.ReportSummary
	fillAll(&s)
	s.At = base.Add(d)
	s.Status = fmt.Sprintf("unchanged-%d", d)
	return normalize(s)
}

func wantSummary(t *testing.T, what string, got *farm.ReportSummary, want *farm.ReportSummary) {
	t.Helper()
	switch {
	case got == nil && want == nil:
		return
	case got == nil || want == nil:
		t.Fatalf("%s: got %+v, want %+v", what, got, want)
	}
	g, w := normalize(*got), normalize(*want)
	wantNode(t, what, farm.Node{Certname: "summary", Report: &g}, farm.Node{Certname: "summary", Report: &w})
}

// record calls RecordReport and fails the test on an error.
func record(t *testing.T, s farm.NodeStore, certname string, sum farm.ReportSummary) *farm.ReportSummary {
	t.Helper()
	prev, err := s.RecordReport(ctxFor(t, waitLong), certname, sum)
	must(t, "record report at "+sum.At.String(), err)
	return prev
}

func getReport(t *testing.T, s farm.NodeStore, certname string) *farm.ReportSummary {
	t.Helper()
	n, err := s.GetNode(ctxFor(t, waitLong), certname)
	must(t, "get node", err)
	return n.Report
}

func reportUnknownNode(t *testing.T, s farm.NodeStore) {
	ctx := ctxFor(t, waitLong)
	const c = "nobody.example.com"
	_, err := s.RecordReport(ctx, c, summaryAt(0))
	wantErrIs(t, "record report of an unknown node", err, farm.ErrNotFound)
	_, err = s.GetNode(ctx, c)
	wantErrIs(t, "get node after recording its report failed", err, farm.ErrNotFound)
	putNode(t, s, farm.Node{Certname: c, Environment: "production"})
	wantSummary(t, "report of the node created afterwards", getReport(t, s, c), nil)
}

func reportReturnsReplaced(t *testing.T, s farm.NodeStore) {
	const c = "web01.example.com"
	putNode(t, s, farm.Node{Certname: c, Environment: "production"})
	first, second := summaryAt(time.Minute), summaryAt(2*time.Minute)
	wantSummary(t, "RecordReport's return for the first report", record(t, s, c, first), nil)
	wantSummary(t, "RecordReport's return for the second report", record(t, s, c, second), &first)
	wantSummary(t, "the node's report", getReport(t, s, c), &second)
}

// reportNewerWins: an older report arriving late is refused; one as old
// replaces (the front door records a summary again once it has stored the
// full report).
func reportNewerWins(t *testing.T, s farm.NodeStore) {
	ctx := ctxFor(t, waitLong)
	const c = "late.example.com"
	putNode(t, s, farm.Node{Certname: c, Environment: "production"})
	newer, older := summaryAt(time.Hour), summaryAt(time.Minute)
	record(t, s, c, newer)
	prev, err := s.RecordReport(ctx, c, older)
	wantErrIs(t, "record an older report", err, farm.ErrConflict)
	if prev != nil {
		t.Fatalf("a refused RecordReport returned %+v", prev)
	}
	wantSummary(t, "report after an older one was refused", getReport(t, s, c), &newer)

	again := newer
	again.Digest = farm.DigestOf([]byte("the full report, stored after all"))
	wantSummary(t, "RecordReport's return for a report as old", record(t, s, c, again), &newer)
	wantSummary(t, "report after one as old", getReport(t, s, c), &again)
}

// reportOverlay: reads show the newer of the record's own Report (written
// by UpdateNode) and the recorded summary; RecordReport's condition and
// return concern recorded summaries only.
func reportOverlay(t *testing.T, s farm.NodeStore) {
	ctx := ctxFor(t, waitLong)
	const c = "db01.example.com"
	own := summaryAt(time.Minute)
	n := fullNode(c)
	n.Report = &own
	putNode(t, s, n)
	wantSummary(t, "report of the record", getReport(t, s, c), &own)

	rec := summaryAt(2 * time.Minute)
	wantSummary(t, "RecordReport's return over a record's own report", record(t, s, c, rec), nil)
	got, err := s.GetNode(ctx, c)
	must(t, "get node", err)
	want := fullNode(c)
	want.Report = &rec
	wantNode(t, "node with its recorded report", got, want)
	page, err := s.QueryNodes(ctx, farm.NodeQuery{Environment: want.Environment})
	must(t, "query nodes", err)
	if len(page.Nodes) != 1 {
		t.Fatalf("query of the node's environment returned %d nodes", len(page.Nodes))
	}
	wantNode(t, "queried node with its recorded report", page.Nodes[0], want)

	// A newer report in the record wins, until the recorded one is newer.
	newest := summaryAt(3 * time.Minute)
	_, err = s.UpdateNode(ctx, c, func(n *farm.Node) error { n.Report = &newest; return nil })
	must(t, "update node with a newer report", err)
	wantSummary(t, "report after UpdateNode wrote a newer one", getReport(t, s, c), &newest)
	_, err = s.UpdateNode(ctx, c, func(n *farm.Node) error { n.Report = nil; return nil })
	must(t, "update node clearing its report", err)
	wantSummary(t, "report after UpdateNode cleared the record's", getReport(t, s, c), &rec)
	// The same time: the recorded summary.
	same := rec
	same.Status = "the record's"
	_, err = s.UpdateNode(ctx, c, func(n *farm.Node) error { n.Report = &same; return nil })
	must(t, "update node with a report as old", err)
	wantSummary(t, "report when record and recorded are as old", getReport(t, s, c), &rec)
}

// reportSurvivesUpdate: UpdateNode after RecordReport keeps the recorded
// summary, and RecordReport leaves the record alone.
func reportSurvivesUpdate(t *testing.T, s farm.NodeStore) {
	ctx := ctxFor(t, waitLong)
	const c = "app01.example.com"
	want := fullNode(c)
	want.Report = nil
	putNode(t, s, want)
	rec := summaryAt(time.Hour)
	record(t, s, c, rec)
	_, err := s.UpdateNode(ctx, c, func(n *farm.Node) error {
		n.RequestSeq++
		n.Report = nil // whatever fn saw: the recorded summary is not the record's
		return nil
	})
	must(t, "update node", err)
	got, err := s.GetNode(ctx, c)
	must(t, "get node", err)
	want.RequestSeq++
	want.Report = &rec
	wantNode(t, "node after RecordReport and UpdateNode", got, want)
}

// reportConcurrentWithUpdate: reports recorded while the record is updated
// make no UpdateNode fail or lose an update, and the newest report wins.
func reportConcurrentWithUpdate(t *testing.T, s farm.NodeStore) {
	ctx := ctxFor(t, 5*waitLong)
	const c = "busy.example.com"
	putNode(t, s, farm.Node{Certname: c, Environment: "production"})
	const each = 20
	var wg sync.WaitGroup
	errs := make(chan error, 4*each)
	for i := range each {
		wg.Go(func() {
			if _, err := s.UpdateNode(ctx, c, func(n *farm.Node) error { n.RequestSeq++; return nil }); err != nil {
				errs <- fmt.Errorf("update node: %w", err)
			}
		})
		wg.Go(func() {
			// Reports may arrive out of order: a refused older one is fine.
			if _, err := s.RecordReport(ctx, c, summaryAt(time.Duration(i+1)*time.Second)); err != nil && !isConflict(err) {
				errs <- fmt.Errorf("record report %d: %w", i+1, err)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	n, err := s.GetNode(ctx, c)
	must(t, "get node", err)
	if n.RequestSeq != each {
		t.Fatalf("RequestSeq after %d updates beside %d reports = %d", each, each, n.RequestSeq)
	}
	last := summaryAt(each * time.Second)
	wantSummary(t, "report after concurrent reports", n.Report, &last)
}

func isConflict(err error) bool { return errors.Is(err, farm.ErrConflict) }

func reportCopies(t *testing.T, s farm.NodeStore) {
	const c = "copy.example.com"
	putNode(t, s, farm.Node{Certname: c, Environment: "production"})
	first := summaryAt(time.Minute)
	record(t, s, c, first)
	prev := record(t, s, c, summaryAt(2*time.Minute))
	prev.Metrics.Resources = 1000
	got := getReport(t, s, c)
	got.Metrics.Changed = 2000
	want := summaryAt(2 * time.Minute)
	wantSummary(t, "report after changing what reads returned", getReport(t, s, c), &want)
	wantSummary(t, "the replaced summary, untouched by the store", record(t, s, c, summaryAt(3*time.Minute)), &want)
}

func reportInvalid(t *testing.T, s farm.NodeStore) {
	ctx := ctxFor(t, waitLong)
	for _, c := range []string{"", "Upper.example.com", "../etc"} {
		_, err := s.RecordReport(ctx, c, summaryAt(0))
		wantErrIs(t, fmt.Sprintf("record report of %q", c), err, farm.ErrInvalid)
	}
	const c = "timeless.example.com"
	putNode(t, s, farm.Node{Certname: c, Environment: "production"})
	_, err := s.RecordReport(ctx, c, farm.ReportSummary{Status: "unchanged"})
	wantErrIs(t, "record a report without a time", err, farm.ErrInvalid)
	wantSummary(t, "report after refused records", getReport(t, s, c), nil)
}

// reportEndedContext: a RecordReport whose context has ended returns its
// error and keeps nothing.
func reportEndedContext(t *testing.T, s farm.NodeStore) {
	const c = "ended.example.com"
	putNode(t, s, farm.Node{Certname: c, Environment: "production"})
	ended, cancel := context.WithCancel(ctxFor(t, waitLong))
	cancel()
	_, err := s.RecordReport(ended, c, summaryAt(0))
	wantErrIs(t, "record a report with an ended context", err, context.Canceled)
	wantSummary(t, "report after a record with an ended context", getReport(t, s, c), nil)
}

package metrics

import (
	"testing"
	"time"
)

// TestQueryRefresh: a round's numbers land in their series; a nil
// *QueryRefresh (no metrics) takes every call.
func TestQueryRefresh(t *testing.T) {
	var none *QueryRefresh
	none.Ran(QueryChanged)
	none.Queued(3)
	none.Round(1, 1, time.Second)

	m := New(nil)
	q := m.QueryRefresh()
	q.Ran(QueryChanged)
	q.Ran(QueryUnchanged)
	q.Ran(QueryUnchanged)
	q.Queued(3)
	q.Queued(0)
	q.Round(7, 3, 2*time.Second)
	mfs, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, s := range mf.Metric {
			name := mf.GetName()
			for _, l := range s.Label {
				name += "{" + l.GetValue() + "}"
			}
			switch {
			case s.Gauge != nil:
				got[name] = s.Gauge.GetValue()
			case s.Counter != nil:
				got[name] = s.Counter.GetValue()
			case s.Histogram != nil:
				got[name] = s.Histogram.GetSampleSum()
			}
		}
	}
	for name, want := range map[string]float64{
		"compilefarm_puppetdb_queries":                     7,
		"compilefarm_puppetdb_query_refresh_last_runs":     3,
		"compilefarm_puppetdb_query_runs_total{changed}":   1,
		"compilefarm_puppetdb_query_runs_total{unchanged}": 2,
		"compilefarm_puppetdb_query_refresh_seconds":       2,
		"compilefarm_puppetdb_query_nodes_queued_total":    3,
	} {
		if got[name] != want {
			t.Errorf("%s = %v, want %v", name, got[name], want)
		}
	}
}

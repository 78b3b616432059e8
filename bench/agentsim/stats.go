package main

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/compilefarm/compilefarm/bench/internal/latency"
)

// kind is a type of request an agent run sends.
type kind int

const (
	kindNode          kind = iota // GET node/NAME
	kindFileMetadatas             // pluginsync: GET file_metadatas/{plugins,pluginfacts,locales}
	kindCatalog                   // POST catalog/NAME
	kindFileMetadata              // GET file_metadata(s) for the catalog's puppet:/// sources
	kindReport                    // PUT report/NAME
	numKinds
)

var kindNames = [numKinds]string{"node", "file_metadatas", "catalog", "file_metadata", "report"}

func (k kind) String() string { return kindNames[k] }

// runRecord is what one agent run measured; the run's goroutine owns it.
type runRecord struct {
	start, end      time.Time
	lag             time.Duration // how late the run started (a full --concurrency)
	lat             [numKinds][]time.Duration
	failed          [numKinds]int
	err             error // the first request that failed for good
	retries503      int
	retries429      int
	retrySleep      time.Duration
	conns           atomic.Int32 // TLS connections opened
	catalogAttempts int          // catalog requests sent, retries included
	catalogWire     int          // bytes of the catalog answer as sent
	catalogJSON     int          // ... decoded
	reportBytes     int
	catalogReqBytes int // the catalog request's body
	interrupted     bool
}

func (r *runRecord) fail(k kind, err error) {
	r.failed[k]++
	if r.err == nil {
		r.err = err
	}
}

// reservoir keeps a uniform sample of at most reservoirCap durations
// (Vitter's algorithm R), so a long steady run stays bounded in memory.
type reservoir struct {
	d    []time.Duration
	seen int64
	rng  *rand.Rand
}

const reservoirCap = 1 << 20

func (r *reservoir) add(d time.Duration) {
	r.seen++
	if len(r.d) < reservoirCap {
		r.d = append(r.d, d)
		return
	}
	if r.rng == nil {
		r.rng = rand.New(rand.NewPCG(1, 2))
	}
	if i := r.rng.Int64N(r.seen); i < reservoirCap {
		r.d[i] = d
	}
}

// maxErrors is how many failed runs' errors a round keeps.
const maxErrors = 5

// roundStats gathers the runs of one round; safe for concurrent use.
type roundStats struct {
	running atomic.Int64 // runs under way, for progress lines
	done    atomic.Int64 // runs finished, failed or not
	retries atomic.Int64 // 429/503 retries so far, for progress lines

	mu              sync.Mutex
	runs, failed    int64
	interrupted     int64
	errs            []string
	lat             [numKinds]reservoir
	runLat          reservoir
	reqFailed       [numKinds]int64
	retries503      int64
	retries429      int64
	retriedRuns     int64
	retrySleep      time.Duration
	conns           int64
	catalogAttempts int64
	catalogs        int64 // catalogs decoded
	catalogWire     int64
	catalogJSON     int64
	reports         int64
	reportBytes     int64
	catalogReqBytes int64
	first, last     time.Time // first run's start, last run's end
	maxLag          time.Duration
}

func (s *roundStats) add(r *runRecord) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r.interrupted {
		s.interrupted++
		return
	}
	s.runs++
	if r.err != nil {
		s.failed++
		if len(s.errs) < maxErrors {
			s.errs = append(s.errs, r.err.Error())
		}
	}
	for k := range numKinds {
		for _, d := range r.lat[k] {
			s.lat[k].add(d)
		}
		s.reqFailed[k] += int64(r.failed[k])
	}
	s.runLat.add(r.end.Sub(r.start))
	s.retries503 += int64(r.retries503)
	s.retries429 += int64(r.retries429)
	if r.retries503+r.retries429 > 0 {
		s.retriedRuns++
	}
	s.retrySleep += r.retrySleep
	s.conns += int64(r.conns.Load())
	s.catalogAttempts += int64(r.catalogAttempts)
	if r.catalogJSON > 0 {
		s.catalogs++
		s.catalogWire += int64(r.catalogWire)
		s.catalogJSON += int64(r.catalogJSON)
	}
	if r.reportBytes > 0 {
		s.reports++
		s.reportBytes += int64(r.reportBytes)
	}
	s.catalogReqBytes += int64(r.catalogReqBytes)
	if s.first.IsZero() || r.start.Before(s.first) {
		s.first = r.start
	}
	if r.end.After(s.last) {
		s.last = r.end
	}
	s.maxLag = max(s.maxLag, r.lag)
}

// RequestStats are one kind of request's numbers in a round.
type RequestStats struct {
	Count   int64           `json:"count"`
	Failed  int64           `json:"failed"`
	Latency latency.Summary `json:"latency_ms"` // each from first send to final answer, retries and their sleeps included
}

// fill writes the round's run and request numbers into res.
func (s *roundStats) fill(res *Round) {
	s.mu.Lock()
	defer s.mu.Unlock()
	res.Runs, res.Failed, res.Interrupted, res.Errors = s.runs, s.failed, s.interrupted, s.errs
	if !s.first.IsZero() {
		res.RunSeconds = round2(s.last.Sub(s.first).Seconds())
		if secs := s.last.Sub(s.first).Seconds(); secs > 0 {
			res.RunsPerSecond = round2(float64(s.runs) / secs)
		}
	}
	res.Requests = map[string]RequestStats{}
	for k := range numKinds {
		res.Requests[k.String()] = RequestStats{Count: s.lat[k].seen + s.reqFailed[k], Failed: s.reqFailed[k],
			Latency: latency.Summarize(s.lat[k].d)}
	}
	res.Run = latency.Summarize(s.runLat.d)
	res.Retries = Retries{Status503: s.retries503, Status429: s.retries429, Runs: s.retriedRuns,
		SleepSeconds: round2(s.retrySleep.Seconds())}
	if s.runs > 0 {
		res.ConnectionsPerRun = round2(float64(s.conns) / float64(s.runs))
		res.CatalogRequestBytes = s.catalogReqBytes / s.runs
	}
	res.CatalogRequests = s.catalogAttempts
	if s.catalogs > 0 {
		res.CatalogWireBytes, res.CatalogJSONBytes = s.catalogWire/s.catalogs, s.catalogJSON/s.catalogs
	}
	if s.reports > 0 {
		res.ReportBytes = s.reportBytes / s.reports
	}
	res.MaxStartLagSeconds = round2(s.maxLag.Seconds())
}

func round2(x float64) float64 { return float64(int64(x*100+0.5)) / 100 }

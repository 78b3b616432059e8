package frontdoor

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/compilefarm/compilefarm/pkg/metrics"
)

// Admission bounds the requests the front door works on at once. A request
// that finds every slot of its lane busy waits in a short queue; when the
// queue is full, or no slot frees within QueueWait, it is answered with
// 503, a Retry-After and Puppet's error, and nothing of it is processed,
// instead of queueing until it times out. Puppet's agent honours that
// answer for every request it sends (Puppet::HTTP::Client and its
// RetryAfterHandler): it closes the connection, sleeps Retry-After seconds
// (at most its runinterval) and sends the request again, up to 100 times.
// Agents older than PUP-11853 (puppetlabs/puppet#9084, 2023; Debian 12's
// 7.23) sleep, then fail the request ("attempt to read body out of
// block"): the run goes on with its cached catalog, or is skipped. So the
// queue absorbs bursts, and refusals are for overload.
//
// A request reads its body only once admitted, so the bodies held at once
// are at most the heavy lane's MaxInFlight (each bounded by MaxBody or
// MaxReport) plus the light lane's answers; a waiting request holds none.
//
// Requests go in two lanes with their own slots and queue, so that a herd
// of check-ins does not starve the runs already under way:
//   - heavy: the requests that carry a body (catalog with facts, facts,
//     report, certificate request, filebucket upload), catalogs and node
//     classification (which may run the external node classifier);
//   - light: the rest (CA certificate, CRL and request, file metadata and
//     content, environments, status services).
//
// The health check, /status/v1/simple, is never refused.
//
// The zero Admission is DefaultAdmission(); otherwise the fields are taken
// as set, an in-flight limit below 1 counting as 1 and a RetryAfter below
// one second as one second.
type Admission struct {
	// MaxInFlight bounds the heavy requests in progress.
	MaxInFlight int
	// MaxInFlightLight bounds the light requests in progress.
	MaxInFlightLight int
	// MaxQueued bounds the requests of each lane waiting for a slot; 0: a
	// request that finds every slot busy is refused at once.
	MaxQueued int
	// QueueWait bounds how long a request waits for a slot.
	QueueWait time.Duration
	// A refusal's Retry-After is RetryAfter plus a random share of
	// RetryAfterJitter, in whole seconds, so a refused herd comes back
	// spread out.
	RetryAfter       time.Duration
	RetryAfterJitter time.Duration
}

// DefaultAdmission returns the limits a front door has unless told
// otherwise, sized by the CPUs the process may use (GOMAXPROCS, which
// follows a container's CPU limit): 16 heavy and 64 light requests in
// progress per CPU, since most of a request's time is spent waiting on the
// stores; 256 waiting per lane, for at most 5 s; Retry-After 5 to 15 s.
//
// A waiting request holds no body, so the wait is generous: a refusal
// costs more than a wait, most of all to Puppet agents older than
// PUP-11853 (Debian 12's 7.23), which sleep Retry-After and then fail the
// request instead of sending it again. The queue's length, not the wait,
// bounds how long a request waits when the front door is overloaded.
func DefaultAdmission() Admission {
	cpus := runtime.GOMAXPROCS(0)
	return Admission{
		MaxInFlight:      16 * cpus,
		MaxInFlightLight: 64 * cpus,
		MaxQueued:        256,
		QueueWait:        5 * time.Second,
		RetryAfter:       5 * time.Second,
		RetryAfterJitter: 10 * time.Second,
	}
}

// refusalLogEvery is how often, at most, a refusal is logged: a herd
// refused by the thousand gets one line per interval, with the count of
// the refusals not logged since the last one.
const refusalLogEvery = 10 * time.Second

// drainTime bounds how long a refused request's body is read and dropped.
const drainTime = 10 * time.Second

// admitter holds what the lanes of one handler share.
type admitter struct {
	cfg      Admission
	metrics  *metrics.Farm
	log      *refusalLog
	drainMax int64 // the largest body the front door takes
}

// newLanes returns the heavy and light lanes of one handler.
func (s *Server) newLanes() (heavy, light *lane) {
	cfg := s.Admission
	cfg.MaxInFlight = max(cfg.MaxInFlight, 1)
	cfg.MaxInFlightLight = max(cfg.MaxInFlightLight, 1)
	cfg.MaxQueued = max(cfg.MaxQueued, 0)
	cfg.RetryAfter = max(cfg.RetryAfter, time.Second)
	a := &admitter{
		cfg: cfg, metrics: s.Metrics,
		log:      &refusalLog{log: s.log(), every: refusalLogEvery, now: time.Now},
		drainMax: max(s.MaxBody, s.MaxReport, s.MaxBucketFile),
	}
	heavy = &lane{admitter: a, name: metrics.LaneHeavy, what: "catalog, node, fact, report and upload requests",
		slots: make(chan struct{}, cfg.MaxInFlight)}
	light = &lane{admitter: a, name: metrics.LaneLight, what: "file, certificate and status requests",
		slots: make(chan struct{}, cfg.MaxInFlightLight)}
	return heavy, light
}

// lane is one budget of slots (a semaphore) and its bounded wait queue.
type lane struct {
	*admitter
	name   string // metrics.Lane*
	what   string // the requests it takes, for messages
	slots  chan struct{}
	queued atomic.Int64
}

// admit runs h once the request holds a slot of the lane, and refuses it
// with 503 + Retry-After when none frees in time.
func (l *lane) admit(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		t, reason := l.acquire(r.Context())
		if t == nil {
			if reason != "" {
				l.refuse(w, r, reason)
			}
			return
		}
		defer t.release()
		h(w, r.WithContext(context.WithValue(r.Context(), ticketKey{}, t)))
	}
}

// acquire takes a slot, waiting in the queue if there is room, and returns
// the request's ticket, or nil and why it was refused ("" when the client
// went away while waiting: there is no one to answer).
func (l *lane) acquire(ctx context.Context) (*ticket, string) {
	select {
	case l.slots <- struct{}{}:
		return l.admitted(), ""
	default:
	}
	if l.queued.Add(1) > int64(l.cfg.MaxQueued) {
		l.queued.Add(-1)
		return nil, metrics.RefusedQueueFull
	}
	defer l.queued.Add(-1)
	start := time.Now()
	timer := time.NewTimer(l.cfg.QueueWait)
	defer timer.Stop()
	select {
	case l.slots <- struct{}{}:
		l.metrics.ObserveQueueWait(l.name, time.Since(start))
		return l.admitted(), ""
	case <-timer.C:
		l.metrics.ObserveQueueWait(l.name, time.Since(start))
		return nil, metrics.RefusedQueueWait
	case <-ctx.Done():
		return nil, ""
	}
}

func (l *lane) admitted() *ticket {
	l.metrics.AddInFlight(l.name, 1)
	return &ticket{lane: l, held: true}
}

// refuse answers 503 with a Retry-After and Puppet's error: JSON, or plain
// text on the CA's paths as Puppet's CA answers.
func (l *lane) refuse(w http.ResponseWriter, r *http.Request, reason string) {
	l.metrics.ObserveRefused(l.name, reason)
	l.log.refused(r, l, reason)
	drainBody(w, r, l.drainMax)
	w.Header().Set("Retry-After", strconv.Itoa(l.retryAfter()))
	// Puppet's agent closes the connection before it sleeps; closing it
	// here frees it at once.
	w.Header().Set("Connection", "close")
	msg := fmt.Sprintf("Service Unavailable: this front door is at capacity (%d %s in progress, %d waiting) "+
		"and did not process the request; send it again after Retry-After seconds (Puppet's agent does). "+
		"If this persists, add front door capacity or spread agent runs out (splay)",
		cap(l.slots), l.what, l.queued.Load())
	if strings.HasPrefix(r.URL.Path, "/puppet-ca/") {
		textError(w, http.StatusServiceUnavailable, msg)
		return
	}
	jsonError(w, http.StatusServiceUnavailable, "RUNTIME_ERROR", msg)
}

// retryAfter is RetryAfter plus a random share of RetryAfterJitter, in
// whole seconds.
func (a *admitter) retryAfter() int {
	secs := int((a.cfg.RetryAfter + time.Second - 1) / time.Second)
	if j := int(a.cfg.RetryAfterJitter / time.Second); j > 0 {
		secs += rand.IntN(j + 1)
	}
	return secs
}

// drainBody reads and drops what the client sends of a refused request's
// body (at most limit bytes, for at most drainTime): Puppet's agent (Ruby's
// Net::HTTP) sends the whole body before it reads the answer, and a server
// that closes with the body unread makes it see a connection reset, which
// it does not retry, instead of the 503. Nothing is kept.
func drainBody(w http.ResponseWriter, r *http.Request, limit int64) {
	if r.Body == nil || r.ContentLength == 0 || r.ContentLength > limit {
		return
	}
	// Not every ResponseWriter has a connection (ErrNotSupported): then
	// there is nothing to wait for.
	_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(drainTime))
	io.CopyN(io.Discard, r.Body, limit)
}

// ticket is an admitted request's hold on a slot; only the request's own
// goroutine touches it.
type ticket struct {
	lane *lane
	held bool
}

type ticketKey struct{}

func (t *ticket) release() {
	if t.held {
		t.held = false
		<-t.lane.slots
		t.lane.metrics.AddInFlight(t.lane.name, -1)
	}
}

// withoutSlot runs wait, a wait on something other than this front door
// that holds no request body (a compile), with the request's slot given
// back, so that requests waiting for compiles leave the front door's
// capacity to the others; then it takes a slot again, waiting as long as
// the request lives (it was admitted: it is not refused after its wait).
// A request without a slot just waits.
func withoutSlot(r *http.Request, wait func()) {
	t, _ := r.Context().Value(ticketKey{}).(*ticket)
	if t == nil || !t.held {
		wait()
		return
	}
	t.release()
	wait()
	select {
	case t.lane.slots <- struct{}{}:
		t.held = true
		t.lane.metrics.AddInFlight(t.lane.name, 1)
	case <-r.Context().Done():
	}
}

// refusalLog logs refusals at most once per interval.
type refusalLog struct {
	log   *slog.Logger
	every time.Duration
	now   func() time.Time

	mu       sync.Mutex
	next     time.Time // no line before then
	unlogged int       // refusals since the last line
}

func (l *refusalLog) refused(r *http.Request, ln *lane, reason string) {
	l.mu.Lock()
	now := l.now()
	if now.Before(l.next) {
		l.unlogged++
		l.mu.Unlock()
		return
	}
	l.next = now.Add(l.every)
	unlogged := l.unlogged
	l.unlogged = 0
	l.mu.Unlock()
	args := []any{"lane", ln.name, "reason", reason, "in_flight_limit", cap(ln.slots), "queued", ln.queued.Load(),
		"method", r.Method, "path", r.URL.Path, "remote", r.RemoteAddr, "unlogged_refusals", unlogged}
	if c := peerCert(r); c != nil {
		args = append(args, "node", c.Subject.CommonName)
	}
	l.log.Warn(fmt.Sprintf("front door at capacity: refusing requests with 503 + Retry-After (logged at most once per %s; "+
		"compilefarm_frontdoor_refused_total counts them all); if this persists, add front door tasks or spread agent runs (splay), "+
		"or raise --max-in-flight if CPU and memory allow", l.every), args...)
}

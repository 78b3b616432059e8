package broker

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/compilefarm/compilefarm/pkg/farm"
)

// TaskClientType is the client type of the tasks' heartbeat records,
// pcp://<task>/compilefarm-task: no client may associate or connect with
// it, and no message reaches it.
const TaskClientType = "compilefarm-task"

// How long a task's liveness is believed (never longer than a third of
// TaskTTL: see liveFor), and how many tasks' are kept.
const (
	maxLiveFor = 5 * time.Second
	maxLive    = 1024
)

// liveFor is how long a task's liveness is believed.
func (b *Broker) liveFor() time.Duration { return min(maxLiveFor, b.o.TaskTTL/3) }

// taskURI is the URI of task's heartbeat record.
func taskURI(task string) string { return "pcp://" + task + "/" + TaskClientType }

// isTaskURI reports whether uri is a heartbeat record's URI.
func isTaskURI(uri string) bool { return strings.HasSuffix(uri, "/"+TaskClientType) }

// reservedType reports whether typ is a client type no client may take.
func reservedType(typ string) bool { return typ == "server" || typ == TaskClientType }

// beat writes this task's heartbeat record.
func (b *Broker) beat(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, storeTimeout)
	defer cancel()
	p := farm.Presence{URI: taskURI(b.o.Name), Task: b.o.Name, Expires: time.Now().Add(b.o.TaskTTL)}
	if err := b.o.Presence.SetPresence(ctx, p); err != nil && ctx.Err() == nil {
		b.st.errors.Add(1)
		b.log.Warn("pcp: writing this task's heartbeat failed; once it expires other tasks cannot reach this task's clients", "task", b.o.Name, "err", err)
	}
}

// heartbeat rewrites this task's heartbeat record every third of TaskTTL
// until ctx ends.
func (b *Broker) heartbeat(ctx context.Context) {
	t := time.NewTicker(b.o.TaskTTL / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			b.beat(ctx)
		}
	}
}

// clearHeartbeat removes this task's heartbeat record: other tasks count
// its clients as gone from then on.
func (b *Broker) clearHeartbeat() {
	if b.o.Presence == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
	defer cancel()
	if err := b.o.Presence.ClearPresence(ctx, taskURI(b.o.Name), b.o.Name); err != nil {
		b.st.errors.Add(1)
		b.log.Warn("pcp: clearing this task's heartbeat failed; it expires by itself", "task", b.o.Name, "err", err)
	}
}

// liveness is what a heartbeat lookup found about a task. alive and until
// are set before ready is closed; until is zero when the lookup failed
// (not believed later).
type liveness struct {
	ready chan struct{}
	alive bool
	until time.Time
}

// taskAlive reports whether task's heartbeat record is unexpired (this
// task is alive while it runs): one LookupPresence per task every 5 s
// (a third of TaskTTL if less) at most, however many callers ask at once. A failed lookup counts as
// alive, uncached: the inbox then tells whether the task is gone.
func (b *Broker) taskAlive(ctx context.Context, task string) bool {
	return b.taskAliveAt(ctx, task, time.Now())
}

func (b *Broker) taskAliveAt(ctx context.Context, task string, now time.Time) bool {
	if task == b.o.Name {
		return true
	}
	b.liveMu.Lock()
	if e := b.live[task]; e != nil {
		select {
		case <-e.ready:
			if now.Before(e.until) {
				b.liveMu.Unlock()
				return e.alive
			}
		default: // another caller is looking it up
			b.liveMu.Unlock()
			select {
			case <-e.ready:
				return e.alive
			case <-ctx.Done():
				return true
			}
		}
	}
	if len(b.live) >= maxLive {
		b.pruneLive(now)
	}
	e := &liveness{ready: make(chan struct{})}
	b.live[task] = e
	b.liveMu.Unlock()

	alive, ok := b.lookupTask(ctx, task)
	e.alive = alive
	if ok {
		e.until = now.Add(b.liveFor())
	}
	close(e.ready)
	return alive
}

// lookupTask reads task's heartbeat record; ok is false when the store
// failed.
func (b *Broker) lookupTask(ctx context.Context, task string) (alive, ok bool) {
	ctx, cancel := context.WithTimeout(ctx, storeTimeout)
	defer cancel()
	p, err := b.o.Presence.LookupPresence(ctx, taskURI(task))
	switch {
	case err == nil:
		return p.Task == task, true
	case errors.Is(err, farm.ErrNotFound):
		return false, true
	default:
		b.st.errors.Add(1)
		b.log.Warn("pcp: reading a task's heartbeat failed; counting it alive", "task", task, "err", err)
		return true, false
	}
}

// pruneLive makes room in the liveness cache: the outdated entries go,
// then, if that is not enough, every finished one. Called with liveMu held.
func (b *Broker) pruneLive(now time.Time) {
	for task, e := range b.live {
		select {
		case <-e.ready:
			if !now.Before(e.until) {
				delete(b.live, task)
			}
		default:
		}
	}
	if len(b.live) < maxLive {
		return
	}
	for task, e := range b.live {
		select {
		case <-e.ready:
			delete(b.live, task)
		default:
		}
	}
}

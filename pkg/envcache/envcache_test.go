package envcache

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/compilefarm/compilefarm/pkg/farm"
	"github.com/compilefarm/compilefarm/pkg/farm/farmtest"
	"github.com/compilefarm/compilefarm/pkg/memstore"
)

func TestEnvironmentStoreContract(t *testing.T) {
	farmtest.TestEnvironmentStore(t, func(t *testing.T) farm.EnvironmentStore { return New(memstore.New(), 0) })
}

// counting is an EnvironmentStore that counts its reads and can hold
// them: a held read has read the record and waits to return it.
type counting struct {
	farm.EnvironmentStore
	reads atomic.Int64
	mu    sync.Mutex
	hold  chan struct{}
}

func (c *counting) GetEnvironment(ctx context.Context, name string) (farm.Environment, error) {
	c.reads.Add(1)
	c.mu.Lock()
	hold := c.hold
	c.mu.Unlock()
	e, err := c.EnvironmentStore.GetEnvironment(ctx, name)
	if hold != nil {
		<-hold
	}
	return e, err
}

func (c *counting) holdReads() chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.hold = make(chan struct{})
	return c.hold
}

func (c *counting) releaseReads(hold chan struct{}) {
	c.mu.Lock()
	c.hold = nil
	c.mu.Unlock()
	close(hold)
}

// clock is a settable time.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func setup(t *testing.T) (*Store, *counting, *clock) {
	t.Helper()
	behind := &counting{EnvironmentStore: memstore.New()}
	if err := behind.PutEnvironment(context.Background(), farm.Environment{Name: "production", CodeID: "code-1"}); err != nil {
		t.Fatal(err)
	}
	clk := &clock{t: time.Date(2024, 5, 17, 9, 30, 0, 0, time.UTC)}
	s := New(behind, 10*time.Second)
	s.now = clk.now
	return s, behind, clk
}

func get(t *testing.T, s farm.EnvironmentStore, want string) {
	t.Helper()
	e, err := s.GetEnvironment(context.Background(), "production")
	if err != nil {
		t.Fatal(err)
	}
	if e.CodeID != want {
		t.Fatalf("code_id %q, want %q", e.CodeID, want)
	}
}

func wantReads(t *testing.T, c *counting, want int64) {
	t.Helper()
	if got := c.reads.Load(); got != want {
		t.Fatalf("%d reads of the store behind, want %d", got, want)
	}
}

// TestTTL: a record is read once per TTL; a change made behind the cache
// (by another process) shows after at most TTL.
func TestTTL(t *testing.T) {
	s, behind, clk := setup(t)
	get(t, s, "code-1")
	get(t, s, "code-1")
	wantReads(t, behind, 1)
	if err := behind.PutEnvironment(context.Background(), farm.Environment{Name: "production", CodeID: "code-2"}); err != nil {
		t.Fatal(err)
	}
	clk.add(9 * time.Second)
	get(t, s, "code-1") // stale, within TTL
	wantReads(t, behind, 1)
	clk.add(time.Second)
	get(t, s, "code-2")
	wantReads(t, behind, 2)
}

// TestLocalPut: a change made through the Store is seen at once, and a
// read that started before it does not bring the old record back.
func TestLocalPut(t *testing.T) {
	s, behind, clk := setup(t)
	get(t, s, "code-1")
	if err := s.PutEnvironment(context.Background(), farm.Environment{Name: "production", CodeID: "code-2"}); err != nil {
		t.Fatal(err)
	}
	get(t, s, "code-2")
	wantReads(t, behind, 1)

	// A read in flight while a put lands: the put wins.
	clk.add(time.Minute)
	hold := behind.holdReads()
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.GetEnvironment(context.Background(), "production") // has read code-2, returns it late
	}()
	for behind.reads.Load() != 2 {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(10 * time.Millisecond)
	clk.add(time.Millisecond)
	if err := s.PutEnvironment(context.Background(), farm.Environment{Name: "production", CodeID: "code-3"}); err != nil {
		t.Fatal(err)
	}
	behind.releaseReads(hold)
	<-done
	get(t, s, "code-3")
	wantReads(t, behind, 2)
}

// TestOneReadAtATime: requests that find a read in flight wait for it.
func TestOneReadAtATime(t *testing.T) {
	s, behind, _ := setup(t)
	hold := behind.holdReads()
	var wg sync.WaitGroup
	for range 50 {
		wg.Go(func() {
			if e, err := s.GetEnvironment(context.Background(), "production"); err != nil || e.CodeID != "code-1" {
				t.Errorf("concurrent read: %+v %v", e, err)
			}
		})
	}
	for behind.reads.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond) // let the others queue behind the read
	behind.releaseReads(hold)
	wg.Wait()
	wantReads(t, behind, 1)
}

// TestNotFoundIsNotKept: an environment deployed after a miss is found at
// the next request.
func TestNotFoundIsNotKept(t *testing.T) {
	s, behind, _ := setup(t)
	_, err := s.GetEnvironment(context.Background(), "staging")
	if !errors.Is(err, farm.ErrNotFound) {
		t.Fatalf("unknown environment: %v", err)
	}
	if err := behind.PutEnvironment(context.Background(), farm.Environment{Name: "staging", CodeID: "s-1"}); err != nil {
		t.Fatal(err)
	}
	if e, err := s.GetEnvironment(context.Background(), "staging"); err != nil || e.CodeID != "s-1" {
		t.Fatalf("environment deployed after a miss: %+v %v", e, err)
	}
}

// TestFresh: FreshEnvironment and the ReadThrough view read the store
// behind every time and refresh the cache.
func TestFresh(t *testing.T) {
	s, behind, _ := setup(t)
	get(t, s, "code-1")
	if err := behind.PutEnvironment(context.Background(), farm.Environment{Name: "production", CodeID: "code-2"}); err != nil {
		t.Fatal(err)
	}
	get(t, s.ReadThrough(), "code-2")
	wantReads(t, behind, 2)
	get(t, s, "code-2") // refreshed by the read through
	wantReads(t, behind, 2)
	if e, err := s.FreshEnvironment(context.Background(), "production"); err != nil || e.CodeID != "code-2" {
		t.Fatalf("fresh read: %+v %v", e, err)
	}
	wantReads(t, behind, 3)
}

// TestNoCache: a negative TTL reads every time.
func TestNoCache(t *testing.T) {
	behind := &counting{EnvironmentStore: memstore.New()}
	behind.PutEnvironment(context.Background(), farm.Environment{Name: "production", CodeID: "code-1"})
	s := New(behind, -1)
	get(t, s, "code-1")
	get(t, s, "code-1")
	wantReads(t, behind, 2)
}

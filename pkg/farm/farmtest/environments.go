package farmtest

import (
	"context"
	"fmt"
	"reflect"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/compilefarm/compilefarm/pkg/farm"
)

// TestEnvironmentStore checks that a farm.EnvironmentStore keeps its
// contract. newStore returns a fresh, empty store for each subtest.
func TestEnvironmentStore(t *testing.T, newStore func(t *testing.T) farm.EnvironmentStore) {
	t.Helper()
	tests := []struct {
		name string
		run  func(t *testing.T, s farm.EnvironmentStore)
	}{
		{"NeverDeployedIsNotFound", envUnknown},
		{"PutThenGet", envPutGet},
		{"PutReplaces", envReplace},
		{"EveryFieldRoundTrips", envEveryField},
		{"ListEnvironments", envList},
		{"InvalidNameIsInvalid", envInvalid},
		{"ConcurrentPuts", envConcurrent},
		{"EndedContextChangesNothing", envEndedContext},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.run(t, newStore(t)) })
	}
}

func wantEnv(t *testing.T, what string, got, want farm.Environment) {
	t.Helper()
	if got, want := normalize(got), normalize(want); !reflect.DeepEqual(got, want) {
		t.Fatalf("%s: got %+v, want %+v", what, got, want)
	}
}

// listEnvs lists the store's environments, sorted by name, and fails
// unless there are want of them.
func listEnvs(t *testing.T, s farm.EnvironmentStore, what string, want int) []farm.Environment {
	t.Helper()
	list, err := s.ListEnvironments(ctxFor(t, waitLong))
	must(t, "list environments "+what, err)
	if len(list) != want {
		t.Fatalf("list environments %s: %d environments, want %d", what, len(list), want)
	}
	sort.Slice(list, func(i, j int) bool { return list[i].Name < list[j].Name })
	return list
}

func env(name, code string, at time.Time) farm.Environment {
	return farm.Environment{Name: name, CodeID: string(farm.DigestOf([]byte(code))), DeployedAt: at}
}

// envEveryField: every field, including ones added later, is kept.
func envEveryField(t *testing.T, s farm.EnvironmentStore) {
	ctx := ctxFor(t, waitLong)
	var want farm.Environment
	fillAll(&want)
	want.Name = "every_field"
	must(t, "put", s.PutEnvironment(ctx, want))
	got, err := s.GetEnvironment(ctx, want.Name)
	must(t, "get", err)
	wantEnv(t, "stored environment", got, want)
}

func envUnknown(t *testing.T, s farm.EnvironmentStore) {
	ctx := ctxFor(t, waitLong)
	must(t, "put", s.PutEnvironment(ctx, env("production", "v1", base)))
	_, err := s.GetEnvironment(ctx, "staging")
	wantErrIs(t, "get never deployed environment", err, farm.ErrNotFound)
}

func envPutGet(t *testing.T, s farm.EnvironmentStore) {
	ctx := ctxFor(t, waitLong)
	want := env("production", "v1", base)
	must(t, "put", s.PutEnvironment(ctx, want))
	got, err := s.GetEnvironment(ctx, "production")
	must(t, "get", err)
	wantEnv(t, "stored environment", got, want)
}

func envReplace(t *testing.T, s farm.EnvironmentStore) {
	ctx := ctxFor(t, waitLong)
	must(t, "put v1", s.PutEnvironment(ctx, env("production", "v1", base)))
	want := env("production", "v2", base.Add(time.Hour))
	must(t, "put v2", s.PutEnvironment(ctx, want))
	got, err := s.GetEnvironment(ctx, "production")
	must(t, "get", err)
	wantEnv(t, "environment after replacing", got, want)
	listEnvs(t, s, "after replacing", 1)
}

func envList(t *testing.T, s farm.EnvironmentStore) {
	ctx := ctxFor(t, waitLong)
	listEnvs(t, s, "of an empty store", 0)
	want := []farm.Environment{env("production", "p", base), env("development", "d", base.Add(time.Second)), env("feature_x", "f", base.Add(time.Minute))}
	for _, e := range want {
		must(t, "put "+e.Name, s.PutEnvironment(ctx, e))
	}
	list := listEnvs(t, s, "after puts", len(want))
	sort.Slice(want, func(i, j int) bool { return want[i].Name < want[j].Name })
	for i := range want {
		wantEnv(t, "listed environment", list[i], want[i])
	}
}

// envInvalid: names that are not Puppet environment names
// (farm.ValidateEnvironment) are refused with ErrInvalid.
func envInvalid(t *testing.T, s farm.EnvironmentStore) {
	ctx := ctxFor(t, waitLong)
	for _, name := range []string{"", "Production", "../x", "a-b", "a/b"} {
		err := s.PutEnvironment(ctx, env(name, "v", base))
		wantErrIs(t, fmt.Sprintf("put environment %q", name), err, farm.ErrInvalid)
		_, err = s.GetEnvironment(ctx, name)
		wantErrIs(t, fmt.Sprintf("get environment %q", name), err, farm.ErrInvalid)
	}
	listEnvs(t, s, "after invalid names", 0)
}

func envConcurrent(t *testing.T, s farm.EnvironmentStore) {
	ctx := ctxFor(t, waitLong)
	const n = 20
	var wg sync.WaitGroup
	errs := make(chan error, n*5)
	for i := range n {
		wg.Go(func() {
			for v := range 5 {
				if err := s.PutEnvironment(ctx, env(fmt.Sprintf("env_%d", i), fmt.Sprint(v), base)); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	listEnvs(t, s, "after concurrent puts", n)
	for i := range n {
		got, err := s.GetEnvironment(ctx, fmt.Sprintf("env_%d", i))
		must(t, "get", err)
		wantEnv(t, "last put wins", got, env(fmt.Sprintf("env_%d", i), "4", base))
	}
}

// envEndedContext: a call whose context has ended returns its error, and
// PutEnvironment writes nothing.
func envEndedContext(t *testing.T, s farm.EnvironmentStore) {
	ended, cancel := context.WithCancel(ctxFor(t, waitLong))
	cancel()
	wantErrIs(t, "put with an ended context", s.PutEnvironment(ended, env("production", "v1", base)), context.Canceled)
	_, err := s.GetEnvironment(ended, "production")
	wantErrIs(t, "get with an ended context", err, context.Canceled)
	_, err = s.ListEnvironments(ended)
	wantErrIs(t, "list with an ended context", err, context.Canceled)
	listEnvs(t, s, "after a put with an ended context", 0)
}

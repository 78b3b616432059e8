// Package release holds code deploys and staged releases: it snapshots an
// environment's code, records its code_id, replans the environment's nodes
// page by page (through the intake) so they compile in the background,
// promotes or rolls back releases, and answers deploy and release status
// and catalog diffs.
package release

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/compilefarm/compilefarm/pkg/code"
	"github.com/compilefarm/compilefarm/pkg/farm"
	"github.com/compilefarm/compilefarm/pkg/intake"
)

// DeployResult is what a code deploy did.
type DeployResult struct {
	// Files counts the snapshot's entries (files, directories, links).
	Environment string `json:"environment"`
	CodeID      string `json:"code_id"`
	Previous    string `json:"previous_code_id,omitempty"`
	Changed     bool   `json:"changed"`
	Files       int    `json:"files"`
	Queued      int    `json:"queued"`
}

// Deployer snapshots environments' code into the content store, records the
// new code_id, and queues recompiles of the environment's nodes on the bulk
// lane, so a deploy never delays new nodes and fact changes.
type Deployer struct {
	Content farm.ContentStore
	Envs    farm.EnvironmentStore
	Nodes   farm.NodeStore
	Intake  *intake.Intake
	// Root is the environmentpath deploys read from by default.
	Root string
	// BaseModulepath lists the global module directories ($basemodulepath),
	// snapshotted with every environment whose modulepath uses them.
	BaseModulepath []string
	Log            *slog.Logger
	Now            func() time.Time

	mu sync.Mutex // one deploy at a time
}

// Deploy snapshots environment from fromDir (default Root/environment).
func (d *Deployer) Deploy(ctx context.Context, environment, fromDir string) (DeployResult, error) {
	if err := farm.ValidateEnvironment(environment); err != nil {
		return DeployResult{}, err
	}
	dir := fromDir
	if dir == "" {
		dir = filepath.Join(d.Root, environment)
	}
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return DeployResult{}, fmt.Errorf("deploy %s: %s is not a directory holding the environment's code: %w", environment, dir, farm.ErrInvalid)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	m, err := d.snapshot(ctx, environment, dir)
	if err != nil {
		return DeployResult{}, err
	}
	return d.record(ctx, m)
}

// DeployAll deploys every environment directory under Root
// (DeployEnvironments): what the farm does at start, so code changed while
// it was down is picked up.
func (d *Deployer) DeployAll(ctx context.Context) error {
	_, err := d.DeployEnvironments(ctx)
	return err
}

// DeployEnvironments deploys every environment directory under Root, as an
// operator asks for after changing the global module directories, which
// belong to no one environment. Every environment is snapshotted before any
// is recorded, so one that cannot be (a bad link, an unreadable file) fails
// the call and changes nothing. An environment whose code is unchanged, as
// one whose modulepath does not use $basemodulepath is after a change
// there, keeps its code_id and queues nothing new. Results are in name
// order.
func (d *Deployer) DeployEnvironments(ctx context.Context) ([]DeployResult, error) {
	if d.Root == "" {
		return nil, fmt.Errorf("deploy all: this broker has no environments directory (start it with --environments): %w", farm.ErrInvalid)
	}
	entries, err := os.ReadDir(d.Root)
	if err != nil {
		return nil, fmt.Errorf("read environments in %s: %w", d.Root, err)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	var snaps []*code.Manifest
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		if farm.ValidateEnvironment(e.Name()) != nil {
			d.log().Warn("skipping directory that is not a valid environment name", "dir", filepath.Join(d.Root, e.Name()))
			continue
		}
		m, err := d.snapshot(ctx, e.Name(), filepath.Join(d.Root, e.Name()))
		if err != nil {
			return nil, fmt.Errorf("%w (no environment was deployed)", err)
		}
		snaps = append(snaps, m)
	}
	if len(snaps) == 0 {
		return nil, fmt.Errorf("no environments in %s: it should hold one directory per environment (e.g. production/manifests/site.pp): %w", d.Root, farm.ErrInvalid)
	}
	out := make([]DeployResult, 0, len(snaps))
	for _, m := range snaps {
		res, err := d.record(ctx, m)
		if err != nil {
			return out, err
		}
		out = append(out, res)
	}
	return out, nil
}

// snapshot stores environment's code from dir, with the global module
// directories its modulepath uses.
func (d *Deployer) snapshot(ctx context.Context, environment, dir string) (*code.Manifest, error) {
	m, err := code.SnapshotWith(ctx, d.Content, environment, dir, code.Options{BaseModulepath: d.BaseModulepath})
	if err != nil {
		return nil, fmt.Errorf("snapshot %s from %s: %w", environment, dir, err)
	}
	return m, nil
}

// record makes the snapshot m its environment's code (unless it already
// is) and queues the recompiles it needs.
func (d *Deployer) record(ctx context.Context, m *code.Manifest) (DeployResult, error) {
	environment := m.Environment
	res := DeployResult{Environment: environment, CodeID: m.CodeID(), Files: len(m.Entries)}
	prev, err := d.Envs.GetEnvironment(ctx, environment)
	switch {
	case err == nil:
		res.Previous = prev.CodeID
	case !errors.Is(err, farm.ErrNotFound):
		return res, fmt.Errorf("read environment %s: %w", environment, err)
	}
	if res.Previous != res.CodeID {
		now := time.Now()
		if d.Now != nil {
			now = d.Now()
		}
		next := farm.Environment{Name: environment, CodeID: res.CodeID, DeployedAt: now}
		if r := prev.Release; r != nil && r.Hold {
			// Held: the new code starts a new release, from no node; the
			// stable code stays what every node not released runs.
			next.Release = &farm.Release{Hold: true, Stable: r.Stable}
			if next.Release.Stable == "" {
				next.Release.Stable = prev.CodeID
			}
		}
		if err := d.Envs.PutEnvironment(ctx, next); err != nil {
			return res, fmt.Errorf("record code %s for %s: %w", res.CodeID, environment, err)
		}
		res.Changed = true
	}
	// Requeue even when unchanged: it queues only nodes whose latest request
	// is for other code, which finishes a deploy interrupted half way.
	res.Queued, err = d.Intake.Requeue(ctx, environment, farm.LaneBulk)
	if err != nil {
		return res, fmt.Errorf("queue recompiles of %s: %w", environment, err)
	}
	d.log().Info("code deployed", "environment", environment, "code_id", res.CodeID, "previous", res.Previous,
		"changed", res.Changed, "files", res.Files, "queued", res.Queued, "global_module_dirs", len(m.BaseDirs()))
	return res, nil
}

func (d *Deployer) log() *slog.Logger {
	if d.Log != nil {
		return d.Log
	}
	return slog.Default()
}

// DeployStatus is how far an environment's nodes are with its current code.
type DeployStatus struct {
	Environment string    `json:"environment"`
	CodeID      string    `json:"code_id"`
	DeployedAt  time.Time `json:"deployed_at"`
	Nodes       int       `json:"nodes"`     // nodes in the environment
	Queued      int       `json:"queued"`    // compile for this code requested, not finished
	Compiled    int       `json:"compiled"`  // a new catalog for this code
	Unchanged   int       `json:"unchanged"` // recompiled to the catalog they had
	Failed      int       `json:"failed"`    // compile for this code failed
	Other       int       `json:"other"`     // latest request is for other code (not queued yet)
}

// Done reports whether no compile for the code is waiting.
func (s DeployStatus) Done() bool { return s.Queued == 0 && s.Other == 0 }

// Status counts the environment's nodes by where their compile for the
// environment's current code stands.
func (d *Deployer) Status(ctx context.Context, environment string) (DeployStatus, error) {
	env, err := d.Envs.GetEnvironment(ctx, environment)
	if err != nil {
		return DeployStatus{}, fmt.Errorf("read environment %s: %w", environment, err)
	}
	st := DeployStatus{Environment: environment, CodeID: env.CodeID, DeployedAt: env.DeployedAt}
	err = d.eachRequested(ctx, environment, func(n farm.Node) error {
		st.Nodes++
		// A node a held release keeps on the stable code counts by its
		// precompiled candidate of the new code.
		slot := farm.SlotServed
		if env.TargetCode(n.Certname) != env.CodeID {
			slot = farm.SlotCandidate
		}
		s := n.Slot(slot)
		switch {
		case s.Requested == nil || s.Requested.CodeID != env.CodeID:
			st.Other++
		case s.Pending():
			st.Queued++
		case s.Compile != nil && s.Compile.Result == farm.ResultFailed:
			st.Failed++
		case s.Compile != nil && s.Compile.Result == farm.ResultUnchanged:
			st.Unchanged++
		default:
			st.Compiled++
		}
		return nil
	})
	return st, err
}

// eachRequested calls fn on each node of environment that has asked for a
// compile (the ones deploy and release counts are about), a page at a
// time through the node store's environment index.
func (d *Deployer) eachRequested(ctx context.Context, environment string, fn func(farm.Node) error) error {
	err := farm.EachNode(ctx, d.Nodes, farm.NodeQuery{Environment: environment, Limit: farm.MaxNodePage}, func(n farm.Node) error {
		if n.Requested == nil {
			return nil
		}
		return fn(n)
	})
	if err != nil {
		return fmt.Errorf("nodes of %s: %w", environment, err)
	}
	return nil
}

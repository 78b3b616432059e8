package release

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/compilefarm/compilefarm/pkg/catalog"
	"github.com/compilefarm/compilefarm/pkg/farm"
	"github.com/compilefarm/compilefarm/pkg/intake"
)

// ReleaseChange says how to change an environment's release policy. Exactly
// one of its fields is acted on, in this order: Hold, Percent, Nodes, All.
type ReleaseChange struct {
	Hold    *bool    `json:"hold,omitempty"`    // hold new code back (true) or stop holding (false)
	Percent *int     `json:"percent,omitempty"` // release to this share of the nodes
	Nodes   []string `json:"nodes,omitempty"`   // also release these nodes
	All     bool     `json:"all,omitempty"`     // release to every node: the new code becomes stable
}

// ReleaseResult is what a release change did.
type ReleaseResult struct {
	Environment string        `json:"environment"`
	CodeID      string        `json:"code_id"`
	Release     *farm.Release `json:"release,omitempty"`
	// Released counts nodes that the change moved to the new code, and
	// Changes what their catalogs change (resources per type), from the
	// precompiled candidates they had.
	Released int                 `json:"released"`
	Changes  map[string]int      `json:"changes,omitempty"`
	Replan   intake.ReplanResult `json:"replan"`
}

// Release changes an environment's release policy and brings its nodes in
// line: newly released nodes get their precompiled catalog of the new code
// at once when it matches their facts, or an urgent compile.
func (d *Deployer) Release(ctx context.Context, environment string, ch ReleaseChange) (ReleaseResult, error) {
	if err := farm.ValidateEnvironment(environment); err != nil {
		return ReleaseResult{}, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	env, err := d.Envs.GetEnvironment(ctx, environment)
	if err != nil {
		return ReleaseResult{}, fmt.Errorf("read environment %s: %w", environment, err)
	}
	before := env
	var rel farm.Release
	if env.Release != nil {
		rel = *env.Release
		rel.Nodes = append([]string(nil), rel.Nodes...)
	}
	switch {
	case ch.Hold != nil && *ch.Hold:
		if !rel.Hold {
			rel = farm.Release{Hold: true, Stable: env.CodeID}
		}
	case ch.Hold != nil:
		rel = farm.Release{}
	case !rel.Hold:
		return ReleaseResult{}, fmt.Errorf("environment %s does not hold new code back: run `broker release %s --hold` before a deploy: %w", environment, environment, farm.ErrInvalid)
	case ch.Percent != nil:
		if *ch.Percent < 0 || *ch.Percent > 100 {
			return ReleaseResult{}, fmt.Errorf("release percentage %d is not between 0 and 100: %w", *ch.Percent, farm.ErrInvalid)
		}
		rel.Percent = *ch.Percent
	case len(ch.Nodes) > 0:
		for _, n := range ch.Nodes {
			if err := farm.ValidateCertname(n); err != nil {
				return ReleaseResult{}, err
			}
			if !slices.Contains(rel.Nodes, n) {
				rel.Nodes = append(rel.Nodes, n)
			}
		}
		sort.Strings(rel.Nodes)
	case ch.All:
		rel = farm.Release{Hold: true, Stable: env.CodeID}
	default:
		return ReleaseResult{}, fmt.Errorf("no release change given (--hold, --no-hold, --percent, --nodes or --all): %w", farm.ErrInvalid)
	}
	if rel.Hold {
		env.Release = &rel
	} else {
		env.Release = nil
	}
	res := ReleaseResult{Environment: environment, CodeID: env.CodeID, Release: env.Release}
	if res.Changes, res.Released, err = d.releaseChanges(ctx, before, env); err != nil {
		return res, err
	}
	if err := d.Envs.PutEnvironment(ctx, env); err != nil {
		return res, fmt.Errorf("record release of %s: %w", environment, err)
	}
	if res.Replan, err = d.Intake.Replan(ctx, environment, farm.LaneUrgent); err != nil {
		return res, err
	}
	d.log().Info("release changed", "environment", environment, "code_id", env.CodeID,
		"release", fmt.Sprintf("%+v", env.Release), "released", res.Released,
		"promoted", res.Replan.Promoted, "queued", res.Replan.Queued)
	return res, nil
}

// releaseChanges counts the nodes that moving from before to after
// releases to the new code, and sums, over those with a precompiled
// candidate, what changes in their catalogs per resource type.
func (d *Deployer) releaseChanges(ctx context.Context, before, after farm.Environment) (map[string]int, int, error) {
	changes := map[string]int{}
	released := 0
	err := d.eachRequested(ctx, after.Name, func(n farm.Node) error {
		if before.TargetCode(n.Certname) == after.CodeID || after.TargetCode(n.Certname) != after.CodeID {
			return nil
		}
		released++
		if n.Catalog == nil || n.Candidate == nil {
			return nil
		}
		diff, err := d.compare(ctx, n.Catalog.Digest, n.Candidate.Digest)
		if err != nil {
			return fmt.Errorf("diff catalogs of %s: %w", n.Certname, err)
		}
		for typ, count := range diff.ByType() {
			changes[typ] += count
		}
		return nil
	})
	return changes, released, err
}

func (d *Deployer) compare(ctx context.Context, from, to farm.Digest) (catalog.Diff, error) {
	a, err := d.Content.Get(ctx, farm.SpaceCatalogs, from)
	if err != nil {
		return catalog.Diff{}, err
	}
	b, err := d.Content.Get(ctx, farm.SpaceCatalogs, to)
	if err != nil {
		return catalog.Diff{}, err
	}
	return catalog.Compare(a, b)
}

// Diff compares two stored catalogs of a node, named by code_id: from
// defaults to the catalog before the node's current one, to to the node's
// precompiled candidate if it has one, else its current catalog.
func (d *Deployer) Diff(ctx context.Context, certname, from, to string) (catalog.Diff, error) {
	n, err := d.Nodes.GetNode(ctx, certname)
	if err != nil {
		return catalog.Diff{}, fmt.Errorf("read node %s: %w", certname, err)
	}
	var refs []farm.CatalogRef // newest first
	if n.Candidate != nil {
		refs = append(refs, *n.Candidate)
	}
	if n.Catalog != nil {
		refs = append(refs, *n.Catalog)
	}
	refs = append(refs, n.History...)
	// find returns the index of the first catalog at or after start whose
	// code_id starts with code and whose content differs from skip.
	find := func(code string, start int, skip farm.Digest) int {
		for i := start; i < len(refs); i++ {
			if strings.HasPrefix(refs[i].CodeID, code) && refs[i].ContentDigest != skip {
				return i
			}
		}
		return -1
	}
	ti := find(to, 0, "")
	if ti < 0 {
		return catalog.Diff{}, fmt.Errorf("node %s has no stored catalog of code %q (it keeps its current, candidate and %d previous catalogs): %w", certname, to, farm.HistoryLen, farm.ErrNotFound)
	}
	start := ti + 1
	if from != "" {
		start = 0
	}
	fi := find(from, start, refs[ti].ContentDigest)
	if fi < 0 {
		return catalog.Diff{}, fmt.Errorf("node %s has no other stored catalog to compare with (code %q): %w", certname, from, farm.ErrNotFound)
	}
	fromRef, toRef := refs[fi], refs[ti]
	return d.compare(ctx, fromRef.Digest, toRef.Digest)
}

// CodeRelease counts an environment's nodes for one code_id.
type CodeRelease struct {
	CodeID   string   `json:"code_id"`
	Role     string   `json:"role"`     // "new" (the environment's code) or "stable"
	Targeted int      `json:"targeted"` // nodes to be served this code
	Compiled int      `json:"compiled"` // nodes with a catalog of it (served or precompiled)
	Released int      `json:"released"` // nodes served it (new code only)
	Applied  int      `json:"applied"`  // targeted nodes whose last report applied that catalog
	Failed   int      `json:"failed"`   // compile failed, or the applying report failed
	Failures []string `json:"failures,omitempty"`
}

// ReleaseStatus is an environment's release at a glance.
type ReleaseStatus struct {
	Environment string        `json:"environment"`
	CodeID      string        `json:"code_id"`
	Release     *farm.Release `json:"release,omitempty"`
	Nodes       int           `json:"nodes"`
	Codes       []CodeRelease `json:"codes"`
}

// ReleaseStatus counts, per code_id, how many of the environment's nodes
// are compiled, released, applied and failed.
func (d *Deployer) ReleaseStatus(ctx context.Context, environment string) (ReleaseStatus, error) {
	env, err := d.Envs.GetEnvironment(ctx, environment)
	if err != nil {
		return ReleaseStatus{}, fmt.Errorf("read environment %s: %w", environment, err)
	}
	st := ReleaseStatus{Environment: environment, CodeID: env.CodeID, Release: env.Release}
	codes := []*CodeRelease{{CodeID: env.CodeID, Role: "new"}}
	if r := env.Release; r != nil && r.Stable != "" && r.Stable != env.CodeID {
		codes = append(codes, &CodeRelease{CodeID: r.Stable, Role: "stable"})
	}
	err = d.eachRequested(ctx, environment, func(n farm.Node) error {
		st.Nodes++
		target := env.TargetCode(n.Certname)
		for _, c := range codes {
			servedThis := n.Requested.CodeID == c.CodeID && !n.Pending() && n.Catalog != nil && n.Catalog.Seq == n.Requested.Seq
			candidateThis := n.CandidateRequested != nil && n.CandidateRequested.CodeID == c.CodeID &&
				n.Candidate != nil && n.Candidate.Seq == n.CandidateRequested.Seq
			if servedThis || candidateThis {
				c.Compiled++
			}
			failure := ""
			if n.Requested.CodeID == c.CodeID && n.Compile != nil && n.Compile.Seq == n.Requested.Seq && n.Compile.Result == farm.ResultFailed {
				failure = n.Compile.Error
			}
			if n.CandidateRequested != nil && n.CandidateRequested.CodeID == c.CodeID && n.CandidateCompile != nil &&
				n.CandidateCompile.Seq == n.CandidateRequested.Seq && n.CandidateCompile.Result == farm.ResultFailed {
				failure = n.CandidateCompile.Error
			}
			if target == c.CodeID {
				c.Targeted++
				if c.Role == "new" && servedThis {
					c.Released++
				}
				if servedThis && n.Report != nil && n.Report.CatalogUUID != "" && n.Report.CatalogUUID == n.Catalog.UUID {
					c.Applied++
					if n.Report.Status == "failed" {
						failure = "the agent's run of this catalog failed (report " + string(n.Report.Digest) + ")"
					}
				}
			}
			if failure != "" {
				c.Failed++
				if len(c.Failures) < 20 {
					c.Failures = append(c.Failures, n.Certname+": "+failure)
				}
			}
		}
		return nil
	})
	if err != nil {
		return ReleaseStatus{}, err
	}
	for _, c := range codes {
		st.Codes = append(st.Codes, *c)
	}
	return st, nil
}

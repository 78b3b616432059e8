package compiler

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/compilefarm/compilefarm/pkg/farm"
)

// Collectors recompiles the nodes that collect exported resources.
type Collectors interface {
	// RecompileCollectors queues an urgent compile of every node of the
	// environment (but exporter) whose catalog collects one of types.
	RecompileCollectors(ctx context.Context, environment, exporter string, types []string) (int, error)
}

// compileWithExports compiles req, giving it the environment's exported
// resources only when the node may collect some: gathering them lists every
// node, which no compile of a node without collectors should pay. A node
// whose last compile ran collectors gets them at once; a compile that turns
// out to run collectors without having had them is compiled again with
// them (once, when a node starts collecting).
func (p *Pool) compileWithExports(ctx context.Context, node *farm.Node, req Request) (Result, error) {
	withExports := len(node.Collects) > 0
	for {
		if withExports {
			exported, err := p.exportedBy(ctx, req.Environment, req.Certname)
			if err != nil {
				return Result{}, err
			}
			req.Exported = exported
		}
		res, err := p.Engine.Compile(ctx, req)
		if err != nil || withExports || len(res.Collects) == 0 {
			return res, err
		}
		withExports = true
	}
}

// exportedBy returns the resources every node of the environment but
// certname exports, from their stored export lists.
func (p *Pool) exportedBy(ctx context.Context, environment, certname string) ([]ExportedResource, error) {
	nodes, err := p.Nodes.ListNodes(ctx)
	if err != nil {
		return nil, fmt.Errorf("list nodes for exported resources: %w", err)
	}
	var out []ExportedResource
	for _, n := range nodes {
		if n.Certname == certname || n.Environment != environment || n.ExportsDigest == "" {
			continue
		}
		list, err := p.loadExports(ctx, n.ExportsDigest)
		if err != nil {
			return nil, fmt.Errorf("exports of %s: %w", n.Certname, err)
		}
		out = append(out, list...)
	}
	return out, nil
}

func (p *Pool) loadExports(ctx context.Context, d farm.Digest) ([]ExportedResource, error) {
	if v, ok := p.exportLists.Load(d); ok {
		return v, nil
	}
	b, err := p.Content.Get(ctx, farm.SpaceCatalogs, d)
	if err != nil {
		return nil, err
	}
	var list []ExportedResource
	if err := json.Unmarshal(b, &list); err != nil {
		return nil, fmt.Errorf("decode exported resources %s: %w", d, err)
	}
	p.exportLists.Store(d, list)
	return list, nil
}

// storeExports writes a compile's exports (stamped with the exporting
// node) and returns their digest ("" for none), their types and the types
// the compile collected.
func (p *Pool) storeExports(ctx context.Context, certname string, res Result) (farm.Digest, []string, []string, error) {
	var collects []string
	for _, c := range res.Collects {
		if !slices.Contains(collects, c.Type) {
			collects = append(collects, c.Type)
		}
	}
	sort.Strings(collects)
	if len(res.Exports) == 0 {
		return "", nil, collects, nil
	}
	list := slices.Clone(res.Exports)
	var types []string
	for i := range list {
		list[i].Certname = certname
		if !slices.Contains(types, list[i].Type) {
			types = append(types, list[i].Type)
		}
	}
	sort.Slice(list, func(i, j int) bool {
		if list[i].Type != list[j].Type {
			return list[i].Type < list[j].Type
		}
		return list[i].Title < list[j].Title
	})
	sort.Strings(types)
	b, err := json.Marshal(list)
	if err != nil {
		return "", nil, nil, fmt.Errorf("encode exports of %s: %w", certname, err)
	}
	d, err := p.Content.Put(ctx, farm.SpaceCatalogs, b)
	if err != nil {
		return "", nil, nil, fmt.Errorf("store exports of %s: %w", certname, err)
	}
	return d, types, collects, nil
}

// RecompileCollectors queues an urgent compile, with the facts and code
// they have, of the environment's nodes that collect any of types.
func (in *Intake) RecompileCollectors(ctx context.Context, environment, exporter string, types []string) (int, error) {
	env, err := in.Envs.GetEnvironment(ctx, environment)
	if err != nil {
		return 0, fmt.Errorf("read environment %s: %w", environment, err)
	}
	nodes, err := in.Nodes.ListNodes(ctx)
	if err != nil {
		return 0, fmt.Errorf("list nodes: %w", err)
	}
	queued := 0
	for _, n := range nodes {
		if n.Certname == exporter || n.Environment != environment || n.Requested == nil || !overlaps(n.Collects, types) {
			continue
		}
		node, err := in.Nodes.UpdateNode(ctx, n.Certname, func(n *farm.Node) error {
			n.RequestSeq++
			f := storedInputs(n)
			w := why{reason: farm.ReasonExports, cause: &farm.RequestCause{
				Note: fmt.Sprintf("exported %s of %s changed", strings.Join(types, ", "), exporter)}}
			n.Requested = in.request(n, n.Catalog, environment, env.TargetCode(n.Certname), f, w, farm.LaneUrgent)
			return nil
		})
		if err != nil {
			return queued, fmt.Errorf("recompile collector %s: %w", n.Certname, err)
		}
		if err := in.enqueue(ctx, node, ""); err != nil {
			return queued, err
		}
		queued++
		in.log().Info("compile queued", "node", n.Certname, "reason", farm.ReasonExports, "exporter", exporter, "types", types)
	}
	return queued, nil
}

func overlaps(a, b []string) bool {
	for _, x := range a {
		if slices.Contains(b, x) {
			return true
		}
	}
	return false
}

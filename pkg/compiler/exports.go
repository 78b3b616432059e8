package compiler

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"

	"github.com/compilefarm/compilefarm/pkg/farm"
)

// Collectors recompiles the nodes that collect exported resources.
type Collectors interface {
	// RecompileCollectors queues an urgent compile of every node of the
	// environment (but exporter) whose catalog collects one of types.
	RecompileCollectors(ctx context.Context, environment, exporter string, types []string) (int, error)
}

// compileWithExports compiles req, giving it the exported resources of
// the types the node collects, found through the node store's index of
// exporters (never by reading every node). The types come from the node's
// last compile; a compile that turns out to collect a type it was not
// given (the node starts collecting, or collects something new) is
// compiled again with those too, a bounded number of times.
func (p *Pool) compileWithExports(ctx context.Context, node *farm.Node, req Request) (Result, error) {
	given := slices.Clone(node.Collects)
	for round := 0; ; round++ {
		if len(given) > 0 {
			exported, err := p.exportedBy(ctx, req.Environment, req.Certname, given)
			if err != nil {
				return Result{}, err
			}
			req.Exported = exported
		}
		res, err := p.Engine.Compile(ctx, req)
		if err != nil {
			return res, err
		}
		var missing []string
		for _, c := range res.Collects {
			if !slices.Contains(given, c.Type) && !slices.Contains(missing, c.Type) {
				missing = append(missing, c.Type)
			}
		}
		if len(missing) == 0 || round == 2 {
			return res, nil
		}
		given = append(given, missing...)
	}
}

// exportedBy returns the resources of types that the environment's nodes
// but certname export: one index query per type (in pages) and the
// exporters' stored lists, which are cached by digest.
func (p *Pool) exportedBy(ctx context.Context, environment, certname string, types []string) ([]ExportedResource, error) {
	var out []ExportedResource
	for _, t := range types {
		q := farm.NodeQuery{Environment: environment, Exports: t, Limit: farm.MaxNodePage}
		err := farm.EachNode(ctx, p.Nodes, q, func(n farm.Node) error {
			if n.Certname == certname || n.ExportsDigest == "" {
				return nil
			}
			list, err := p.loadExports(ctx, n.ExportsDigest)
			if err != nil {
				return fmt.Errorf("exports of %s: %w", n.Certname, err)
			}
			for _, r := range list {
				if r.Type == t {
					out = append(out, r)
				}
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("find exporters of %s in %s: %w", t, environment, err)
		}
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
// node, and with the public paths agents and PuppetDB see, as the catalog
// has them) and returns their digest ("" for none), their types and the
// types the compile collected.
func (p *Pool) storeExports(ctx context.Context, certname, codeID string, res Result) (farm.Digest, []string, []string, error) {
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
	if b, err = p.Code.Publish(ctx, codeID, b); err != nil {
		return "", nil, nil, fmt.Errorf("exports of %s: %w", certname, err)
	}
	d, err := p.Content.Put(ctx, farm.SpaceCatalogs, b)
	if err != nil {
		return "", nil, nil, fmt.Errorf("store exports of %s: %w", certname, err)
	}
	return d, types, collects, nil
}

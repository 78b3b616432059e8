package intake

import (
	"context"
	"fmt"
	"strings"

	"github.com/compilefarm/compilefarm/pkg/farm"
)

// RecompileCollectors queues an urgent compile, with the facts and code
// they have, of the environment's nodes that collect any of types.
func (in *Intake) RecompileCollectors(ctx context.Context, environment, exporter string, types []string) (int, error) {
	env, err := in.Envs.GetEnvironment(ctx, environment)
	if err != nil {
		return 0, fmt.Errorf("read environment %s: %w", environment, err)
	}
	queued := 0
	done := map[string]bool{}
	for _, t := range types {
		q := farm.NodeQuery{Environment: environment, Collects: t, Limit: farm.MaxNodePage}
		err := farm.EachNode(ctx, in.Nodes, q, func(n farm.Node) error {
			if n.Certname == exporter || n.Requested == nil || done[n.Certname] {
				return nil
			}
			done[n.Certname] = true
			if err := in.recompileCollector(ctx, n.Certname, environment, env, exporter, types); err != nil {
				return err
			}
			queued++
			return nil
		})
		if err != nil {
			return queued, err
		}
	}
	return queued, nil
}

// recompileCollector queues an urgent compile of collector, with the
// facts and code it has, because exporter's exports of types changed.
func (in *Intake) recompileCollector(ctx context.Context, collector, environment string, env farm.Environment, exporter string, types []string) error {
	node, err := in.Nodes.UpdateNode(ctx, collector, func(n *farm.Node) error {
		n.RequestSeq++
		f := storedInputs(n)
		w := why{reason: farm.ReasonExports, cause: &farm.RequestCause{
			Note: fmt.Sprintf("exported %s of %s changed", strings.Join(types, ", "), exporter)}}
		n.Requested = in.request(n, n.Catalog, environment, env.TargetCode(n.Certname), f, w, farm.LaneUrgent)
		return nil
	})
	if err != nil {
		return fmt.Errorf("recompile collector %s: %w", collector, err)
	}
	if err := in.enqueue(ctx, node, ""); err != nil {
		return err
	}
	in.log().Info("compile queued", "node", collector, "reason", farm.ReasonExports, "exporter", exporter, "types", types)
	return nil
}

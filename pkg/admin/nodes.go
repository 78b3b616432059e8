package admin

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"

	"github.com/compilefarm/compilefarm/pkg/farm"
)

// listNodes streams the node records of one environment (?environment=)
// or of every environment, as one JSON array, a page of the node store's
// index at a time: memory stays bounded by a page however many nodes
// there are, and the first records arrive before the last are read.
func (s *Server) listNodes(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	var envs []string
	if e := r.URL.Query().Get("environment"); e != "" {
		if err := farm.ValidateEnvironment(e); err != nil {
			reply(w, nil, err)
			return
		}
		envs = []string{e}
	} else {
		all, err := s.Envs.ListEnvironments(ctx)
		if err != nil {
			reply(w, nil, fmt.Errorf("list environments: %w", err))
			return
		}
		for _, e := range all {
			envs = append(envs, e.Name)
		}
	}
	w.Header().Set("Content-Type", "application/json")
	bw := bufio.NewWriterSize(w, 64<<10)
	bw.WriteString("[")
	first := true
	for _, env := range envs {
		err := farm.EachNode(ctx, s.Nodes, farm.NodeQuery{Environment: env, Limit: farm.MaxNodePage}, func(n farm.Node) error {
			b, err := json.Marshal(n)
			if err != nil {
				return fmt.Errorf("encode node %s: %w", n.Certname, err)
			}
			if !first {
				bw.WriteString(",")
			}
			first = false
			bw.Write(b)
			return nil
		})
		if err != nil {
			// The status is sent: end the array early so the client's
			// decoder fails on what follows, and log what happened.
			slog.Error("list nodes", "environment", env, "err", err)
			bw.WriteString(`,{"error":` + quote(err.Error()) + `}`)
			break
		}
		bw.Flush()
	}
	bw.WriteString("]")
	bw.Flush()
}

func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// EachNode calls fn on every node record of environment ("" for every
// environment) as the operator API streams them.
func (c *Client) EachNode(ctx context.Context, environment string, fn func(farm.Node) error) error {
	path := "/admin/v1/nodes"
	if environment != "" {
		path += "?environment=" + url.QueryEscape(environment)
	}
	return c.stream(ctx, path, func(dec *json.Decoder) error {
		for dec.More() {
			var n farm.Node
			if err := dec.Decode(&n); err != nil {
				return fmt.Errorf("decode node record: %w", err)
			}
			if n.Certname == "" {
				return fmt.Errorf("the broker stopped listing nodes: it logged why")
			}
			if err := fn(n); err != nil {
				return err
			}
		}
		return nil
	})
}

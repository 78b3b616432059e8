package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// adminNodes reads the node records from the broker's operator API (its
// --admin-listen address), by certname.
func adminNodes(ctx context.Context, adminURL string) (map[string]adminNode, error) {
	u, err := url.Parse(adminURL)
	if err != nil {
		return nil, err
	}
	u.Path, u.RawQuery = "/admin/v1/nodes", ""
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", u, resp.Status)
	}
	var nodes []adminNode
	if err := json.NewDecoder(resp.Body).Decode(&nodes); err != nil {
		return nil, fmt.Errorf("%s: %w", u, err)
	}
	out := make(map[string]adminNode, len(nodes))
	for _, n := range nodes {
		out[n.Certname] = n
	}
	return out, nil
}

// adminNode is what loadgen reads of a node record from the operator API
// (GET /admin/v1/nodes).
type adminNode struct {
	Certname   string        `json:"certname"`
	RequestSeq uint64        `json:"request_seq"` // grows by one per compile queued
	Requested  *adminRequest `json:"requested"`
	Compile    *adminCompile `json:"compile"`
}

type adminRequest struct {
	Reason  string        `json:"reason"`
	Changes []adminChange `json:"changes"`
	Cause   *struct {
		Input string `json:"input"`
		Note  string `json:"note"`
	} `json:"cause"`
}

// adminChange is a fact change that queued a compile (farm.FactChange).
type adminChange struct {
	Path       []string        `json:"path"`
	Kind       string          `json:"kind"`
	Old        json.RawMessage `json:"old"`
	New        json.RawMessage `json:"new"`
	OldMissing bool            `json:"old_missing"`
	NewMissing bool            `json:"new_missing"`
}

type adminCompile struct {
	Result   string        `json:"result"`
	Error    string        `json:"error"`
	Duration time.Duration `json:"duration"`
}

// describe is a request's reason with the changes that caused it, as
// broker explain prints them: facts-changed (networking.ip: "a" -> "b").
func (r *adminRequest) describe() string {
	if r == nil {
		return "none"
	}
	var parts []string
	for _, c := range r.Changes {
		obs := func(v json.RawMessage, missing bool) string {
			if missing || len(v) == 0 {
				return "(absent)"
			}
			return string(v)
		}
		p := strings.Join(c.Path, ".")
		if c.Kind != "" && c.Kind != "value" {
			p += " (" + c.Kind + ")"
		}
		parts = append(parts, fmt.Sprintf("%s: %s -> %s", p, obs(c.Old, c.OldMissing), obs(c.New, c.NewMissing)))
	}
	if c := r.Cause; c != nil && c.Input != "" {
		parts = append(parts, "input "+c.Input)
	}
	if c := r.Cause; c != nil && c.Note != "" {
		parts = append(parts, c.Note)
	}
	if len(parts) == 0 {
		return r.Reason
	}
	return r.Reason + " (" + strings.Join(parts, "; ") + ")"
}

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/compilefarm/compilefarm/bench/internal/agentcert"
	"github.com/compilefarm/compilefarm/bench/internal/agentwire"
)

// node is one of pdbbench's own nodes: an identity from the farm's CA
// and its facts, which pdbbench uploads as `puppet facts upload` does
// (PUT /puppet/v3/facts/NAME): the recorded agent's facts, renamed, and
// the pdbbench_* facts site.pp reads.
type node struct {
	name   string
	client *http.Client
	extra  map[string]any // the pdbbench_* facts of its next upload
}

// fleet makes and uploads pdbbench's own nodes on one farm.
type fleet struct {
	farm   *agentcert.Farm
	env    string
	facts  string // the recorded agent's facts document (JSON)
	domain string
}

func newFleet(f *agentcert.Farm, env, domain string) (*fleet, error) {
	doc, err := agentwire.DecodeFacts(agentwire.RecordedCatalogRequest)
	if err != nil {
		return nil, err
	}
	return &fleet{farm: f, env: env, facts: doc, domain: domain}, nil
}

// enrol gives each name an identity from the farm's CA (ECDSA keys; the
// broker autosigns).
func (fl *fleet) enrol(ctx context.Context, names []string) ([]*node, error) {
	ids, err := fl.farm.EnrolAll(ctx, names, agentcert.EnrolOptions{Parallel: 8})
	if err != nil {
		return nil, fmt.Errorf("enrol %d nodes: %w", len(names), err)
	}
	out := make([]*node, len(ids))
	for i, id := range ids {
		out[i] = &node{name: id.Name, extra: map[string]any{},
			client: &http.Client{Timeout: time.Minute, Transport: &http.Transport{TLSClientConfig: fl.farm.TLSConfig(id.Cert)}}}
	}
	return out, nil
}

// document is n's facts document: the recorded facts for n with its extra
// facts added, stamped now.
func (fl *fleet) document(n *node, now time.Time) ([]byte, error) {
	doc, err := agentwire.RenameFacts(fl.facts, n.name)
	if err != nil {
		return nil, err
	}
	var d struct {
		Values map[string]json.RawMessage `json:"values"`
	}
	if err := json.Unmarshal([]byte(doc), &d); err != nil {
		return nil, fmt.Errorf("recorded facts: %w", err)
	}
	for k, v := range n.extra {
		b, err := json.Marshal(v)
		if err != nil {
			return nil, fmt.Errorf("fact %s of %s: %w", k, n.name, err)
		}
		d.Values[k] = b
	}
	return json.Marshal(map[string]any{"name": n.name, "values": d.Values,
		"timestamp": now.UTC().Format(time.RFC3339Nano), "expiration": now.Add(30 * time.Minute).UTC().Format(time.RFC3339Nano)})
}

// upload sends n's facts (PUT /puppet/v3/facts/NAME).
func (fl *fleet) upload(ctx context.Context, n *node) error {
	body, err := fl.document(n, time.Now())
	if err != nil {
		return err
	}
	u := "https://" + fl.farm.Target + "/puppet/v3/facts/" + url.PathEscape(n.name) + "?environment=" + url.QueryEscape(fl.env)
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, u, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", agentwire.AcceptJSON)
	req.Header.Set("X-Puppet-Version", agentwire.Version)
	req.Header.Set("User-Agent", agentwire.UserAgent)
	resp, err := n.client.Do(req)
	if err != nil {
		return fmt.Errorf("upload the facts of %s: %w", n.name, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("upload the facts of %s: %s: %s", n.name, resp.Status, b)
	}
	return nil
}

// uploadAll uploads every node's facts, 8 at a time.
func (fl *fleet) uploadAll(ctx context.Context, nodes []*node) error {
	sem := make(chan struct{}, 8)
	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			errs[i] = fl.upload(ctx, n)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

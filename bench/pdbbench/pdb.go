package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// pdbClient asks PuppetDB directly, over its plain-http loopback port
// (not through the gate): what it holds, and how long a query takes it.
type pdbClient struct {
	base string
	http *http.Client
}

func newPDBClient(p puppetDB) *pdbClient {
	return &pdbClient{base: strings.TrimSuffix(p.URL, "/"), http: &http.Client{Timeout: time.Minute}}
}

// get reads path (under PuppetDB's URL) into out.
func (c *pdbClient) get(ctx context.Context, path string, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+path, nil)
	if err != nil {
		return err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("PuppetDB %s: %w", path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("PuppetDB %s: %w", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("PuppetDB %s: %s: %.300s", path, resp.Status, b)
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("PuppetDB %s: %w", path, err)
	}
	return nil
}

// query runs a PQL query and returns its rows and how long PuppetDB took
// to answer it whole.
func (c *pdbClient) query(ctx context.Context, pql string) ([]map[string]any, time.Duration, error) {
	var rows []map[string]any
	start := time.Now()
	err := c.get(ctx, "/pdb/query/v4?query="+url.QueryEscape(pql), &rows)
	return rows, time.Since(start), err
}

// count runs a PQL query of the form entity[count()] { ... }.
func (c *pdbClient) count(ctx context.Context, pql string) (int, error) {
	rows, _, err := c.query(ctx, pql)
	if err != nil {
		return 0, err
	}
	if len(rows) != 1 {
		return 0, fmt.Errorf("PuppetDB answered %q with %d rows, want 1", pql, len(rows))
	}
	n, ok := rows[0]["count"].(float64)
	if !ok {
		return 0, fmt.Errorf("PuppetDB answered %q with %v, want a count", pql, rows[0])
	}
	return int(n), nil
}

// version is PuppetDB's version.
func (c *pdbClient) version(ctx context.Context) (string, error) {
	var v struct {
		Version string `json:"version"`
	}
	err := c.get(ctx, "/pdb/meta/v1/version", &v)
	return v.Version, err
}

// factValue is the value PuppetDB holds for node's fact name ("" when none).
func (c *pdbClient) factValue(ctx context.Context, node, name string) (string, error) {
	rows, _, err := c.query(ctx, fmt.Sprintf("facts[value] { certname = '%s' and name = '%s' }", node, name))
	if err != nil || len(rows) == 0 {
		return "", err
	}
	return fmt.Sprint(rows[0]["value"]), nil
}

// processing is PuppetDB's command-processing timer
// (puppetlabs.puppetdb.mq global.processing-time): commands processed so
// far, and the median and mean of its recent ones (ms).
type processing struct {
	Count     float64
	P50, Mean float64
}

// processed reads PuppetDB's command-processing timer (its /metrics/v2).
func (c *pdbClient) processed(ctx context.Context) (processing, error) {
	var m struct {
		Value struct {
			Count float64 `json:"Count"`
			P50   float64 `json:"50thPercentile"`
			Mean  float64 `json:"Mean"`
		} `json:"value"`
	}
	err := c.get(ctx, "/metrics/v2/read/"+url.PathEscape("puppetlabs.puppetdb.mq:name=global.processing-time"), &m)
	return processing{Count: m.Value.Count, P50: m.Value.P50, Mean: m.Value.Mean}, err
}

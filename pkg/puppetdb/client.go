package puppetdb

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// ErrRefused marks a command PuppetDB answered with a 4xx status that
// judges the command (malformed, too large: 400, 413, 422...): sending it
// again would be refused again. 401, 403 and 404 judge the farm's
// configuration (its certificate not allowed, a wrong URL), 408 and 429
// the moment: those are not ErrRefused, so commands wait until the
// configuration is fixed instead of being set aside.
var ErrRefused = errors.New("refused by PuppetDB")

// refuses says whether a status judges the command itself.
func refuses(status int) bool {
	switch status {
	case http.StatusUnauthorized, http.StatusForbidden, http.StatusNotFound, http.StatusRequestTimeout, http.StatusTooManyRequests:
		return false
	}
	return status/100 == 4
}

// Client submits commands to PuppetDB and runs queries, trying its URLs in
// order (Puppet's server_urls): the next one when a URL cannot be reached
// or answers 5xx.
type Client struct {
	urls []*url.URL
	http *http.Client
	// Producer is the farm's certname, the producer of every command.
	Producer string
}

// ParseURLs reads --puppetdb's comma-separated URLs: https, or http to a
// loopback address only (a PuppetDB on the same host; anything else would
// send facts and reports in the clear).
func ParseURLs(list string) ([]*url.URL, error) {
	var out []*url.URL
	for _, s := range strings.Split(list, ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		u, err := url.Parse(s)
		if err != nil || u.Host == "" {
			return nil, fmt.Errorf("PuppetDB URL %q: want https://HOST:PORT (PuppetDB's SSL port, usually 8081)", s)
		}
		switch u.Scheme {
		case "https":
		case "http":
			if !loopback(u.Hostname()) {
				return nil, fmt.Errorf("PuppetDB URL %q: plain http only to a loopback address; use https://%s:8081 (PuppetDB's SSL port)", s, u.Hostname())
			}
		default:
			return nil, fmt.Errorf("PuppetDB URL %q: want https:// (or http:// to a loopback address)", s)
		}
		u.Path = strings.TrimRight(u.Path, "/")
		out = append(out, u)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no PuppetDB URL in %q", list)
	}
	return out, nil
}

func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// NewClient makes a client of urls (ParseURLs); tlsConfig (the farm's
// certificate, and the CA PuppetDB's certificate is checked against) is
// used for https URLs.
func NewClient(urls []*url.URL, tlsConfig *tls.Config, producer string) *Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = tlsConfig
	tr.MaxIdleConnsPerHost = 16
	return &Client{urls: urls, http: &http.Client{Transport: tr, Timeout: 2 * time.Minute}, Producer: producer}
}

// URLs returns the client's PuppetDB URLs, as strings.
func (c *Client) URLs() []string {
	out := make([]string, len(c.urls))
	for i, u := range c.urls {
		out[i] = u.String()
	}
	return out
}

// Submit posts one command (POST /pdb/cmd/v1). An error wraps ErrRefused
// when PuppetDB refused it; any other error is worth trying again later
// (PuppetDB unreachable, 5xx, busy, the farm's certificate not allowed).
func (c *Client) Submit(ctx context.Context, command string, version int, certname string, at time.Time, payload []byte) error {
	q := url.Values{}
	q.Set("command", strings.ReplaceAll(command, " ", "_"))
	q.Set("version", strconv.Itoa(version))
	q.Set("certname", certname)
	q.Set("producer-timestamp", at.UTC().Format("2006-01-02T15:04:05.000Z"))
	// Sent gzipped, as the termini send it (PuppetDB takes
	// Content-Encoding: gzip and the uncompressed length).
	body := gzipBytes(payload)
	var last error
	for _, base := range c.urls {
		u := *base
		u.Path += "/pdb/cmd/v1"
		u.RawQuery = q.Encode()
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), bytes.NewReader(body))
		if err != nil {
			return fmt.Errorf("submit %s for %s: %w", command, certname, err)
		}
		req.Header.Set("Content-Type", "application/json; charset=utf-8")
		req.Header.Set("Content-Encoding", "gzip")
		req.Header.Set("X-Uncompressed-Length", strconv.Itoa(len(payload)))
		req.Header.Set("Accept", "application/json")
		err = c.do(req)
		if err == nil || errors.Is(err, ErrRefused) || ctx.Err() != nil {
			if err != nil {
				return fmt.Errorf("submit %s for %s to %s: %w", command, certname, base.Host, err)
			}
			return nil
		}
		last = fmt.Errorf("submit %s for %s to %s: %w", command, certname, base.Host, err)
	}
	return last
}

// Query runs a query (GET /pdb/query/v4?query=...; PQL or an AST as JSON)
// and returns PuppetDB's answer, a JSON array. The error wraps ErrRefused
// for a query PuppetDB refuses (a syntax error: its message says where).
func (c *Client) Query(ctx context.Context, query string) ([]byte, error) {
	var last error
	for _, base := range c.urls {
		u := *base
		u.Path += "/pdb/query/v4"
		u.RawQuery = url.Values{"query": {query}}.Encode()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
		if err != nil {
			return nil, fmt.Errorf("query PuppetDB: %w", err)
		}
		req.Header.Set("Accept", "application/json")
		body, err := c.read(req)
		if err == nil {
			return body, nil
		}
		if errors.Is(err, ErrRefused) || ctx.Err() != nil {
			return nil, fmt.Errorf("query PuppetDB at %s: %w", base.Host, err)
		}
		last = fmt.Errorf("query PuppetDB at %s: %w", base.Host, err)
	}
	return nil, last
}

func (c *Client) do(req *http.Request) error {
	_, err := c.read(req)
	return err
}

// read sends req and returns the body of a 2xx answer; an answer that
// refuses (ErrRefused) is an error wrapping it with PuppetDB's message.
func (c *Client) read(req *http.Request) ([]byte, error) {
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 256<<20))
	if err != nil {
		return nil, fmt.Errorf("read PuppetDB's answer: %w", err)
	}
	if resp.StatusCode/100 == 2 {
		return body, nil
	}
	msg := strings.TrimSpace(string(body))
	if len(msg) > 512 {
		msg = msg[:512] + "..."
	}
	err = fmt.Errorf("HTTP %d: %s", resp.StatusCode, msg)
	if refuses(resp.StatusCode) {
		return nil, fmt.Errorf("%w: %w", ErrRefused, err)
	}
	return nil, err
}

// Ping asks each URL for PuppetDB's version (GET /pdb/meta/v1/version)
// and returns nil when one answers: at start, to tell the operator whether
// PuppetDB is there and takes the farm's certificate.
func (c *Client) Ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var last error
	for _, base := range c.urls {
		u := *base
		u.Path += "/pdb/meta/v1/version"
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
		if err != nil {
			return err
		}
		req.Header.Set("Accept", "application/json")
		if _, err = c.read(req); err == nil {
			return nil
		}
		last = fmt.Errorf("%s: %w", base.Host, err)
	}
	return last
}

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/compilefarm/compilefarm/internal/procgroup"
)

// herd runs whole agent runs with bench/agentsim (its executable, a
// child): every run a new mTLS connection, pluginsync, the catalog request
// with the recorded agent's facts (only what facter measures anew
// changed), and a report of the served catalog's resources. Its agents
// are PREFIX-NNNNN.DOMAIN, their identities and run numbers kept in a
// state directory across invocations.
type herd struct {
	bin, state    string
	prefix        string
	domain        string
	agents        int
	work          string
	progressEvery time.Duration
}

// herdResult is what pdbbench reads of agentsim's --json.
type herdResult struct {
	Args        []string `json:"args"`
	Runs        int64    `json:"runs"`
	Failed      int64    `json:"failed_runs"`
	Errors      []string `json:"errors,omitempty"`
	Seconds     float64  `json:"seconds"`
	ReportBytes int64    `json:"report_bytes"` // mean per run, last round
	CatalogJSON int64    `json:"catalog_json_bytes"`
}

// name is agent i's certname (agentsim's --prefix and --domain).
func (h *herd) name(i int) string { return fmt.Sprintf("%s-%05d.%s", h.prefix, i, h.domain) }

// run runs rounds herds of every agent (each round's runs spread over
// window, at most concurrency at once) against b and returns their
// runs; label names its files and progress lines.
func (h *herd) run(ctx context.Context, b *broker, label string, rounds int, window time.Duration, concurrency int) (herdResult, error) {
	jsonPath := filepath.Join(h.work, "agentsim-"+label+".json")
	args := []string{"--target", b.addr, "--metrics", b.metrics, "--broker-pid", strconv.Itoa(b.pid),
		"--mode", "herd", "--agents", strconv.Itoa(h.agents), "--rounds", strconv.Itoa(rounds), "--window", window.String(),
		"--concurrency", strconv.Itoa(concurrency), "--warmup=false", "--prefix", h.prefix, "--domain", h.domain,
		"--state", h.state, "--progress", h.progressEvery.String(), "--timeout", "20m", "--json", jsonPath}
	res := herdResult{Args: args}
	cmd := exec.Command(h.bin, args...)
	// Its progress and its text results go with pdbbench's progress.
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	start := time.Now()
	g, err := procgroup.Start(cmd, 0)
	if err != nil {
		return res, fmt.Errorf("agentsim: %w", err)
	}
	select {
	case <-g.Done():
	case <-ctx.Done():
		g.Stop(10 * time.Second)
		return res, ctx.Err()
	}
	res.Seconds = time.Since(start).Seconds()
	runErr := cmd.ProcessState.ExitCode()
	var out struct {
		Rounds []struct {
			Runs        int64    `json:"runs"`
			Failed      int64    `json:"failed_runs"`
			Errors      []string `json:"errors"`
			ReportBytes int64    `json:"report_bytes"`
			CatalogJSON int64    `json:"catalog_json_bytes"`
		} `json:"rounds"`
	}
	b2, err := os.ReadFile(jsonPath)
	if err == nil {
		err = json.Unmarshal(b2, &out)
	}
	if err != nil {
		return res, fmt.Errorf("agentsim (exit %d) left no results: %w", runErr, err)
	}
	for _, rd := range out.Rounds {
		res.Runs += rd.Runs
		res.Failed += rd.Failed
		if len(res.Errors) < 3 {
			res.Errors = append(res.Errors, rd.Errors...)
		}
		if rd.ReportBytes > 0 {
			res.ReportBytes, res.CatalogJSON = rd.ReportBytes, rd.CatalogJSON
		}
	}
	if runErr != 0 {
		return res, fmt.Errorf("agentsim exited %d: %d of %d runs failed (%s)", runErr, res.Failed, res.Runs, strings.Join(res.Errors, "; "))
	}
	return res, nil
}

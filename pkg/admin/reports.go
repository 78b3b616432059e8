package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"

	"github.com/compilefarm/compilefarm/pkg/farm"
	"github.com/compilefarm/compilefarm/pkg/pcp/jobs"
)

// Reports reads the agent reports the front door keeps in the content
// store (farm.ContentStore's Get on farm.SpaceReports).
type Reports interface {
	Get(ctx context.Context, space farm.Space, d farm.Digest) ([]byte, error)
}

// ReportsPath is where GET /admin/v1/reports/{digest} serves a stored
// report: the job runner links a node's result to its run's report as
// ReportsPath + digest (farm.RunJobNode.ReportURL), so the path is the
// runner's, which cannot import this package.
const ReportsPath = jobs.ReportPath

// errNoReports answers report requests on a server without a content store.
const errNoReports = "this server keeps no agent reports (its operator API has no content store)"

// getReport serves a stored agent report as the agent sent it: the front
// door stores the report's JSON body uncompressed (frontdoor's storeReport
// puts the request body, which it parsed as JSON, as is).
func (s *Server) getReport(w http.ResponseWriter, r *http.Request) {
	if s.Reports == nil {
		replyStatus(w, http.StatusServiceUnavailable, "unavailable", errNoReports)
		return
	}
	d := farm.Digest(r.PathValue("digest"))
	if err := farm.ValidateAddress(farm.SpaceReports, d); err != nil {
		reply(w, nil, fmt.Errorf("report %w", err))
		return
	}
	body, err := s.Reports.Get(r.Context(), farm.SpaceReports, d)
	switch {
	case errors.Is(err, farm.ErrNotFound):
		replyStatus(w, http.StatusNotFound, "not-found", fmt.Sprintf(
			"no report %s is stored (the farm keeps only a summary of unchanged runs: see --full-report-every)", d))
		return
	case err != nil:
		reply(w, nil, fmt.Errorf("read report %s: %w", d, err))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write(body)
}

// replyStatus answers an error whose text and status are the route's own.
func replyStatus(w http.ResponseWriter, status int, kind, text string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(errorBody{Error: text, Kind: kind})
}

// Report returns the stored agent report with digest d (its JSON, as the
// agent sent it).
func (c *Client) Report(ctx context.Context, d farm.Digest) ([]byte, error) {
	path := ReportsPath + url.PathEscape(string(d))
	resp, err := c.send(ctx, http.MethodGet, path, nil)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("read broker answer to GET %s: %w", path, err)
	}
	return body, nil
}

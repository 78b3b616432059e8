package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// An agent's facts at its run number n (corpus.Churn) differ from those of
// every other run number in what facter measures: uptime grows, memory,
// filesystem usage and load move. Agents whose identities --state keeps
// go on numbering their runs from one invocation to the next, as a real
// agent's uptime goes on growing: else a herd measured by a second
// invocation, after a warm-up by a first, would send the warm-up's uptime,
// memory and load again, and the broker would see only new timestamps.

// runsFile is where --state records the agents' next run number; no
// certname's file (NAME.pem) has this name.
const runsFile = "runs.json"

// runState is runsFile's content.
type runState struct {
	// NextRun is the run number the agents' next run starts from: one more
	// than the highest any of them used.
	NextRun int `json:"next_run"`
}

// loadNextRun reads the run number the agents kept in dir go on from: 0
// when dir records none.
func loadNextRun(dir string) (int, error) {
	b, err := os.ReadFile(filepath.Join(dir, runsFile))
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	var st runState
	if err := json.Unmarshal(b, &st); err != nil {
		return 0, fmt.Errorf("%s: %w", filepath.Join(dir, runsFile), err)
	}
	if st.NextRun < 0 {
		return 0, fmt.Errorf("%s: next_run %d is negative", filepath.Join(dir, runsFile), st.NextRun)
	}
	return st.NextRun, nil
}

// saveNextRun records next in dir, replacing the file at once (a reader
// sees the old or the new number, never a torn file).
func saveNextRun(dir string, next int) error {
	b, err := json.Marshal(runState{NextRun: next})
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, ".runs-*.json")
	if err != nil {
		return err
	}
	_, err = tmp.Write(append(b, '\n'))
	err = errors.Join(err, tmp.Close())
	if err == nil {
		err = os.Rename(tmp.Name(), filepath.Join(dir, runsFile))
	}
	if err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("record the next run number in %s: %w", dir, err)
	}
	return nil
}

// nextRun is the run number after the highest one s's agents used: their
// first run number plus the most runs any of them started. Call it when
// no run is under way.
func (s *sim) nextRun() int {
	most := 0
	for _, a := range s.agents {
		most = max(most, a.runs)
	}
	return s.firstRun + most
}

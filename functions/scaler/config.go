package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/compilefarm/compilefarm/pkg/scaling"
)

// laneSpec is one object of COMPILEFARM_SCALER_LANES. The thresholds are
// optional Go durations; the lane's defaults (scaling.Urgent or
// scaling.Bulk) fill those left out.
type laneSpec struct {
	Lane    string `json:"lane"`    // "urgent" or "bulk"
	Queue   string `json:"queue"`   // the lane's SQS queue name (the metric's QueueName)
	Mapping string `json:"mapping"` // the lane's event source mapping UUID
	Min     int    `json:"min"`
	Max     int    `json:"max"`
	Step    int    `json:"step"`
	High    string `json:"high,omitempty"`    // scale up at or above this age
	Low     string `json:"low,omitempty"`     // scale down after LowFor at or below this age
	LowFor  string `json:"low_for,omitempty"` // how long the age must stay low
}

// lane is one lane the scaler evaluates.
type lane struct {
	Name, Queue, Mapping string
	Config               scaling.Config
}

// parseLanes reads the scaler's configuration: COMPILEFARM_SCALER_LANES, a
// JSON array of laneSpec, and COMPILEFARM_SCALER_COOLDOWN, a Go duration
// (default 2m). It says everything that is wrong, by lane.
func parseLanes(env func(string) string) ([]lane, error) {
	cooldown := scaling.DefaultCooldown
	if v := env("COMPILEFARM_SCALER_COOLDOWN"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			return nil, fmt.Errorf("COMPILEFARM_SCALER_COOLDOWN=%q is not a duration ≥ 0 such as 2m", v)
		}
		cooldown = d
	}
	raw := env("COMPILEFARM_SCALER_LANES")
	if raw == "" {
		return nil, errors.New(`COMPILEFARM_SCALER_LANES is not set: want a JSON array such as [{"lane":"bulk","queue":"NAME","mapping":"UUID","min":2,"max":200,"step":10}]`)
	}
	var specs []laneSpec
	dec := json.NewDecoder(bytes.NewReader([]byte(raw)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&specs); err != nil {
		return nil, fmt.Errorf("COMPILEFARM_SCALER_LANES is not a JSON array of lanes (fields lane, queue, mapping, min, max, step, and optional high, low, low_for): %w", err)
	}
	if len(specs) == 0 {
		return nil, errors.New("COMPILEFARM_SCALER_LANES lists no lane")
	}
	var lanes []lane
	var errs []error
	seen := map[string]bool{}
	for i, s := range specs {
		l, err := s.lane(cooldown)
		if err == nil && seen[s.Mapping] {
			err = fmt.Errorf("mapping %s is already another lane's", s.Mapping)
		}
		seen[s.Mapping] = true
		if err != nil {
			errs = append(errs, fmt.Errorf("COMPILEFARM_SCALER_LANES[%d] (%q): %w", i, s.Lane, err))
			continue
		}
		lanes = append(lanes, l)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return lanes, nil
}

func (s laneSpec) lane(cooldown time.Duration) (lane, error) {
	var errs []error
	if s.Lane != "urgent" && s.Lane != "bulk" {
		errs = append(errs, fmt.Errorf(`lane %q is not "urgent" or "bulk"`, s.Lane))
	}
	if s.Queue == "" {
		errs = append(errs, errors.New("queue (the SQS queue's name) is empty"))
	}
	if s.Mapping == "" {
		errs = append(errs, errors.New("mapping (the event source mapping's UUID) is empty"))
	}
	c := scaling.Config{Min: s.Min, Max: s.Max, Step: s.Step, Cooldown: cooldown}
	for _, f := range []struct {
		name, v string
		d       *time.Duration
	}{{"high", s.High, &c.High}, {"low", s.Low, &c.Low}, {"low_for", s.LowFor, &c.LowFor}} {
		if f.v == "" {
			continue
		}
		d, err := time.ParseDuration(f.v)
		if err != nil || d <= 0 {
			errs = append(errs, fmt.Errorf("%s %q is not a positive duration such as 30s", f.name, f.v))
			continue
		}
		*f.d = d
	}
	c = c.WithDefaults(s.Lane)
	if cooldown == 0 {
		c.Cooldown = 0 // WithDefaults took 0 for "unset"
	}
	if err := c.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return lane{}, err
	}
	return lane{Name: s.Lane, Queue: s.Queue, Mapping: s.Mapping, Config: c}, nil
}

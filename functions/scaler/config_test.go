package main

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/compilefarm/compilefarm/pkg/scaling"
)

func envOf(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestParseLanes(t *testing.T) {
	const both = `[{"lane":"urgent","queue":"cf-urgent","mapping":"u-1","min":2,"max":50,"step":2},
		{"lane":"bulk","queue":"cf-bulk","mapping":"b-1","min":2,"max":200,"step":10,"high":"5m","low":"1m","low_for":"15m"}]`
	lanes, err := parseLanes(envOf(map[string]string{"COMPILEFARM_SCALER_LANES": both, "COMPILEFARM_SCALER_COOLDOWN": "3m"}))
	if err != nil {
		t.Fatal(err)
	}
	if len(lanes) != 2 {
		t.Fatalf("%d lanes, want 2", len(lanes))
	}
	u, b := lanes[0], lanes[1]
	if u.Name != "urgent" || u.Queue != "cf-urgent" || u.Mapping != "u-1" || u.Config.Min != 2 || u.Config.Max != 50 || u.Config.Step != 2 {
		t.Errorf("urgent lane %+v", u)
	}
	if u.Config.High != scaling.Urgent.Config.High || u.Config.Low != scaling.Urgent.Config.Low || u.Config.Cooldown != 3*time.Minute {
		t.Errorf("urgent lane's defaults: %+v", u.Config)
	}
	if b.Config.High != 5*time.Minute || b.Config.Low != time.Minute || b.Config.LowFor != 15*time.Minute || b.Config.Cooldown != 3*time.Minute {
		t.Errorf("bulk lane's thresholds: %+v", b.Config)
	}

	lanes, err = parseLanes(envOf(map[string]string{"COMPILEFARM_SCALER_LANES": `[{"lane":"bulk","queue":"q","mapping":"m","min":2,"max":3,"step":1}]`}))
	if err != nil || lanes[0].Config.Cooldown != scaling.DefaultCooldown || lanes[0].Config.High != scaling.Bulk.Config.High {
		t.Errorf("defaults: %+v, %v", lanes, err)
	}
	lanes, err = parseLanes(envOf(map[string]string{"COMPILEFARM_SCALER_LANES": `[{"lane":"bulk","queue":"q","mapping":"m","min":2,"max":3,"step":1}]`, "COMPILEFARM_SCALER_COOLDOWN": "0s"}))
	if err != nil || lanes[0].Config.Cooldown != 0 {
		t.Errorf("cool-down 0s: %+v, %v", lanes, err)
	}
}

func TestParseLanesRejects(t *testing.T) {
	lane := func(extra string) string {
		return `[{"lane":"bulk","queue":"q","mapping":"m","min":2,"max":100,"step":10` + extra + `}]`
	}
	tests := []struct {
		name, lanes, cooldown string
		want                  []string
	}{
		{"unset", "", "", []string{"COMPILEFARM_SCALER_LANES is not set"}},
		{"not JSON", "bulk", "", []string{"not a JSON array"}},
		{"an object, not an array", `{"lane":"bulk"}`, "", []string{"not a JSON array"}},
		{"no lane", `[]`, "", []string{"lists no lane"}},
		{"unknown field", lane(`,"hihg":"1m"`), "", []string{`unknown field "hihg"`}},
		{"bad lane name", `[{"lane":"fast","queue":"q","mapping":"m","min":2,"max":100,"step":10}]`, "", []string{`lane "fast" is not "urgent" or "bulk"`}},
		{"everything missing", `[{"lane":"bulk"}]`, "", []string{"queue", "mapping", "min 0", "step 0"}},
		{"min below AWS's 2", lane(`,"min":1`), "", []string{"min 1 is not between 2 and 1000"}},
		{"max above AWS's 1000", `[{"lane":"bulk","queue":"q","mapping":"m","min":2,"max":5000,"step":10}]`, "", []string{"max 5000"}},
		{"bad duration", lane(`,"high":"soon"`), "", []string{`high "soon" is not a positive duration`}},
		{"no hysteresis", lane(`,"high":"1m","low":"1m"`), "", []string{"no hysteresis"}},
		{"bad cool-down", lane(""), "two minutes", []string{`COMPILEFARM_SCALER_COOLDOWN="two minutes"`}},
		{"one mapping, two lanes", `[{"lane":"bulk","queue":"q","mapping":"m","min":2,"max":100,"step":10},{"lane":"urgent","queue":"u","mapping":"m","min":2,"max":100,"step":10}]`, "", []string{"COMPILEFARM_SCALER_LANES[1]", "already another lane's"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := parseLanes(envOf(map[string]string{"COMPILEFARM_SCALER_LANES": tt.lanes, "COMPILEFARM_SCALER_COOLDOWN": tt.cooldown}))
			if err == nil {
				t.Fatal("parseLanes accepted it")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

// A bad configuration fails the init, before any AWS call.
func TestSetupFailsOnBadConfiguration(t *testing.T) {
	_, err := setup(context.Background(), envOf(map[string]string{"COMPILEFARM_SCALER_LANES": `[{"lane":"bulk"}]`}), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err == nil || !strings.Contains(err.Error(), "COMPILEFARM_SCALER_LANES[0]") {
		t.Fatalf("setup: %v", err)
	}
}

package frontdoor

import (
	"encoding/json"
	"sync/atomic"
	"testing"
)

// TestStatusServicesReportsExtraServices: the services a farm adds (the PCP
// broker) are reported beside Puppet's own, with the status they give at
// the time of the request.
func TestStatusServicesReportsExtraServices(t *testing.T) {
	r := newRig(t)
	var conns atomic.Int64
	r.fd.Services = []ServiceStatus{{Name: "broker-service", Status: func() any { return map[string]int64{"connections": conns.Load()} }}}
	for _, want := range []int64{0, 3} {
		conns.Store(want)
		resp := r.do(r.anon, "GET", "/status/v1/services", nil, nil)
		if resp.status != 200 {
			t.Fatalf("status %d: %s", resp.status, resp.body)
		}
		var got map[string]struct {
			State  string           `json:"state"`
			Status map[string]int64 `json:"status"`
		}
		if err := json.Unmarshal([]byte(resp.body), &got); err != nil {
			t.Fatal(err)
		}
		b, ok := got["broker-service"]
		if !ok || b.State != "running" || b.Status["connections"] != want {
			t.Errorf("broker-service = %+v (present %v), want running with %d connections", b, ok, want)
		}
		if _, ok := got["server"]; !ok {
			t.Error("Puppet's own services are gone")
		}
	}
}

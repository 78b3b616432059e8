package brokermetrics

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestScrapeAndCompilesBetween(t *testing.T) {
	ok := 3.0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "# HELP x\ngo_goroutines 12\nprocess_cpu_seconds_total 1.5\n"+
			"compilefarm_compiles_total{result=\"ok\"} %v\ncompilefarm_compiles_total{result=\"unchanged\"} 1\n"+
			"compilefarm_queue_depth{lane=\"urgent\"} 0\n", ok)
	}))
	defer srv.Close()
	before, err := Scrape(context.Background(), srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := before["go_goroutines"]; ok || before["process_cpu_seconds_total"] != 1.5 {
		t.Errorf("samples = %v", before)
	}
	ok = 5
	after, err := Scrape(context.Background(), srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	c := CompilesBetween(before, after)
	if c.OK != 2 || c.Unchanged != 0 || c.Total() != 2 {
		t.Errorf("CompilesBetween = %+v", c)
	}
	if d := CounterDeltas(before, after); len(d) != 1 || d[`compiles_total{result="ok"}`] != 2 {
		t.Errorf("CounterDeltas = %v", d)
	}
	if err := WaitDrained(context.Background(), srv.URL); err != nil {
		t.Errorf("WaitDrained: %v", err)
	}
	if s, err := Scrape(context.Background(), ""); s != nil || err != nil {
		t.Errorf("Scrape with no URL = %v, %v", s, err)
	}
}

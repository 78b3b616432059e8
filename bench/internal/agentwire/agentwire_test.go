package agentwire

import (
	"encoding/json"
	"strings"
	"testing"
)

// The agent's double encoding, applied to the decoded recording, must give
// back the recorded bytes exactly.
func TestEscapeRoundTrip(t *testing.T) {
	doc, err := DecodeFacts(RecordedCatalogRequest)
	if err != nil {
		t.Fatal(err)
	}
	fields, err := SplitForm(string(RecordedCatalogRequest))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fields {
		if f.Name == "facts" {
			if got := Escape(Escape(doc)); got != f.Value {
				t.Fatalf("re-encoded facts differ from the recording (len %d vs %d)", len(got), len(f.Value))
			}
			return
		}
	}
	t.Fatal("no facts field")
}

func TestRenameFacts(t *testing.T) {
	doc, err := DecodeFacts(RecordedCatalogRequest)
	if err != nil {
		t.Fatal(err)
	}
	out, err := RenameFacts(doc, "sim-00042.agentsim.test")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out, "agent1") {
		t.Errorf("the renamed facts still name agent1")
	}
	var d struct {
		Values map[string]any `json:"values"`
	}
	if err := json.Unmarshal([]byte(out), &d); err != nil {
		t.Fatal(err)
	}
	if d.Values["hostname"] != "sim-00042" || len(d.Values) < 100 {
		t.Errorf("hostname %v, %d facts", d.Values["hostname"], len(d.Values))
	}
}

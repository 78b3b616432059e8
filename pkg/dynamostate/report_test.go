package dynamostate

import (
	"errors"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/compilefarm/compilefarm/pkg/farm"
)

// TestOverlayReport: what decodeNode does with the report attribute
// RecordReport writes, item by item (no emulator).
func TestOverlayReport(t *testing.T) {
	t0 := time.Date(2024, 5, 17, 9, 30, 0, 0, time.UTC)
	attr := func(status string, at time.Time) types.AttributeValue {
		return &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{
			attrReportAt:      &types.AttributeValueMemberN{Value: "0"}, // only the condition reads it
			attrReportSummary: &types.AttributeValueMemberS{Value: `{"status":"` + status + `","at":"` + at.Format(time.RFC3339Nano) + `"}`},
		}}
	}
	own := &farm.ReportSummary{Status: "own", At: t0}
	tests := []struct {
		name string
		attr types.AttributeValue
		own  *farm.ReportSummary
		want string // status of the Report after; "" for none
		bad  bool
	}{
		{"no attribute, no report", nil, nil, "", false},
		{"no attribute", nil, own, "own", false},
		{"recorded only", attr("recorded", t0), nil, "recorded", false},
		{"recorded newer", attr("recorded", t0.Add(time.Second)), own, "recorded", false},
		{"recorded as old", attr("recorded", t0), own, "recorded", false},
		{"recorded older", attr("recorded", t0.Add(-time.Second)), own, "own", false},
		{"not a map", &types.AttributeValueMemberS{Value: "{}"}, own, "", true},
		{"map without summary", &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{}}, own, "", true},
		{"summary not JSON", &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{
			attrReportSummary: &types.AttributeValueMemberS{Value: "{"}}}, own, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			item := map[string]types.AttributeValue{}
			if tt.attr != nil {
				item[AttrReport] = tt.attr
			}
			n := farm.Node{Certname: "web01.example.com", Report: tt.own}
			err := overlayReport(item, &n)
			if tt.bad {
				if !errors.Is(err, farm.ErrInvalid) {
					t.Fatalf("overlayReport = %v, want an error wrapping farm.ErrInvalid", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := ""
			if n.Report != nil {
				got = n.Report.Status
			}
			if got != tt.want {
				t.Errorf("Report status %q, want %q", got, tt.want)
			}
		})
	}
}

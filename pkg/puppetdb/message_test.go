package puppetdb

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/compilefarm/compilefarm/pkg/farm"
)

func TestMessageValidate(t *testing.T) {
	at := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	d := farm.DigestOf([]byte("x"))
	tests := []struct {
		name string
		m    Message
		ok   bool
	}{
		{"facts", Message{Kind: KindFacts, Node: "a.test", At: at, Facts: d}, true},
		{"facts with node info", Message{Kind: KindFacts, Node: "a.test", At: at, Facts: d, NodeInfo: d}, true},
		{"facts without a digest", Message{Kind: KindFacts, Node: "a.test", At: at}, false},
		{"facts with a bad node info", Message{Kind: KindFacts, Node: "a.test", At: at, Facts: d, NodeInfo: "zz"}, false},
		{"catalog", Message{Kind: KindCatalog, Node: "a.test", At: at, CatalogUUID: "u"}, true},
		{"catalog without uuid", Message{Kind: KindCatalog, Node: "a.test", At: at}, false},
		{"report inline", Message{Kind: KindReport, Node: "a.test", At: at, ReportGzip: []byte{1}}, true},
		{"report spilled", Message{Kind: KindReport, Node: "a.test", At: at, Report: d}, true},
		{"report both", Message{Kind: KindReport, Node: "a.test", At: at, Report: d, ReportGzip: []byte{1}}, false},
		{"report neither", Message{Kind: KindReport, Node: "a.test", At: at}, false},
		{"no time", Message{Kind: KindCatalog, Node: "a.test", CatalogUUID: "u"}, false},
		{"bad certname", Message{Kind: KindCatalog, Node: "A B", At: at, CatalogUUID: "u"}, false},
		{"unknown kind", Message{Kind: "deactivate node", Node: "a.test", At: at}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.m.Validate()
			if (err == nil) != tt.ok || (err != nil && !errors.Is(err, farm.ErrInvalid)) {
				t.Fatalf("Validate = %v, want ok %v (errors wrap ErrInvalid)", err, tt.ok)
			}
			om, err := tt.m.Encode()
			if (err == nil) != tt.ok {
				t.Fatalf("Encode = %v", err)
			}
			if !tt.ok {
				return
			}
			if om.Group != tt.m.Node {
				t.Errorf("group %q, want the node %q", om.Group, tt.m.Node)
			}
			back, err := Decode(om.Body)
			if err != nil || back.Kind != tt.m.Kind || !back.At.Equal(tt.m.At) || back.Facts != tt.m.Facts ||
				back.CatalogUUID != tt.m.CatalogUUID || !bytes.Equal(back.ReportGzip, tt.m.ReportGzip) || back.Report != tt.m.Report {
				t.Errorf("Decode(Encode(m)) = %+v, %v; want %+v", back, err, tt.m)
			}
		})
	}
	if _, err := Decode([]byte("{")); !errors.Is(err, farm.ErrInvalid) {
		t.Errorf("Decode of bad JSON: %v, want ErrInvalid", err)
	}
}

func TestParseURLs(t *testing.T) {
	tests := []struct {
		in, want, err string
	}{
		{"https://puppetdb.example.com:8081", "https://puppetdb.example.com:8081", ""},
		{"https://a:8081/, https://b:8081", "https://a:8081 https://b:8081", ""},
		{"http://127.0.0.1:8080", "http://127.0.0.1:8080", ""},
		{"http://localhost:8080", "http://localhost:8080", ""},
		{"http://[::1]:8080", "http://[::1]:8080", ""},
		{"http://puppetdb.example.com:8080", "", "plain http only to a loopback address"},
		{"ftp://x", "", "want https://"},
		{"puppetdb:8081", "", "want https://"},
		{" , ", "", "no PuppetDB URL"},
	}
	for _, tt := range tests {
		urls, err := ParseURLs(tt.in)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("ParseURLs(%q) = %v, want an error with %q", tt.in, err, tt.err)
			}
			continue
		}
		var got []string
		for _, u := range urls {
			got = append(got, u.String())
		}
		if err != nil || strings.Join(got, " ") != tt.want {
			t.Errorf("ParseURLs(%q) = %v, %v; want %s", tt.in, got, err, tt.want)
		}
	}
}

func TestBackoff(t *testing.T) {
	d := &Drainer{MaxBackoff: time.Minute}
	for _, tt := range []struct {
		attempts int
		want     time.Duration
	}{{0, time.Second}, {1, time.Second}, {2, 2 * time.Second}, {4, 8 * time.Second}, {7, time.Minute}, {1000, time.Minute}} {
		if got := d.backoffFor(tt.attempts); got != tt.want {
			t.Errorf("backoffFor(%d) = %v, want %v", tt.attempts, got, tt.want)
		}
	}
	if got := (&Drainer{}).backoffFor(50); got != 5*time.Minute {
		t.Errorf("default most = %v, want 5m", got)
	}
}

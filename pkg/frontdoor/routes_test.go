package frontdoor

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestRouterFind: paths are matched as sent (no cleaning), wildcards get
// unescaped values, "{x...}" keeps empty segments, and a path some route
// has with another method is told apart from an unknown one.
func TestRouterFind(t *testing.T) {
	var got string
	h := func(name string) http.HandlerFunc { return func(http.ResponseWriter, *http.Request) { got = name } }
	var rt router
	rt.handle("GET /a/{name}", h("get-name"))
	rt.handle("PUT /a/{name}", h("put-name"))
	rt.handle("GET /b/{rest...}", h("get-rest"))
	rt.handle("HEAD /b/{rest...}", h("head-rest"))
	rt.handle("GET /c", h("get-c"))

	tests := []struct {
		method, target string
		want           string // handler; "" for none
		known          bool
		values         map[string]string
	}{
		{"GET", "/a/x", "get-name", true, map[string]string{"name": "x"}},
		{"PUT", "/a/x", "put-name", true, map[string]string{"name": "x"}},
		{"HEAD", "/a/x", "get-name", true, nil},
		{"DELETE", "/a/x", "", true, nil},
		{"GET", "/a/x%2Fy", "get-name", true, map[string]string{"name": "x/y"}},
		{"GET", "/a/my%20node", "get-name", true, map[string]string{"name": "my node"}},
		{"GET", "/a/", "", false, nil},
		{"GET", "/a", "", false, nil},
		{"GET", "/a/x/y", "", false, nil},
		{"GET", "//a/x", "", false, nil},
		{"GET", "/a//x", "", false, nil},
		{"GET", "/b/sha256/abc//tmp/my%20file", "get-rest", true, map[string]string{"rest": "sha256/abc//tmp/my file"}},
		{"HEAD", "/b/sha256/abc//tmp/x", "head-rest", true, map[string]string{"rest": "sha256/abc//tmp/x"}},
		{"GET", "/b/", "get-rest", true, map[string]string{"rest": ""}},
		{"GET", "/b/x/", "get-rest", true, map[string]string{"rest": "x/"}},
		{"GET", "/b", "", false, nil},
		{"POST", "/b/x", "", true, nil},
		{"GET", "/c", "get-c", true, nil},
		{"GET", "/c/", "", false, nil},
		{"GET", "/%63", "get-c", true, nil}, // literals match unescaped, as with http.ServeMux
		{"GET", "/nowhere", "", false, nil},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.target, func(t *testing.T) {
			r := httptest.NewRequest(tt.method, "https://farm"+tt.target, nil)
			rte, known := rt.find(r)
			got = ""
			if rte != nil {
				rte.handler(nil, r)
			}
			if got != tt.want || known != tt.known {
				t.Fatalf("find = %q, known %v; want %q, known %v", got, known, tt.want, tt.known)
			}
			for k, v := range tt.values {
				if r.PathValue(k) != v {
					t.Errorf("PathValue(%q) = %q, want %q", k, r.PathValue(k), v)
				}
			}
		})
	}
}

// TestUnknownRoutes: whatever an agent (or anything else) asks, the front
// door answers in Puppet's shape and never redirects.
func TestUnknownRoutes(t *testing.T) {
	r := newRig(t)
	a1 := r.client("agent1.example.test")
	a1.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	tests := []struct {
		method, path string
		status       int
		want         string // JSON message, or the start of a plain 403
	}{
		{"GET", "/puppet/v3/nosuch", 404, "Not Found: No route for GET /puppet/v3/nosuch"},
		{"GET", "/puppet/v3/nosuch/thing?environment=production", 404, "Not Found: No route for GET /puppet/v3/nosuch/thing"},
		{"GET", "/", 404, "Not Found: No route for GET /"},
		{"PUT", "/elsewhere", 404, "Not Found: No route for PUT /elsewhere"},
		{"GET", "/puppet/v3//environments", 404, "Not Found: No route for GET /puppet/v3//environments"},
		{"GET", "//puppet/v3/environments", 404, "Not Found: No route for GET //puppet/v3/environments"},
		{"GET", "/puppet/v3/environments/", 404, "Not Found: No route for GET /puppet/v3/environments/"},
		{"GET", "/puppet/v3/file_content", 404, "Not Found: No route for GET /puppet/v3/file_content"},
		{"GET", "/puppet/v3/node/agent1.example.test/extra", 404, "Not Found: No route for GET /puppet/v3/node/agent1.example.test/extra"},
		{"GET", "/puppet/v3/file_content//modules/pupdemo/static.txt?environment=production", 400, ""},
		{"GET", "/puppet/v3/./environments", 400, "Bad Request: path \"/puppet/v3/./environments\" has a '.' or '..' segment"},
		{"DELETE", "/puppet/v3/catalog/agent1.example.test", 403, "Forbidden request: /puppet/v3/catalog/agent1.example.test (method :delete)"},
		{"PUT", "/puppet/v3/environments", 403, "Forbidden request: /puppet/v3/environments (method :put)"},
		{"POST", "/status/v1/simple", 403, "Forbidden request: /status/v1/simple (method :post)"},
		{"DELETE", "/puppet-ca/v1/certificate_request/agent1.example.test", 403, "Forbidden request"},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			got := r.do(a1, tt.method, tt.path, nil, nil)
			if got.status != tt.status || got.header.Get("Location") != "" {
				t.Fatalf("%d (Location %q) %s, want %d and no redirect", got.status, got.header.Get("Location"), got.body, tt.status)
			}
			if tt.status == 403 {
				if !strings.HasPrefix(got.body, tt.want) || got.header.Get("Content-Type") != "" {
					t.Fatalf("403 %q with content type %q, want plain %q", got.body, got.header.Get("Content-Type"), tt.want)
				}
				return
			}
			var e puppetError
			if err := json.Unmarshal([]byte(got.body), &e); err != nil || !strings.HasPrefix(got.header.Get("Content-Type"), "application/json") {
				t.Fatalf("body %q (%s) is not Puppet's JSON error: %v", got.body, got.header.Get("Content-Type"), err)
			}
			wantKind := "RUNTIME_ERROR"
			if tt.status == 404 {
				wantKind = "HANDLER_NOT_FOUND"
			}
			if (tt.want != "" && e.Message != tt.want) || e.IssueKind != wantKind {
				t.Fatalf("got %+v, want message %q, kind %s", e, tt.want, wantKind)
			}
		})
	}
	// HEAD of a GET route answers as GET does, without a body.
	if got := r.do(r.anon, "HEAD", "/status/v1/simple", nil, nil); got.status != 200 || got.body != "" {
		t.Errorf("HEAD /status/v1/simple: %d %q", got.status, got.body)
	}
}

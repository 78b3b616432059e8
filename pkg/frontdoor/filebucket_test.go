package frontdoor

import (
	"bytes"
	"context"
	"crypto/md5"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/compilefarm/compilefarm/pkg/farm"
)

func sha256Hex(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }
func md5Hex(b []byte) string    { s := md5.Sum(b); return hex.EncodeToString(s[:]) }

const bucketPath = "/puppet/v3/file_bucket_file/"

// agentBucketHeaders are what Puppet 7's HTTP client sends to the bucket.
var agentBucketHeaders = map[string]string{"Accept": "application/octet-stream", "Content-Type": "application/octet-stream"}

// TestFileBucketRoundTrip walks through what the dipper does (HEAD, then PUT
// when the bucket does not have the file) and what `puppet filebucket get`
// does, with both digest algorithms the farm takes.
func TestFileBucketRoundTrip(t *testing.T) {
	r := newRig(t)
	a1 := r.client("agent1.example.test")
	a2 := r.client("agent2.example.test")
	ctx := context.Background()
	for _, algo := range []string{"sha256", "md5"} {
		t.Run(algo, func(t *testing.T) {
			content := []byte("old content of /etc/motd, backed up with " + algo + "\n\x00binary\xff")
			sum := sha256Hex(content)
			if algo == "md5" {
				sum = md5Hex(content)
			}
			key := algo + "/" + sum
			q := "?environment=production"
			withPath := bucketPath + key + "//etc/motd" + q

			if got := r.do(a1, "HEAD", withPath, nil, agentBucketHeaders); got.status != 404 {
				t.Fatalf("HEAD before the backup: %d, want 404", got.status)
			}
			put := r.do(a1, "PUT", withPath, content, agentBucketHeaders)
			if put.status != 200 || put.body != "" || put.header.Get("Content-Type") != "application/octet-stream" {
				t.Fatalf("PUT: %d %q %q, want 200, no body, application/octet-stream", put.status, put.body, put.header.Get("Content-Type"))
			}
			if ok, err := r.store.Has(ctx, farm.SpaceFilebucket, farm.DigestOf(content)); err != nil || !ok {
				t.Fatalf("the content is not in the filebucket space: %v %v", ok, err)
			}
			// A second backup of the same file changes nothing.
			if again := r.do(a1, "PUT", withPath, content, agentBucketHeaders); again.status != 200 {
				t.Fatalf("PUT again: %d %s", again.status, again.body)
			}

			tests := []struct {
				name, method, path string
				status             int
				body               string
			}{
				{"HEAD with the path", "HEAD", withPath, 200, ""},
				{"HEAD without a path", "HEAD", bucketPath + key + q, 200, ""},
				{"HEAD with an empty path", "HEAD", bucketPath + key + "/" + q, 200, ""},
				{"HEAD with another path", "HEAD", bucketPath + key + "//etc/issue" + q, 404, ""},
				{"GET without a path", "GET", bucketPath + key + q, 200, string(content)},
				{"GET with the path", "GET", withPath, 200, string(content)},
				{"GET by another node", "GET", bucketPath + key + q, 200, string(content)},
				{"GET with another path", "GET", bucketPath + key + "//etc/issue" + q, 404,
					`{"message":"Not Found: Could not find file_bucket_file ` + key + `//etc/issue","issue_kind":"RESOURCE_NOT_FOUND"}`},
			}
			for _, tt := range tests {
				t.Run(tt.name, func(t *testing.T) {
					c := a1
					if strings.Contains(tt.name, "another node") {
						c = a2
					}
					got := r.do(c, tt.method, tt.path, nil, agentBucketHeaders)
					if got.status != tt.status || strings.TrimSpace(got.body) != tt.body {
						t.Fatalf("%s %s: %d %q, want %d %q", tt.method, tt.path, got.status, got.body, tt.status, tt.body)
					}
					if tt.method == "GET" && tt.status == 200 && got.header.Get("Content-Type") != "application/octet-stream" {
						t.Errorf("content type %q", got.header.Get("Content-Type"))
					}
				})
			}
		})
	}
	// The other algorithm's sum of the same bytes is not a name of them.
	content := []byte("only backed up with sha256")
	r.do(a1, "PUT", bucketPath+"sha256/"+sha256Hex(content)+"?environment=production", content, agentBucketHeaders)
	if got := r.do(a1, "GET", bucketPath+"md5/"+md5Hex(content)+"?environment=production", nil, nil); got.status != 404 {
		t.Errorf("GET by the md5 of content backed up by sha256: %d, want 404", got.status)
	}
}

// TestFileBucketRefusals: bad requests get Puppet's status and message and
// store nothing.
func TestFileBucketRefusals(t *testing.T) {
	r := newRig(t)
	a1 := r.client("agent1.example.test")
	content := []byte("the file as it was")
	other := []byte("the file as it is now")
	sha, md := sha256Hex(content), md5Hex(content)
	q := "?environment=production"
	tests := []struct {
		name         string
		client       *http.Client
		method, path string
		body         []byte
		status       int
		want         string // in the body
	}{
		{"sha256 of other bytes", a1, "PUT", bucketPath + "sha256/" + sha + "//etc/motd" + q, other, 400,
			`the 21 bytes sent have the sha256 sum ` + sha256Hex(other) + `, not ` + sha + `: nothing was stored`},
		{"md5 of other bytes", a1, "PUT", bucketPath + "md5/" + md + q, other, 400, `have the md5 sum ` + md5Hex(other)},
		{"unsupported algorithm", a1, "PUT", bucketPath + "sha512/" + sha + sha + q, content, 400,
			`Bad Request: Unsupported checksum type \"sha512\"`},
		{"unsupported algorithm on GET", a1, "GET", bucketPath + "sha1/" + sha[:40] + q, nil, 400, `Unsupported checksum type \"sha1\"`},
		{"uppercase sum", a1, "PUT", bucketPath + "sha256/" + strings.ToUpper(sha) + q, content, 400, `Invalid checksum`},
		{"short sum", a1, "HEAD", bucketPath + "md5/" + md[:31] + q, nil, 400, ``},
		{"no sum", a1, "GET", bucketPath + "sha256" + q, nil, 400, `Invalid checksum \"\"`},
		{"no environment", a1, "PUT", bucketPath + "sha256/" + sha, content, 400, `An environment parameter must be specified`},
		{"unknown environment", a1, "PUT", bucketPath + "sha256/" + sha + "?environment=nosuch", content, 404, `Could not find environment 'nosuch'`},
		{"no client certificate", r.anon, "PUT", bucketPath + "sha256/" + sha + q, content, 403,
			`Forbidden request: /puppet/v3/file_bucket_file/sha256/` + sha + ` (method :put)`},
		{"no client certificate, GET", r.anon, "GET", bucketPath + "sha256/" + sha + q, nil, 403, `Forbidden request`},
		{"DELETE", a1, "DELETE", bucketPath + "sha256/" + sha + q, nil, 403, `(method :delete)`},
		{"POST", a1, "POST", bucketPath + "sha256/" + sha + q, content, 403, `(method :post)`},
		{"list_all", a1, "GET", bucketPath + "sha256/" + q + "&list_all=true", nil, 400, `Bad Request: Listing remote file buckets is not allowed`},
		{"diff_with", a1, "GET", bucketPath + "sha256/" + sha + q + "&diff_with=" + sha, nil, 501, `does not diff filebucket files`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := r.do(tt.client, tt.method, tt.path, tt.body, agentBucketHeaders)
			if got.status != tt.status || !strings.Contains(got.body, tt.want) {
				t.Fatalf("%s %s: %d %q, want %d with %q", tt.method, tt.path, got.status, got.body, tt.status, tt.want)
			}
			switch {
			case tt.status == 403:
				if ct := got.header.Get("Content-Type"); ct != "" {
					t.Errorf("403 with content type %q, want none (Puppet Server's)", ct)
				}
			case tt.method != "HEAD":
				var e puppetError
				if err := json.Unmarshal([]byte(got.body), &e); err != nil || e.IssueKind == "" {
					t.Errorf("body %q is not Puppet's JSON error: %v", got.body, err)
				}
			}
		})
	}
	for _, b := range [][]byte{content, other} {
		if ok, _ := r.store.Has(context.Background(), farm.SpaceFilebucket, farm.DigestOf(b)); ok {
			t.Errorf("a refused request stored %q", b)
		}
	}
	if _, err := r.store.GetName(context.Background(), farm.SpaceFilebucket, "md5/"+md); err == nil {
		t.Error("a refused request named the md5 sum")
	}
}

// TestFileBucketMD5Collision: content whose md5 sum already names other
// content is refused as Puppet refuses it, and the first stays.
func TestFileBucketMD5Collision(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	a1 := r.client("agent1.example.test")
	first, second := []byte("first"), []byte("second, same md5 (pretend)")
	sum := md5Hex(second)
	d, err := r.store.Put(ctx, farm.SpaceFilebucket, first)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.store.PutName(ctx, farm.SpaceFilebucket, "md5/"+sum, d); err != nil {
		t.Fatal(err)
	}
	got := r.do(a1, "PUT", bucketPath+"md5/"+sum+"//etc/x?environment=production", second, agentBucketHeaders)
	if got.status != 409 || !strings.Contains(got.body, "Existing backup and new file have different content but same checksum, {md5}"+sum) {
		t.Fatalf("PUT of a colliding file: %d %s", got.status, got.body)
	}
	if get := r.do(a1, "GET", bucketPath+"md5/"+sum+"?environment=production", nil, nil); get.status != 200 || get.body != "first" {
		t.Fatalf("GET after the collision: %d %q, want the first content", get.status, get.body)
	}
	if get := r.do(a1, "GET", bucketPath+"md5/"+sum+"//etc/x?environment=production", nil, nil); get.status != 404 {
		t.Fatalf("GET with the refused backup's path: %d, want 404", get.status)
	}
}

// inProcess serves fd's handler to a request from agent1's certificate
// without a network, for settings a test changes.
func (r *rig) inProcess(fd *Server, method, path string, body []byte) *httptest.ResponseRecorder {
	r.t.Helper()
	leaf, err := x509.ParseCertificate(r.certs["agent1.example.test"].Certificate[0])
	if err != nil {
		r.t.Fatal(err)
	}
	req := httptest.NewRequest(method, path, bytes.NewReader(body))
	req.TLS = &tls.ConnectionState{PeerCertificates: []*x509.Certificate{leaf}, VerifiedChains: [][]*x509.Certificate{{leaf}}}
	w := httptest.NewRecorder()
	fd.Handler().ServeHTTP(w, req)
	return w
}

func TestFileBucketLimits(t *testing.T) {
	r := newRig(t)
	content := []byte("eleven byte")
	path := bucketPath + "sha256/" + sha256Hex(content) + "?environment=production"

	small := *r.fd
	small.MaxBucketFile = 10
	if w := r.inProcess(&small, "PUT", path, content); w.Code != 413 || !strings.Contains(w.Body.String(), "the limit is 10") {
		t.Errorf("PUT of 11 bytes with a limit of 10: %d %s", w.Code, w.Body)
	}
	if ok, _ := r.store.Has(context.Background(), farm.SpaceFilebucket, farm.DigestOf(content)); ok {
		t.Error("a file over the limit was stored")
	}
	small.MaxBucketFile = 11
	if w := r.inProcess(&small, "PUT", path, content); w.Code != 200 {
		t.Errorf("PUT of 11 bytes with a limit of 11: %d %s", w.Code, w.Body)
	}

	none := *r.fd
	none.Bucket = nil
	w := r.inProcess(&none, "GET", path, nil)
	if w.Code != 404 || !strings.Contains(w.Body.String(), `"issue_kind":"HANDLER_NOT_FOUND"`) {
		t.Errorf("GET with no bucket: %d %s, want 404 HANDLER_NOT_FOUND", w.Code, w.Body)
	}
}

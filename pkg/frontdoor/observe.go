package frontdoor

import (
	"io"
	"net/http"
	"strings"
	"sync"

	"github.com/compilefarm/compilefarm/pkg/metrics"
)

// endpointOf is the endpoint label (metrics.Endpoint*) of a route's path
// pattern.
func endpointOf(path string) string {
	switch {
	case strings.HasPrefix(path, "/puppet/v3/"):
		res, _, _ := strings.Cut(strings.TrimPrefix(path, "/puppet/v3/"), "/")
		switch res {
		case "catalog", "node", "facts", "report", "file_metadata", "file_metadatas", "file_content", "environments":
			return res // the same names as metrics.Endpoint*
		case "static_file_content":
			return metrics.EndpointFileContent
		case "file_bucket_file":
			return metrics.EndpointFileBucket
		}
	case strings.HasPrefix(path, "/puppet-ca/"):
		return metrics.EndpointCA
	case strings.HasPrefix(path, "/status/"):
		return metrics.EndpointStatus
	case strings.HasPrefix(path, OperatorPrefix+"/"):
		return metrics.EndpointOperator
	}
	return metrics.EndpointOther
}

// statusWriter records the status code a handler writes. It keeps
// http.Flusher and io.ReaderFrom (sendfile) of the writer it wraps, and
// unwraps for http.ResponseController (the read deadline of drainBody).
// Writers are pooled: the front door takes no allocation per request for
// its metrics.
type statusWriter struct {
	http.ResponseWriter
	code int // 0 until a final status is written
}

var statusWriters = sync.Pool{New: func() any { return new(statusWriter) }}

func newStatusWriter(w http.ResponseWriter) *statusWriter {
	sw := statusWriters.Get().(*statusWriter)
	sw.ResponseWriter, sw.code = w, 0
	return sw
}

// release returns sw to the pool; the handler has returned, so nothing
// writes to it again.
func (sw *statusWriter) release() {
	sw.ResponseWriter = nil
	statusWriters.Put(sw)
}

// status is the code written: 200 when the handler wrote nothing, as
// net/http answers then.
func (sw *statusWriter) status() int {
	if sw.code == 0 {
		return http.StatusOK
	}
	return sw.code
}

func (sw *statusWriter) WriteHeader(code int) {
	if sw.code == 0 && code >= 200 { // 1xx are informational: the final status follows
		sw.code = code
	}
	sw.ResponseWriter.WriteHeader(code)
}

func (sw *statusWriter) Write(b []byte) (int, error) {
	if sw.code == 0 {
		sw.code = http.StatusOK
	}
	return sw.ResponseWriter.Write(b)
}

func (sw *statusWriter) ReadFrom(r io.Reader) (int64, error) {
	if sw.code == 0 {
		sw.code = http.StatusOK
	}
	return io.Copy(sw.ResponseWriter, r)
}

func (sw *statusWriter) Flush() {
	if sw.code == 0 {
		sw.code = http.StatusOK
	}
	if f, ok := sw.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (sw *statusWriter) Unwrap() http.ResponseWriter { return sw.ResponseWriter }

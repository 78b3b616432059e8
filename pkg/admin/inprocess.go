package admin

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
)

// InProcess is an http.RoundTripper that answers each request by running
// h in this process, with no listener: `broker ... --backend aws` builds
// the operator API over the AWS drivers and calls it through one. The
// answer streams (a long node list starts arriving at once); the request's
// context reaches the handler.
func InProcess(h http.Handler) http.RoundTripper { return inProcess{h} }

type inProcess struct{ h http.Handler }

func (t inProcess) RoundTrip(req *http.Request) (*http.Response, error) {
	pr, pw := io.Pipe()
	w := &pipeWriter{header: http.Header{}, body: pw, ready: make(chan struct{})}
	w.resp = &http.Response{
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: w.header, Body: pr, ContentLength: -1, Request: req,
	}
	// The handler sees what a server would: a body it may read (or not),
	// the path in RequestURI.
	sreq := req.Clone(req.Context())
	sreq.RequestURI = req.URL.RequestURI()
	if sreq.Body == nil {
		sreq.Body = http.NoBody
	}
	go func() {
		defer func() {
			if p := recover(); p != nil {
				w.WriteHeader(http.StatusInternalServerError)
				pw.CloseWithError(fmt.Errorf("operator API handler panicked: %v", p))
				return
			}
			w.WriteHeader(http.StatusOK) // a handler that wrote nothing answered 200
			pw.Close()
		}()
		t.h.ServeHTTP(w, sreq)
	}()
	select {
	case <-w.ready:
		return w.resp, nil
	case <-req.Context().Done():
		pr.CloseWithError(req.Context().Err())
		return nil, req.Context().Err()
	}
}

// pipeWriter is the handler's http.ResponseWriter: the status and header
// are the response's once written, the body goes through the pipe.
type pipeWriter struct {
	header http.Header
	body   *io.PipeWriter
	resp   *http.Response
	once   sync.Once
	ready  chan struct{}
}

func (w *pipeWriter) Header() http.Header { return w.header }

func (w *pipeWriter) WriteHeader(status int) {
	w.once.Do(func() {
		w.resp.StatusCode = status
		w.resp.Status = strconv.Itoa(status) + " " + http.StatusText(status)
		w.resp.Header = w.header.Clone()
		close(w.ready)
	})
}

func (w *pipeWriter) Write(b []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	return w.body.Write(b)
}

// Flush is a no-op: every Write reaches the reader at once.
func (w *pipeWriter) Flush() {}

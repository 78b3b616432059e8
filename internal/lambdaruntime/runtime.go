// Package lambdaruntime serves the AWS Lambda Runtime API on loopback and
// runs a function's real bootstrap binary against it, so the compile
// Lambda is tested as Lambda runs it: one process, initialised once,
// fetching invocations from /runtime/invocation/next.
package lambdaruntime

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"time"

	"github.com/compilefarm/compilefarm/internal/procgroup"
)

// Runtime is a Runtime API server with one function process.
type Runtime struct {
	// Timeout is each invocation's deadline (Lambda-Runtime-Deadline-Ms).
	Timeout time.Duration

	srv     *http.Server
	ln      net.Listener
	pending chan *invocation
	mu      sync.Mutex
	open    map[string]*invocation
	initErr chan string

	proc *procgroup.Group
}

type invocation struct {
	id       string
	payload  []byte
	deadline time.Time
	result   chan result
}

type result struct {
	body []byte
	err  error
}

// FunctionError is an error the function reported for an invocation.
type FunctionError struct{ Body string }

func (e *FunctionError) Error() string { return "function error: " + e.Body }

// Start serves the Runtime API on a loopback port and starts bootstrap
// (with env added) against it.
func Start(bootstrap string, env []string, timeout time.Duration) (*Runtime, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listen for the Runtime API: %w", err)
	}
	r := &Runtime{Timeout: timeout, ln: ln, pending: make(chan *invocation), open: map[string]*invocation{},
		initErr: make(chan string, 1)}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /2018-06-01/runtime/invocation/next", r.next)
	mux.HandleFunc("POST /2018-06-01/runtime/invocation/{id}/response", r.respond(false))
	mux.HandleFunc("POST /2018-06-01/runtime/invocation/{id}/error", r.respond(true))
	mux.HandleFunc("POST /2018-06-01/runtime/init/error", func(w http.ResponseWriter, req *http.Request) {
		b, _ := io.ReadAll(req.Body)
		select {
		case r.initErr <- string(b):
		default:
		}
		w.WriteHeader(http.StatusAccepted)
	})
	r.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go r.srv.Serve(ln)

	cmd := exec.Command(bootstrap)
	cmd.Env = append(append(os.Environ(),
		"AWS_LAMBDA_RUNTIME_API="+ln.Addr().String(),
		"AWS_LAMBDA_FUNCTION_NAME=compilefarm-compile",
		"AWS_LAMBDA_FUNCTION_VERSION=$LATEST",
		"AWS_LAMBDA_FUNCTION_MEMORY_SIZE=2048",
		"_HANDLER=bootstrap",
	), env...)
	proc, err := procgroup.Start(cmd, 4<<20)
	if err != nil {
		r.srv.Close()
		return nil, err
	}
	r.proc = proc
	return r, nil
}

// Output returns what the function process printed.
func (r *Runtime) Output() string { return r.proc.Output() }

// Invoke sends one event and waits for the function's response.
func (r *Runtime) Invoke(ctx context.Context, payload []byte) ([]byte, error) {
	idb := make([]byte, 16)
	rand.Read(idb)
	inv := &invocation{id: hex.EncodeToString(idb), payload: payload, deadline: time.Now().Add(r.Timeout), result: make(chan result, 1)}
	select {
	case r.pending <- inv:
	case msg := <-r.initErr:
		return nil, fmt.Errorf("function init failed: %s", msg)
	case <-r.proc.Done():
		return nil, fmt.Errorf("function process exited:\n%s", r.Output())
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	timer := time.NewTimer(time.Until(inv.deadline) + 5*time.Second)
	defer timer.Stop()
	select {
	case res := <-inv.result:
		return res.body, res.err
	case <-r.proc.Done():
		return nil, fmt.Errorf("function process exited during invocation %s:\n%s", inv.id, r.Output())
	case <-timer.C:
		return nil, fmt.Errorf("invocation %s timed out after %s", inv.id, r.Timeout)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (r *Runtime) next(w http.ResponseWriter, req *http.Request) {
	var inv *invocation
	select {
	case inv = <-r.pending:
	case <-req.Context().Done():
		return
	}
	r.mu.Lock()
	r.open[inv.id] = inv
	r.mu.Unlock()
	h := w.Header()
	h.Set("Lambda-Runtime-Aws-Request-Id", inv.id)
	h.Set("Lambda-Runtime-Deadline-Ms", strconv.FormatInt(inv.deadline.UnixMilli(), 10))
	h.Set("Lambda-Runtime-Invoked-Function-Arn", "arn:aws:lambda:us-east-1:000000000000:function:compilefarm-compile")
	h.Set("Lambda-Runtime-Trace-Id", "Root=1-00000000-000000000000000000000000")
	h.Set("Content-Type", "application/json")
	w.Write(inv.payload)
}

func (r *Runtime) respond(isErr bool) http.HandlerFunc {
	return func(w http.ResponseWriter, req *http.Request) {
		id := req.PathValue("id")
		r.mu.Lock()
		inv := r.open[id]
		delete(r.open, id)
		r.mu.Unlock()
		if inv == nil {
			http.Error(w, "unknown request id "+id, http.StatusBadRequest)
			return
		}
		b, _ := io.ReadAll(req.Body)
		res := result{body: b}
		if isErr {
			res = result{err: &FunctionError{Body: string(b)}}
		}
		inv.result <- res
		w.WriteHeader(http.StatusAccepted)
	}
}

// Stop ends the function process (its process group) and the server.
func (r *Runtime) Stop() error {
	r.proc.Stop(10 * time.Second)
	err := r.srv.Close()
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Package compiler turns compile jobs into stored catalogs: the Engine
// contract that each compile engine implements (one subpackage per engine),
// the worker pool that drains the queue, compiles with the node's facts,
// node information and the exported resources it collects, and moves
// catalog pointers forward (pool.go, pointer.go; batch.go for queues that
// deliver batches). Deciding when a node compiles is pkg/intake's; deploys
// and releases are pkg/release's.
package compiler

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/compilefarm/compilefarm/pkg/facts"
	"github.com/compilefarm/compilefarm/pkg/nodeinfo"
)

// Request is one catalog compile as an engine sees it.
type Request struct {
	Certname    string
	Environment string
	// CodeID identifies the code snapshot; an engine may cache per CodeID.
	CodeID string
	// EnvironmentPath is a Puppet environmentpath holding the snapshot:
	// EnvironmentPath/<Environment>/{manifests,modules,environment.conf,...}.
	// It never changes for a given CodeID.
	EnvironmentPath string
	// Facts are the node's fact values (the "values" of Puppet's facts object).
	Facts map[string]any
	// Node is the node's trusted extensions and classification: the
	// classes the compile declares and the top-scope parameters that win
	// over facts of the same name, as Puppet's node terminus gives them.
	Node nodeinfo.Info
	// Exported are the resources other nodes of the environment export
	// (@@): what exported collectors (<<| |>>) in this compile may collect.
	Exported []ExportedResource
}

// ExportedResource is a resource a node exports, as the farm stores it in
// place of PuppetDB.
type ExportedResource struct {
	Certname   string          `json:"certname"` // the exporting node
	Type       string          `json:"type"`     // capitalised, e.g. "Host"
	Title      string          `json:"title"`
	Tags       []string        `json:"tags,omitempty"`
	Parameters json.RawMessage `json:"parameters,omitempty"`
	File       string          `json:"file,omitempty"`
	Line       int             `json:"line,omitempty"`
	// Kind is Puppet's kind of the resource ("" for a plain one) and
	// Container the resource that contains it ("Class[Foo]"): PuppetDB's
	// catalog has its containment edge, as Puppet Server sends it.
	Kind      string `json:"kind,omitempty"`
	Container string `json:"container,omitempty"`
}

// Collect is one exported-resource collector a compile evaluated.
type Collect struct {
	Type string `json:"type"` // capitalised resource type
	// Matched lists the exporting nodes whose resources it collected.
	Matched []string `json:"matched,omitempty"`
}

// Result is a compiled catalog.
type Result struct {
	// Catalog is Puppet's catalog JSON (Puppet::Resource::Catalog#to_data_hash,
	// rich data), before the farm makes it static.
	Catalog []byte
	// Reads records which facts the compile read, and what it saw; nil when
	// the engine did not record (the farm then falls back to its
	// volatile-fact filter).
	Reads *facts.ReadRecord
	// Exports are the resources the node exports (@@), which Puppet leaves
	// out of the agent's catalog; Collects the exported collectors it ran.
	Exports  []ExportedResource
	Collects []Collect
}

// Engine compiles catalogs. Compile returns a *CompileError when the code
// itself fails to compile (retrying cannot help) and an error wrapping
// farm.ErrTransient when the engine failed (crash, timeout). Implementations
// are safe for concurrent use; Close stops their workers.
type Engine interface {
	Compile(ctx context.Context, req Request) (Result, error)
	Close() error
}

// CompileError is Puppet's own compile error, with where it happened.
type CompileError struct {
	Message string // Puppet's message, e.g. "Syntax error at '}' (file: ..., line: 3, column: 1) on node n1"
	File    string
	Line    int
	Column  int
}

func (e *CompileError) Error() string {
	// Puppet's own messages usually end with the location already.
	if e.File == "" || strings.Contains(e.Message, "(file: ") {
		return e.Message
	}
	return fmt.Sprintf("%s (file: %s, line: %d, column: %d)", e.Message, e.File, e.Line, e.Column)
}

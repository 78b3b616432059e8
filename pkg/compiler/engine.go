// Package compiler turns compile jobs into stored catalogs: the Engine
// contract that each compile engine implements (one subpackage per engine),
// the intake rule that decides when a node needs a compile (intake.go) from
// its facts, code and node information (trusted extensions and
// classification, nodeinfo.go), the
// worker pool that drains the queue, compiles, and moves catalog pointers
// forward (pool.go, and batch.go for queues that deliver batches), exported
// resources and their collectors (exports.go), and code deploys, releases
// and catalog diffs (deploy.go, release.go).
package compiler

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/compilefarm/compilefarm/pkg/facts"
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
	Node NodeInfo
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
	Reads *FactReads
	// Exports are the resources the node exports (@@), which Puppet leaves
	// out of the agent's catalog; Collects the exported collectors it ran.
	Exports  []ExportedResource
	Collects []Collect
}

// FactReads is an engine's record of the facts one compile read.
type FactReads struct {
	Reads []facts.Read `json:"reads"`
	// AlwaysRecompile marks a catalog that depends on more than facts and
	// code (generate(), Timestamp.new, ...): any fact upload recompiles it.
	AlwaysRecompile bool   `json:"always_recompile,omitempty"`
	Why             string `json:"why,omitempty"`
	// Clock marks a catalog that read the current time (Timestamp(),
	// time(), strftime(format), Time in a template; puppetlabs-apt does
	// for update frequency daily or weekly) and nothing else beyond facts
	// and code: the farm reuses it for Intake.ClockMaxAge after its
	// compile, then recompiles it at the next check-in.
	Clock    bool   `json:"clock,omitempty"`
	ClockWhy string `json:"clock_why,omitempty"`
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

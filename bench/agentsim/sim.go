package main

import (
	"crypto/tls"
	"strings"
	"time"

	"github.com/compilefarm/compilefarm/bench/internal/agentcert"
)

// agent is one simulated puppet agent.
type agent struct {
	name   string
	cert   tls.Certificate
	rename *strings.Replacer // agentwire.Renamer(name)
	runs   int               // runs started in this invocation; the next one's number is sim.firstRun + runs
}

// simConfig is how the simulated agents behave.
type simConfig struct {
	env            string
	runinterval    time.Duration // the agents' runinterval: Retry-After bound, facts expiration, steady period
	concurrency    int           // runs at once, at most
	nodeRequest    string        // when a run asks for its node: first (an agent's first run), always, never
	locales        bool          // pluginsync the locales mount too (agents with disable_i18n=false)
	askInlined     bool          // file_metadata even for sources the catalog inlines
	maxFiles       int           // file metadata requests per run, at most
	requestTimeout time.Duration
}

// sim is a fleet of simulated agents of one farm.
type sim struct {
	cfg        simConfig
	farm       *agentcert.Farm
	agents     []*agent
	facts      *factTemplate
	report     *reportTemplate
	pluginsync []string // pluginsyncPaths
	firstRun   int      // the number of the agents' first run in this invocation: 0, or what --state recorded (runsFile)
}

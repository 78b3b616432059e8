package main

import (
	"flag"
	"fmt"
	"time"

	"github.com/compilefarm/compilefarm/pkg/classifier"
)

// classifierFlags are the external node classifier's flags, on dev and serve.
type classifierFlags struct {
	command string
	timeout time.Duration
}

func (c *classifierFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&c.command, "external-nodes", "", "external node classifier, as Puppet's external_nodes: an absolute path (and fixed arguments) "+
		"run with the certname as last argument, printing YAML classes, parameters and environment; runs at every check-in")
	fs.DurationVar(&c.timeout, "external-nodes-timeout", classifier.DefaultTimeout, "a classifier run longer is killed and the check-in fails")
}

// open returns the classifier, or nil when none is configured.
func (c *classifierFlags) open() (*classifier.Exec, error) {
	if c.command == "" {
		return nil, nil
	}
	enc, err := classifier.NewExec(c.command, c.timeout)
	if err != nil {
		return nil, fmt.Errorf("--external-nodes: %w", err)
	}
	return enc, nil
}

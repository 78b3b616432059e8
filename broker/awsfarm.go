package main

import (
	"flag"
	"fmt"
	"log/slog"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/compilefarm/compilefarm/pkg/dynamostate"
	"github.com/compilefarm/compilefarm/pkg/envcache"
	"github.com/compilefarm/compilefarm/pkg/facts"
	"github.com/compilefarm/compilefarm/pkg/intake"
	"github.com/compilefarm/compilefarm/pkg/release"
	"github.com/compilefarm/compilefarm/pkg/s3store"
	"github.com/compilefarm/compilefarm/pkg/sqsqueue"
)

// awsFlags name a stage's AWS resources: the bucket, tables, queues and
// CA that `broker serve` runs on and that the operator commands reach with
// --backend aws. One flag set, so the two never drift apart.
type awsFlags struct {
	bucket, prefix, nodesTable, indexTable, envTable string
	urgentURL, bulkURL                               string
	presenceTable, jobsTable, inboxPrefix            string
	queriesTable                                     string
	ca                                               caFlags
}

func (a *awsFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&a.bucket, "bucket", "", "S3 bucket of the content store (required)")
	fs.StringVar(&a.prefix, "prefix", "", "key prefix in the bucket")
	fs.StringVar(&a.nodesTable, "nodes-table", "", "DynamoDB table of nodes (required)")
	fs.StringVar(&a.indexTable, "node-index-table", "", "DynamoDB table of the node index, with its by-entry index (required)")
	fs.StringVar(&a.envTable, "environments-table", "", "DynamoDB table of environments (required)")
	fs.StringVar(&a.urgentURL, "urgent-queue-url", "", "SQS urgent compile queue (required)")
	fs.StringVar(&a.bulkURL, "bulk-queue-url", "", "SQS bulk compile queue (required)")
	fs.StringVar(&a.presenceTable, "presence-table", "", "DynamoDB table of PCP presence: which task holds each pxp-agent (required with --pcp-listen)")
	fs.StringVar(&a.queriesTable, "queries-table", "", "DynamoDB table of the PuppetDB queries compiles made (required with --puppetdb)")
	fs.StringVar(&a.jobsTable, "jobs-table", "", "DynamoDB table of jobs, the on-demand Puppet runs through PCP (required with --pcp-listen)")
	fs.StringVar(&a.inboxPrefix, "pcp-inbox-prefix", "", "name prefix of the SQS queues that are the tasks' PCP inboxes (each task creates <prefix><task> and deletes it when it stops; required with --pcp-listen)")
	a.ca.register(fs)
}

// validate checks that every required resource is named and one CA chosen.
func (a *awsFlags) validate() error {
	for _, f := range []struct{ name, v string }{{"bucket", a.bucket}, {"nodes-table", a.nodesTable}, {"node-index-table", a.indexTable},
		{"environments-table", a.envTable}, {"urgent-queue-url", a.urgentURL}, {"bulk-queue-url", a.bulkURL}} {
		if f.v == "" {
			return fmt.Errorf("--%s is required", f.name)
		}
	}
	if err := a.ca.validate(); err != nil {
		return err
	}
	return nil
}

// validatePCP checks that the PCP broker's resources are named.
func (a *awsFlags) validatePCP() error {
	for _, f := range []struct{ name, v string }{{"presence-table", a.presenceTable}, {"jobs-table", a.jobsTable}, {"pcp-inbox-prefix", a.inboxPrefix}} {
		if f.v == "" {
			return fmt.Errorf("--%s is required with --pcp-listen", f.name)
		}
	}
	return nil
}

// awsFarmOptions tune the parts of a farm on AWS that serve sets by flag.
type awsFarmOptions struct {
	envCache, clockMaxAge, factsRefresh time.Duration
	environments                        string   // the deployer's environmentpath ("" none)
	baseModulepath                      []string // resolved --basemodulepath
}

// awsFarm is the farm's state on AWS as the front door and the operator
// API use it: content, records, queues, intake and deployer.
type awsFarm struct {
	content  *s3store.Store
	state    *dynamostate.Store
	queue    *sqsqueue.Queue
	envs     *envcache.Store
	intake   *intake.Intake
	deployer *release.Deployer
}

// openFarm builds the farm's drivers over cfg: the same for a serving task
// and for an operator command with --backend aws.
func (a *awsFlags) openFarm(cfg aws.Config, o awsFarmOptions, log *slog.Logger) (*awsFarm, error) {
	filter, err := facts.NewFilter(facts.DefaultVolatile)
	if err != nil {
		return nil, err
	}
	f := &awsFarm{
		content: s3store.NewFromConfig(cfg, a.bucket, s3store.Options{Prefix: a.prefix}),
		state: dynamostate.NewFromConfig(cfg, dynamostate.Options{NodesTable: a.nodesTable, IndexTable: a.indexTable, EnvironmentsTable: a.envTable,
			PresenceTable: a.presenceTable, JobsTable: a.jobsTable, QueriesTable: a.queriesTable}),
		queue: sqsqueue.New(sqs.NewFromConfig(cfg), sqsqueue.Options{UrgentURL: a.urgentURL, BulkURL: a.bulkURL, Logger: log}),
	}
	f.envs = envcache.New(f.state, o.envCache) // operators' read-modify-writes read through it
	f.intake = &intake.Intake{Content: f.content, Nodes: f.state, Envs: f.envs, Queue: f.queue, Filter: filter, Log: log,
		ClockMaxAge: o.clockMaxAge, FactsRefresh: o.factsRefresh}
	f.deployer = &release.Deployer{Content: f.content, Envs: f.envs.ReadThrough(), Nodes: f.state, Intake: f.intake,
		Root: o.environments, BaseModulepath: o.baseModulepath, Log: log}
	return f, nil
}

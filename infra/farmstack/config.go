// Package farmstack is the compilefarm's AWS CDK stack: one construct per
// concern (storage, queues, compile, fleet, scaling, observability), each in
// its own file, put together by NewFarmStack.
//
// Everything the stack varies on comes from a Config (read from CDK context
// by ConfigFromContext): the constructs do no environment lookups, so the
// stack is environment-agnostic and synthesizes offline.
package farmstack

import (
	"fmt"
	"net/url"
	"regexp"
	"strconv"
	"strings"

	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"

	"github.com/compilefarm/compilefarm/pkg/scaling"
)

// Config is what the stack varies on. The CDK context keys are the field
// tags; Defaults documents the defaults (also in infra/README.md).
type Config struct {
	Stage       string   // stage: part of every resource name (compilefarm-<stage>-...)
	DNSAltNames []string // dnsAltNames: extra names for the front door's certificate, besides the NLB's DNS name

	// urgentConcurrencyMin/Max, bulkConcurrencyMin/Max: the scaler's range
	// for each lane's MaximumConcurrency; by default the lane's Min and Max
	// in pkg/scaling (scaling.Urgent, scaling.Bulk: 2/50 and 2/200, chosen
	// there), like every other setting of the lanes.
	UrgentConcurrencyMin, UrgentConcurrencyMax int
	BulkConcurrencyMin, BulkConcurrencyMax     int

	CompileMemoryMiB      int // compileMemoryMiB
	CompileTimeoutSeconds int // compileTimeoutSeconds: the compile function's timeout

	// compileFunction: false leaves out the compile function, its event
	// sources and the scaler that steers them (LocalStack's free tier runs
	// no container-image functions; localstack/run.sh runs the bootstrap on
	// the host instead).
	CompileFunction bool

	Fleet             bool     // fleet: false leaves out the VPC, ECS and the NLB (with compileFunction false: LocalStack's free tier)
	AvailabilityZones []string // availabilityZones: the VPC's zones (comma list, at least 2); default: 2 zones of the region by Fn::GetAZs
	FleetDesiredCount int      // fleetDesiredCount: tasks at deploy time, and the autoscaling minimum
	FleetMaxCount     int      // fleetMaxCount: the autoscaling maximum
	FleetCPU          int      // fleetCpu: Fargate CPU units per task
	FleetMemoryMiB    int      // fleetMemoryMiB

	// awsEndpointURL: optional; the fleet container gets it as
	// AWS_ENDPOINT_URL (the AWS SDKs' endpoint for every service). For
	// emulators: localstack/run.sh passes LocalStack's address on its
	// Docker network. Empty (the default) on AWS.
	AWSEndpointURL string

	AlarmEmail string // alarmEmail: optional; subscribes the address to an SNS topic the alarms notify

	ReportRetentionDays  int // reportRetentionDays: agent reports expire after this many days (0: never)
	CatalogRetentionDays int // catalogRetentionDays: catalogs expire after this many days (0, the default: never; see storage.go)
}

// Defaults is the configuration without any context.
func Defaults() Config {
	return Config{
		Stage:                "dev",
		UrgentConcurrencyMin: scaling.Urgent.Config.Min, UrgentConcurrencyMax: scaling.Urgent.Config.Max,
		BulkConcurrencyMin: scaling.Bulk.Config.Min, BulkConcurrencyMax: scaling.Bulk.Config.Max,
		CompileMemoryMiB:      2048,
		CompileTimeoutSeconds: 300,
		CompileFunction:       true,
		Fleet:                 true,
		FleetDesiredCount:     2,
		FleetMaxCount:         10,
		FleetCPU:              1024,
		FleetMemoryMiB:        2048,
		ReportRetentionDays:   30,
	}
}

// Prod reports whether the stage is a production one ("prod" or
// "production"): its stateful resources are retained when the stack goes.
func (c Config) Prod() bool { return c.Stage == "prod" || c.Stage == "production" }

// Local reports whether the stage is "local", the one localstack/run.sh
// deploys to LocalStack: it leaves out what LocalStack's free tier cannot
// run (the bucket's autoDeleteObjects custom resource).
func (c Config) Local() bool { return c.Stage == "local" }

// Name is the stage-qualified name of a resource: compilefarm-<stage>-<what>.
func (c Config) Name(what string) string { return "compilefarm-" + c.Stage + "-" + what }

// StackName is the stack's name: compilefarm-<stage>.
func (c Config) StackName() string { return "compilefarm-" + c.Stage }

var stageRE = regexp.MustCompile(`^[a-z][a-z0-9-]{0,19}$`)

// Validate checks the limits AWS puts on the values (so a bad context value
// fails at synth, not halfway through a deployment).
func (c Config) Validate() error {
	if !stageRE.MatchString(c.Stage) {
		return fmt.Errorf("stage %q: want lower-case letters, digits and '-', starting with a letter, at most 20 characters", c.Stage)
	}
	for _, l := range []struct {
		name     string
		min, max int
	}{{"urgentConcurrency", c.UrgentConcurrencyMin, c.UrgentConcurrencyMax}, {"bulkConcurrency", c.BulkConcurrencyMin, c.BulkConcurrencyMax}} {
		// An SQS event source mapping's MaximumConcurrency is 2..1000.
		if l.min < scaling.MinConcurrency || l.max > scaling.MaxConcurrency || l.min > l.max {
			return fmt.Errorf("%sMin/Max = %d/%d: want %d <= min <= max <= %d (the limits of an SQS event source's MaximumConcurrency)",
				l.name, l.min, l.max, scaling.MinConcurrency, scaling.MaxConcurrency)
		}
	}
	if c.CompileMemoryMiB < 128 || c.CompileMemoryMiB > 10240 {
		return fmt.Errorf("compileMemoryMiB %d: want 128..10240", c.CompileMemoryMiB)
	}
	if c.CompileTimeoutSeconds < 60 || c.CompileTimeoutSeconds > 900 {
		return fmt.Errorf("compileTimeoutSeconds %d: want 60..900", c.CompileTimeoutSeconds)
	}
	if c.Fleet {
		if c.FleetDesiredCount < 1 || c.FleetMaxCount < c.FleetDesiredCount {
			return fmt.Errorf("fleetDesiredCount/fleetMaxCount %d/%d: want 1 <= desired <= max", c.FleetDesiredCount, c.FleetMaxCount)
		}
		if n := len(c.AvailabilityZones); n == 1 {
			return fmt.Errorf("availabilityZones %v: want at least 2 (the NLB and the service span two)", c.AvailabilityZones)
		}
		if c.FleetCPU < 256 || c.FleetMemoryMiB < 512 {
			return fmt.Errorf("fleetCpu/fleetMemoryMiB %d/%d: want a Fargate size (at least 256/512)", c.FleetCPU, c.FleetMemoryMiB)
		}
	}
	if c.AWSEndpointURL != "" {
		if u, err := url.Parse(c.AWSEndpointURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("awsEndpointURL %q: want an http:// or https:// URL with a host", c.AWSEndpointURL)
		}
	}
	if c.ReportRetentionDays < 0 || c.CatalogRetentionDays < 0 {
		return fmt.Errorf("retention days must not be negative")
	}
	return nil
}

// ConfigFromContext reads the configuration from scope's CDK context (`cdk
// -c key=value`, cdk.json's "context"), on top of Defaults.
func ConfigFromContext(scope constructs.Construct) (Config, error) {
	c := Defaults()
	node := scope.Node()
	str := func(key string) (string, bool) {
		v := node.TryGetContext(jsii.String(key))
		if v == nil {
			return "", false
		}
		switch v := v.(type) {
		case string:
			return strings.TrimSpace(v), true
		case float64:
			return strconv.FormatFloat(v, 'f', -1, 64), true
		case bool:
			return strconv.FormatBool(v), true
		}
		return fmt.Sprint(v), true
	}
	var errs []string
	num := func(key string, dst *int) {
		if s, ok := str(key); ok && s != "" {
			n, err := strconv.Atoi(s)
			if err != nil {
				errs = append(errs, fmt.Sprintf("context %s=%q is not a whole number", key, s))
				return
			}
			*dst = n
		}
	}
	if s, ok := str("stage"); ok && s != "" {
		c.Stage = s
	}
	list := func(key string, dst *[]string) {
		if s, ok := str(key); ok {
			for _, n := range strings.Split(s, ",") {
				if n = strings.TrimSpace(n); n != "" {
					*dst = append(*dst, n)
				}
			}
		}
	}
	list("dnsAltNames", &c.DNSAltNames)
	list("availabilityZones", &c.AvailabilityZones)
	num("urgentConcurrencyMin", &c.UrgentConcurrencyMin)
	num("urgentConcurrencyMax", &c.UrgentConcurrencyMax)
	num("bulkConcurrencyMin", &c.BulkConcurrencyMin)
	num("bulkConcurrencyMax", &c.BulkConcurrencyMax)
	num("compileMemoryMiB", &c.CompileMemoryMiB)
	num("compileTimeoutSeconds", &c.CompileTimeoutSeconds)
	num("fleetDesiredCount", &c.FleetDesiredCount)
	num("fleetMaxCount", &c.FleetMaxCount)
	num("fleetCpu", &c.FleetCPU)
	num("fleetMemoryMiB", &c.FleetMemoryMiB)
	num("reportRetentionDays", &c.ReportRetentionDays)
	num("catalogRetentionDays", &c.CatalogRetentionDays)
	if c.FleetMaxCount < c.FleetDesiredCount {
		if _, set := str("fleetMaxCount"); !set {
			c.FleetMaxCount = c.FleetDesiredCount // a larger desired count raises the default maximum
		}
	}
	boolean := func(key string, dst *bool) {
		if s, ok := str(key); ok && s != "" {
			b, err := strconv.ParseBool(s)
			if err != nil {
				errs = append(errs, fmt.Sprintf("context %s=%q: want true or false", key, s))
				return
			}
			*dst = b
		}
	}
	boolean("fleet", &c.Fleet)
	boolean("compileFunction", &c.CompileFunction)
	if s, ok := str("alarmEmail"); ok {
		c.AlarmEmail = s
	}
	if s, ok := str("awsEndpointURL"); ok {
		c.AWSEndpointURL = s
	}
	if len(errs) > 0 {
		return c, fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return c, c.Validate()
}

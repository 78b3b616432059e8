// Package farmstack is the compilefarm's AWS CDK stack: one construct per
// concern (storage, queues, compile, fleet, scaling, observability), each in
// its own file, put together by NewFarmStack.
//
// Everything the stack varies on comes from a Config (read from CDK context
// by ConfigFromContext): the constructs do no environment lookups, so the
// stack is environment-agnostic and synthesizes offline.
package farmstack

import (
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"

	"github.com/compilefarm/compilefarm/pkg/scaling"
)

// Config is what the stack varies on. The CDK context keys are the field
// tags; Defaults documents the defaults (also in infra/README.md).
type Config struct {
	Stage       string   // stage: part of every resource name (compilefarm-<stage>-...)
	DNSAltNames []string // dnsAltNames: extra names for the front door's certificate, besides the NLB's DNS name

	// urgentConcurrencyMax: the urgent event source's MaximumConcurrency,
	// where it stays (no scaler steers the urgent lane: Lambda's own SQS
	// scaling fills it); bulkConcurrencyMin/Max: the scaler's range for the
	// bulk lane's. By default pkg/scaling's (scaling.Urgent, scaling.Bulk:
	// 50 and 2/200, chosen there), like every other setting of the lanes.
	UrgentConcurrencyMax                   int
	BulkConcurrencyMin, BulkConcurrencyMax int

	CompileMemoryMiB      int // compileMemoryMiB
	CompileTimeoutSeconds int // compileTimeoutSeconds: the compile function's timeout
	// compileDeployment: how a new compile function version takes the
	// compiles (compile.go): DeployCanary (CodeDeploy, the default) or
	// DeployAllAtOnce (the stack update moves the alias; the default of
	// the local stage, as LocalStack has no CodeDeploy).
	CompileDeployment string

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

	ReportRetentionDays int // reportRetentionDays: agent reports expire after this many days (0: never)
	// supersededCatalogDays: catalogs no node refers to any more (retired
	// by the compiler, pkg/s3store's tag) are removed this many days after
	// they were retired; 0 keeps them (see storage.go). It replaces
	// catalogRetentionDays, which expired catalogs nodes still pointed at
	// and is refused.
	SupersededCatalogDays int
	// presenceOldIndex: true keeps the presence table's old index
	// (dynamostate.OldIndexByClientType) beside the sharded one, for the
	// first deploy of a stack made before it (docs/operations.md, Upgrade).
	PresenceOldIndex bool

	PuppetDB PuppetDBConfig // the site's PuppetDB (puppetdb.go); none without puppetdbUrls
}

// PuppetDBConfig is how the farm reaches a site's PuppetDB: the sink's
// commands from the fleet (through the outbox queue), and the compiles'
// puppetdb_query() and --storeconfigs puppetdb. Without URLs the stack has
// no PuppetDB part at all, and every other field must be left unset.
type PuppetDBConfig struct {
	// puppetdbUrls: comma list of PuppetDB's https:// URLs (broker's
	// --puppetdb; the first that answers is used).
	URLs []string
	// PuppetDB's CA, when its certificate does not come from the farm's CA
	// (broker's --puppetdb-ca): at most one of puppetdbCa, the PEM itself
	// (at most MaxPuppetDBCAInline bytes: it is an environment variable of
	// the compile function, whose variables share 4 KB), or
	// puppetdbCaSecret, the complete ARN of a Secrets Manager secret whose
	// SecretString is the PEM. Neither: the farm's CA.
	CA, CASecret string
	// puppetdbIdentitySecret: the complete ARN of a Secrets Manager secret
	// holding the farm's PuppetDB client certificate and key, a JSON object
	// {"cert": PEM, "key": PEM} (IdentityCertField, IdentityKeyField), made
	// by the operator (docs/operations.md). Empty: the fleet presents the
	// front door's own certificate, and the compile function none.
	IdentitySecret string
	// puppetdbVpcId, puppetdbSubnetIds, puppetdbSecurityGroupId: for a
	// PuppetDB that only a VPC reaches, the compile function runs in these
	// subnets (of that VPC; they need a NAT gateway or VPC endpoints for S3,
	// DynamoDB, SQS and Secrets Manager) with this security group, or by
	// default one the stack makes whose egress allows PuppetDB's ports and
	// 443 only. Empty: the function stays outside any VPC.
	VpcID           string
	SubnetIDs       []string
	SecurityGroupID string
	QueryRefresh    time.Duration // puppetdbQueryRefresh: broker's --puppetdb-query-refresh (default 5m)
	Storeconfigs    string        // storeconfigs: "farm" (the default) or "puppetdb": where collectors read exported resources
}

// Enabled reports whether the stack feeds a PuppetDB (puppetdbUrls is set).
func (p PuppetDBConfig) Enabled() bool { return len(p.URLs) > 0 }

// Storeconfigs values.
const (
	StoreconfigsFarm     = "farm"
	StoreconfigsPuppetDB = "puppetdb"
)

// MaxPuppetDBCAInline bounds puppetdbCa: the compile function gets the PEM
// as COMPILEFARM_PUPPETDB_CA, and Lambda allows 4 KB for all of a
// function's variables together (the others take about 700 bytes). A
// larger bundle goes in puppetdbCaSecret.
const MaxPuppetDBCAInline = 3072

// Defaults is the configuration without any context.
func Defaults() Config {
	return Config{
		Stage:                "dev",
		UrgentConcurrencyMax: scaling.Urgent.Config.Max,
		BulkConcurrencyMin:   scaling.Bulk.Config.Min, BulkConcurrencyMax: scaling.Bulk.Config.Max,
		CompileMemoryMiB:      2048,
		CompileTimeoutSeconds: 300,
		CompileDeployment:     DeployCanary,
		CompileFunction:       true,
		Fleet:                 true,
		FleetDesiredCount:     2,
		FleetMaxCount:         10,
		FleetCPU:              1024,
		FleetMemoryMiB:        2048,
		ReportRetentionDays:   30,
		SupersededCatalogDays: 7,
		PuppetDB:              PuppetDBConfig{QueryRefresh: 5 * time.Minute, Storeconfigs: StoreconfigsFarm},
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
	// An SQS event source mapping's MaximumConcurrency is 2..1000.
	if c.UrgentConcurrencyMax < scaling.MinConcurrency || c.UrgentConcurrencyMax > scaling.MaxConcurrency {
		return fmt.Errorf("urgentConcurrencyMax = %d: want %d..%d (the limits of an SQS event source's MaximumConcurrency)",
			c.UrgentConcurrencyMax, scaling.MinConcurrency, scaling.MaxConcurrency)
	}
	if c.BulkConcurrencyMin < scaling.MinConcurrency || c.BulkConcurrencyMax > scaling.MaxConcurrency || c.BulkConcurrencyMin > c.BulkConcurrencyMax {
		return fmt.Errorf("bulkConcurrencyMin/Max = %d/%d: want %d <= min <= max <= %d (the limits of an SQS event source's MaximumConcurrency)",
			c.BulkConcurrencyMin, c.BulkConcurrencyMax, scaling.MinConcurrency, scaling.MaxConcurrency)
	}
	if c.CompileMemoryMiB < 128 || c.CompileMemoryMiB > 10240 {
		return fmt.Errorf("compileMemoryMiB %d: want 128..10240", c.CompileMemoryMiB)
	}
	if c.CompileTimeoutSeconds < 60 || c.CompileTimeoutSeconds > 900 {
		return fmt.Errorf("compileTimeoutSeconds %d: want 60..900", c.CompileTimeoutSeconds)
	}
	if c.CompileDeployment != DeployCanary && c.CompileDeployment != DeployAllAtOnce {
		return fmt.Errorf("compileDeployment %q: want %s or %s", c.CompileDeployment, DeployCanary, DeployAllAtOnce)
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
	if c.ReportRetentionDays < 0 || c.SupersededCatalogDays < 0 {
		return fmt.Errorf("retention days must not be negative")
	}
	return c.validatePuppetDB()
}

var (
	// secretARNRE is a secret's complete ARN (with the 6 characters Secrets
	// Manager appends to its name): what the grants and ECS's secrets
	// injection name exactly.
	secretARNRE = regexp.MustCompile(`^arn:aws[a-z-]*:secretsmanager:[a-z0-9-]+:[0-9]{12}:secret:[A-Za-z0-9/_+=.@-]+-[A-Za-z0-9]{6}$`)
	vpcIDRE     = regexp.MustCompile(`^vpc-[0-9a-f]{8,17}$`)
	subnetIDRE  = regexp.MustCompile(`^subnet-[0-9a-f]{8,17}$`)
	sgIDRE      = regexp.MustCompile(`^sg-[0-9a-f]{8,17}$`)
)

// validatePuppetDB checks the PuppetDB keys: nothing without puppetdbUrls,
// https:// only (on AWS PuppetDB is never on the tasks' loopback), what
// compiles need to reach it.
func (c Config) validatePuppetDB() error {
	p := c.PuppetDB
	if p.Storeconfigs != StoreconfigsFarm && p.Storeconfigs != StoreconfigsPuppetDB {
		return fmt.Errorf("storeconfigs %q: want %s or %s", p.Storeconfigs, StoreconfigsFarm, StoreconfigsPuppetDB)
	}
	if !p.Enabled() {
		if p.Storeconfigs == StoreconfigsPuppetDB {
			return fmt.Errorf("storeconfigs puppetdb needs puppetdbUrls: collectors would have no PuppetDB to read exports from")
		}
		for key, v := range map[string]string{"puppetdbCa": p.CA, "puppetdbCaSecret": p.CASecret, "puppetdbIdentitySecret": p.IdentitySecret,
			"puppetdbVpcId": p.VpcID, "puppetdbSubnetIds": strings.Join(p.SubnetIDs, ","), "puppetdbSecurityGroupId": p.SecurityGroupID} {
			if v != "" {
				return fmt.Errorf("%s is set but puppetdbUrls is not: without URLs the stack has no PuppetDB part", key)
			}
		}
		return nil
	}
	for _, raw := range p.URLs {
		u, err := url.Parse(raw)
		switch {
		case err != nil:
			return fmt.Errorf("puppetdbUrls: %q is not a URL: %v", raw, err)
		case u.Scheme == "http":
			return fmt.Errorf("puppetdbUrls: %q: http:// is refused on AWS (plain HTTP is for a PuppetDB on broker dev's loopback): "+
				"the commands carry facts and catalogs, and PuppetDB knows the farm by its client certificate; use https://", raw)
		case u.Scheme != "https" || u.Hostname() == "":
			return fmt.Errorf("puppetdbUrls: %q: want https://HOST[:PORT]", raw)
		case u.User != nil || u.RawQuery != "" || u.Fragment != "":
			return fmt.Errorf("puppetdbUrls: %q: want https://HOST[:PORT][/PATH], without credentials, query or fragment", raw)
		}
		if port := u.Port(); port != "" {
			if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
				return fmt.Errorf("puppetdbUrls: %q: port %q", raw, port)
			}
		}
	}
	if p.CA != "" && p.CASecret != "" {
		return fmt.Errorf("puppetdbCa and puppetdbCaSecret: give PuppetDB's CA one way, not both")
	}
	if p.CA != "" {
		if err := checkCertificatesPEM(p.CA); err != nil {
			return fmt.Errorf("puppetdbCa: %w", err)
		}
		if len(p.CA) > MaxPuppetDBCAInline {
			return fmt.Errorf("puppetdbCa is %d bytes, over the %d the compile function's environment has room for: put it in a secret and pass its ARN as puppetdbCaSecret",
				len(p.CA), MaxPuppetDBCAInline)
		}
	}
	for key, arn := range map[string]string{"puppetdbCaSecret": p.CASecret, "puppetdbIdentitySecret": p.IdentitySecret} {
		if arn != "" && !secretARNRE.MatchString(arn) {
			return fmt.Errorf("%s %q: want a secret's complete ARN, arn:aws:secretsmanager:REGION:ACCOUNT:secret:NAME-XXXXXX (as `aws secretsmanager create-secret` prints it)", key, arn)
		}
	}
	if p.QueryRefresh < 10*time.Second || p.QueryRefresh > 24*time.Hour {
		return fmt.Errorf("puppetdbQueryRefresh %s: want 10s to 24h", p.QueryRefresh)
	}
	if len(p.SubnetIDs) == 0 {
		if p.VpcID != "" || p.SecurityGroupID != "" {
			return fmt.Errorf("puppetdbVpcId and puppetdbSecurityGroupId go with puppetdbSubnetIds (the subnets the compile function runs in)")
		}
	} else {
		if !c.CompileFunction {
			return fmt.Errorf("puppetdbSubnetIds place the compile function in a VPC, but compileFunction is false")
		}
		if !vpcIDRE.MatchString(p.VpcID) {
			return fmt.Errorf("puppetdbVpcId %q: want the id (vpc-...) of the VPC of puppetdbSubnetIds", p.VpcID)
		}
		for _, s := range p.SubnetIDs {
			if !subnetIDRE.MatchString(s) {
				return fmt.Errorf("puppetdbSubnetIds: %q is not a subnet id (subnet-...)", s)
			}
		}
		if p.SecurityGroupID != "" && !sgIDRE.MatchString(p.SecurityGroupID) {
			return fmt.Errorf("puppetdbSecurityGroupId %q is not a security group id (sg-...)", p.SecurityGroupID)
		}
	}
	if p.Storeconfigs == StoreconfigsPuppetDB && c.CompileFunction && p.IdentitySecret == "" {
		return fmt.Errorf("storeconfigs puppetdb needs puppetdbIdentitySecret: the compile function's collectors query PuppetDB, " +
			"and the function has no certificate of its own (the front door's stays in the fleet)")
	}
	return nil
}

// checkCertificatesPEM checks that s is one or more PEM certificates and
// nothing else.
func checkCertificatesPEM(s string) error {
	rest, n := []byte(s), 0
	for {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			return fmt.Errorf("a PEM %s block: want certificates only", b.Type)
		}
		if _, err := x509.ParseCertificate(b.Bytes); err != nil {
			return fmt.Errorf("certificate %d: %w", n+1, err)
		}
		n++
	}
	if n == 0 || strings.TrimSpace(string(rest)) != "" {
		return fmt.Errorf("want PEM certificates (-----BEGIN CERTIFICATE-----) and nothing else")
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
	if _, set := str("urgentConcurrencyMin"); set {
		// Refused, not ignored: a site that set it expected a floor.
		errs = append(errs, "context urgentConcurrencyMin is no longer read: the urgent lane runs at urgentConcurrencyMax "+
			"(a cap, not a reservation: Lambda's SQS scaling fills it as the queue needs, and an idle lane holds nothing); remove it")
	}
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
	num("supersededCatalogDays", &c.SupersededCatalogDays)
	if _, set := str("catalogRetentionDays"); set {
		errs = append(errs, "context catalogRetentionDays is retired: it expired catalogs by age, those nodes still pointed at too; "+
			"catalogs no node refers to are removed supersededCatalogDays (default 7) after they were superseded (docs/operations.md, Retention): remove the key")
	}
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
	boolean("presenceOldIndex", &c.PresenceOldIndex)
	if s, ok := str("alarmEmail"); ok {
		c.AlarmEmail = s
	}
	if s, ok := str("awsEndpointURL"); ok {
		c.AWSEndpointURL = s
	}
	text := func(key string, dst *string) {
		if s, ok := str(key); ok && s != "" {
			*dst = s
		}
	}
	duration := func(key string, dst *time.Duration) {
		if s, ok := str(key); ok && s != "" {
			d, err := time.ParseDuration(s)
			if err != nil {
				errs = append(errs, fmt.Sprintf("context %s=%q is not a duration (like 5m)", key, s))
				return
			}
			*dst = d
		}
	}
	if c.Local() {
		c.CompileDeployment = DeployAllAtOnce // LocalStack has no CodeDeploy
	}
	text("compileDeployment", &c.CompileDeployment)
	p := &c.PuppetDB
	list("puppetdbUrls", &p.URLs)
	text("puppetdbCa", &p.CA)
	text("puppetdbCaSecret", &p.CASecret)
	text("puppetdbIdentitySecret", &p.IdentitySecret)
	text("puppetdbVpcId", &p.VpcID)
	list("puppetdbSubnetIds", &p.SubnetIDs)
	text("puppetdbSecurityGroupId", &p.SecurityGroupID)
	duration("puppetdbQueryRefresh", &p.QueryRefresh)
	text("storeconfigs", &p.Storeconfigs)
	if len(errs) > 0 {
		return c, fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return c, c.Validate()
}

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
	"net/netip"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"

	"github.com/compilefarm/compilefarm/pkg/scaling"
)

// Config is what the stack varies on. The CDK context keys are in the
// fields' comments; Defaults documents the defaults (also in
// infra/README.md). A key's value comes from the context itself (`cdk -c
// key=value`, or cdk.json's "context"), or else from the stage's block in
// the context key "stages" (StagesKey): per-stage values committed in
// infra/cdk.json, so that no deploy of a stage must retype them.
type Config struct {
	Stage       string   // stage: part of every resource name (compilefarm-<stage>-...)
	DNSAltNames []string // dnsAltNames: extra names for the front door's certificate, besides the NLB's DNS name

	// retain (default true): the stage's state (tables, bucket) stays when
	// the stack is deleted or a resource replaced (RemovalPolicy RETAIN),
	// and the bucket is not emptied. protect (default true): deletion
	// protection on the tables, the load balancer and the stack
	// (termination protection). Both default to safe for every stage,
	// whatever its name; a stage is made disposable only explicitly
	// (infra/cdk.json's dev and local blocks). The CA's KMS key is retained
	// regardless (storage.go).
	Retain, Protect bool
	// autoDeleteObjects: a custom resource empties the bucket when the
	// stack is deleted; only without retain, and by default then (false
	// for LocalStack's free tier, which runs no custom resources: the
	// local block).
	AutoDeleteObjects bool

	// account, region: where the stage deploys. Required for a protected
	// stage (Protected): the stack then gets this environment, and a deploy
	// with credentials of another account or region fails instead of
	// creating a second copy of the farm there. With them the fleet's VPC
	// needs availabilityZones (no lookup at synth).
	Account, Region string

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

	Fleet bool // fleet: false leaves out the VPC, ECS and the NLB (with compileFunction false: LocalStack's free tier)

	// allowedSources: who may reach the NLB's 8140 and 8142, a comma list
	// of IPv4 CIDRs and prefix list IDs (pl-...), the only inbound rules of
	// its security group. Required for a protected stage with a fleet;
	// without it a disposable stage admits 0.0.0.0/0 (a synth warning).
	AllowedSources []string
	// internal: the NLB gets private addresses only, for sites that reach
	// AWS by VPN, Direct Connect or PrivateLink (allowedSources then names
	// their networks).
	Internal bool
	// privateLinkPrincipals: IAM principal ARNs (arn:aws:iam::ACCOUNT:root,
	// a role) allowed to create an interface endpoint to the NLB: the stack
	// makes it a PrivateLink endpoint service, each connection accepted by
	// hand.
	PrivateLinkPrincipals []string

	AvailabilityZones []string // availabilityZones: the VPC's zones (comma list, at least 2); default: 2 zones of the region by Fn::GetAZs
	FleetMinCount     int      // fleetMinCount: the autoscaling minimum (Application Auto Scaling owns the task count; the service sets none)
	FleetMaxCount     int      // fleetMaxCount: the autoscaling maximum
	FleetCPU          int      // fleetCpu: Fargate CPU units per task
	FleetMemoryMiB    int      // fleetMemoryMiB

	// awsEndpointURL: optional; the fleet container gets it as
	// AWS_ENDPOINT_URL (the AWS SDKs' endpoint for every service). For
	// emulators: localstack/run.sh passes LocalStack's address on its
	// Docker network. Empty (the default) on AWS.
	AWSEndpointURL string

	// caKeySecret: the complete ARN of a Secrets Manager secret holding the
	// CA's private key (an imported Puppet Server key): the fleet reads it
	// (--ca-key-secret) instead of signing with the stack's KMS key, which
	// is then not made. Weaker custody: a synth warning.
	CAKeySecret string
	// caKmsKey: the complete ARN of an existing asymmetric KMS key
	// (SIGN_VERIFY) the fleet signs with instead of the stack's own, which
	// is then not made: a Puppet Server CA key imported into KMS with
	// ImportKeyMaterial, or a rotation's new key (docs/operations.md). A
	// key's ARN, not an alias's: IAM grants kms:Sign on keys, and the fleet
	// must not follow an alias someone re-points. Its key policy must let
	// the account's IAM policies allow its use (KMS's default key policy
	// does).
	CAKmsKey string
	// caGeneration (default 1): the CA the fleet serves, counting
	// rotations: its table is compilefarm-<stage>-ca for 1 and
	// compilefarm-<stage>-ca-<N> for N > 1 (CATableName). Raising it
	// takes the previous generation's table out of the stack (kept with
	// retain, deleted without). caNextTable: the stack also makes
	// generation caGeneration+1's table, empty, for `broker ca init` to
	// fill before the deploy that raises caGeneration (the fleet's tasks
	// do not start on an empty CA table). docs/operations.md, Rotating
	// the CA key.
	CAGeneration int
	CANextTable  bool

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
		FleetMinCount:         2,
		FleetMaxCount:         10,
		FleetCPU:              1024,
		FleetMemoryMiB:        2048,
		Retain:                true,
		Protect:               true,
		CAGeneration:          1,
		ReportRetentionDays:   30,
		SupersededCatalogDays: 7,
		PuppetDB:              PuppetDBConfig{QueryRefresh: 5 * time.Minute, Storeconfigs: StoreconfigsFarm},
	}
}

// Protected reports whether the stage keeps either safe default (retain or
// protect): it then must name its account and region, and gets a NAT
// gateway per zone.
func (c Config) Protected() bool { return c.Retain || c.Protect }

// StagesKey is the context key of the stage blocks: an object from stage
// name to that stage's context values (infra/cdk.json).
const StagesKey = "stages"

// Name is the stage-qualified name of a resource: compilefarm-<stage>-<what>.
func (c Config) Name(what string) string { return "compilefarm-" + c.Stage + "-" + what }

// StackName is the stack's name: compilefarm-<stage>.
func (c Config) StackName() string { return "compilefarm-" + c.Stage }

var (
	stageRE   = regexp.MustCompile(`^[a-z][a-z0-9-]{0,19}$`)
	accountRE = regexp.MustCompile(`^[0-9]{12}$`)
	regionRE  = regexp.MustCompile(`^[a-z]{2}(-[a-z]+)+-[0-9]$`)
)

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
		if c.FleetMinCount < 1 || c.FleetMaxCount < c.FleetMinCount {
			return fmt.Errorf("fleetMinCount/fleetMaxCount %d/%d: want 1 <= min <= max", c.FleetMinCount, c.FleetMaxCount)
		}
		if n := len(c.AvailabilityZones); n == 1 {
			return fmt.Errorf("availabilityZones %v: want at least 2 (the NLB and the service span two)", c.AvailabilityZones)
		}
		if err := checkFargateSize(c.FleetCPU, c.FleetMemoryMiB); err != nil {
			return err
		}
	}
	if c.AWSEndpointURL != "" {
		if u, err := url.Parse(c.AWSEndpointURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("awsEndpointURL %q: want an http:// or https:// URL with a host", c.AWSEndpointURL)
		}
	}
	if err := c.validateEnvironment(); err != nil {
		return err
	}
	if err := c.validateNetwork(); err != nil {
		return err
	}
	if c.CAGeneration < 1 {
		return fmt.Errorf("caGeneration %d: want 1 (the first CA) or more (one more for each rotation)", c.CAGeneration)
	}
	if err := c.validateCAKey(); err != nil {
		return err
	}
	if c.ReportRetentionDays < 0 || c.SupersededCatalogDays < 0 {
		return fmt.Errorf("retention days must not be negative")
	}
	return c.validatePuppetDB()
}

var (
	// kmsKeyARNRE is a KMS key's ARN (a single-region key's ID, or a
	// multi-region key's mrk-...); kmsAliasARNRE an alias's.
	kmsKeyARNRE   = regexp.MustCompile(`^arn:aws[a-z-]*:kms:([a-z0-9-]+):[0-9]{12}:key/([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|mrk-[0-9a-f]{32})$`)
	kmsAliasARNRE = regexp.MustCompile(`^arn:aws[a-z-]*:kms:[a-z0-9-]+:[0-9]{12}:alias/`)
)

// validateCAKey checks caKeySecret and caKmsKey: at most one, each a
// complete ARN.
func (c Config) validateCAKey() error {
	if c.CAKeySecret != "" && c.CAKmsKey != "" {
		return fmt.Errorf("caKeySecret and caKmsKey: the CA has one key; caKmsKey keeps it inside KMS, caKeySecret lets the tasks read it (docs/operations.md, The CA key in KMS)")
	}
	if c.CAKeySecret != "" && !secretARNRE.MatchString(c.CAKeySecret) {
		return fmt.Errorf("caKeySecret %q: want a secret's complete ARN, arn:aws:secretsmanager:REGION:ACCOUNT:secret:NAME-XXXXXX (as `aws secretsmanager describe-secret` prints it)", c.CAKeySecret)
	}
	if c.CAKmsKey == "" {
		return nil
	}
	if kmsAliasARNRE.MatchString(c.CAKmsKey) {
		return fmt.Errorf("caKmsKey %q is an alias's ARN: give the key's own ARN (`aws kms describe-key --key-id ALIAS --query KeyMetadata.Arn`); "+
			"IAM grants kms:Sign on a key's ARN, not an alias's, and the fleet must sign with the key the stack names, whatever the alias is pointed at later", c.CAKmsKey)
	}
	m := kmsKeyARNRE.FindStringSubmatch(c.CAKmsKey)
	if m == nil {
		return fmt.Errorf("caKmsKey %q: want a KMS key's ARN, arn:aws:kms:REGION:ACCOUNT:key/KEY_ID (as `aws kms describe-key` prints it)", c.CAKmsKey)
	}
	if c.Region != "" && m[1] != c.Region {
		return fmt.Errorf("caKmsKey %q is a key of region %s, but stage %s is in %s: the fleet calls KMS in its own region", c.CAKmsKey, m[1], c.Stage, c.Region)
	}
	return nil
}

var (
	prefixListRE = regexp.MustCompile(`^pl-[0-9a-f]{8,17}$`)
	principalRE  = regexp.MustCompile(`^arn:aws[a-z-]*:iam::[0-9]{12}:(root|role/[A-Za-z0-9+=,.@_/-]+|user/[A-Za-z0-9+=,.@_/-]+)$`)
)

// validateNetwork checks allowedSources, internal and
// privateLinkPrincipals.
func (c Config) validateNetwork() error {
	for _, src := range c.AllowedSources {
		if prefixListRE.MatchString(src) {
			continue
		}
		p, err := netip.ParsePrefix(src)
		if err != nil || !p.Addr().Is4() {
			return fmt.Errorf("allowedSources: %q: want an IPv4 CIDR (203.0.113.0/24; one address is /32) or a prefix list ID (pl-...)", src)
		}
		if p.Masked() != p {
			return fmt.Errorf("allowedSources: %q has host bits set: did you mean %s?", src, p.Masked())
		}
	}
	if c.Fleet && c.Protected() && len(c.AllowedSources) == 0 {
		return fmt.Errorf("stage %s is protected and its NLB needs allowedSources: the CIDRs and prefix lists (pl-...) of the agents' networks "+
			"(in infra/cdk.json's %q block of %q, or -c allowedSources=...); 0.0.0.0/0 opens 8140 and 8142 to the internet, "+
			"which a protected stage must say explicitly", c.Stage, c.Stage, StagesKey)
	}
	for _, p := range c.PrivateLinkPrincipals {
		if !principalRE.MatchString(p) {
			return fmt.Errorf("privateLinkPrincipals: %q: want an IAM principal's ARN (arn:aws:iam::ACCOUNT:root, or a role or user)", p)
		}
	}
	return nil
}

// validateEnvironment checks retain, protect, autoDeleteObjects, account
// and region.
func (c Config) validateEnvironment() error {
	if c.Retain && c.AutoDeleteObjects {
		return fmt.Errorf("autoDeleteObjects with retain: a retained bucket is not emptied; set retain false for a disposable stage")
	}
	where := fmt.Sprintf("(in infra/cdk.json's %q block of %q, or -c %%s=...)", c.Stage, StagesKey)
	if c.Protected() {
		for _, k := range []struct{ key, v string }{{"account", c.Account}, {"region", c.Region}} {
			if k.v == "" {
				return fmt.Errorf("stage %s is protected (retain or protect, the defaults) and needs %s: the AWS account ID and region it deploys to "+where+
					"; a disposable stage sets retain and protect to false", c.Stage, k.key, k.key)
			}
		}
	}
	if (c.Account == "") != (c.Region == "") {
		return fmt.Errorf("account and region go together (the stack's environment): account %q, region %q", c.Account, c.Region)
	}
	if c.Account == "" {
		return nil
	}
	if !accountRE.MatchString(c.Account) {
		return fmt.Errorf("account %q: want a 12-digit AWS account ID", c.Account)
	}
	if !regionRE.MatchString(c.Region) {
		return fmt.Errorf("region %q: want an AWS region such as eu-west-1", c.Region)
	}
	if c.Fleet {
		// With an environment the VPC would look the region's zones up at
		// synth (credentials, cdk.context.json); named zones keep synth
		// offline and the same for everyone.
		if len(c.AvailabilityZones) == 0 {
			return fmt.Errorf("stage %s has account and region and needs availabilityZones too, two or more zones of %s (e.g. %sa,%sb) "+where+
				": the fleet's VPC then needs no lookup at synth", c.Stage, c.Region, c.Region, c.Region, "availabilityZones")
		}
		for _, z := range c.AvailabilityZones {
			if !strings.HasPrefix(z, c.Region) || len(z) <= len(c.Region) {
				return fmt.Errorf("availabilityZones: %q is not a zone of region %s", z, c.Region)
			}
		}
	}
	return nil
}

// fargateSizes are the task sizes Fargate offers on Linux: each CPU value
// (units, 1024 a vCPU) with its memory sizes in MiB (AWS's table, "Task CPU
// and memory" in the ECS developer guide; 8 and 16 vCPU need platform
// version 1.4.0, the default).
var fargateSizes = []struct {
	cpu    int
	memory []int
}{
	{256, []int{512, 1024, 2048}},
	{512, steps(1024, 4096, 1024)},
	{1024, steps(2048, 8192, 1024)},
	{2048, steps(4096, 16384, 1024)},
	{4096, steps(8192, 30720, 1024)},
	{8192, steps(16384, 61440, 4096)},
	{16384, steps(32768, 122880, 8192)},
}

// steps returns from, from+step, ... up to to.
func steps(from, to, step int) []int {
	var out []int
	for m := from; m <= to; m += step {
		out = append(out, m)
	}
	return out
}

// checkFargateSize fails a CPU/memory pair Fargate does not offer (at
// synth: the deploy would fail registering the task definition).
func checkFargateSize(cpu, mem int) error {
	var allowed []int
	for _, s := range fargateSizes {
		if s.cpu == cpu {
			allowed = s.memory
		}
	}
	if allowed == nil {
		cpus := make([]string, len(fargateSizes))
		for i, s := range fargateSizes {
			cpus[i] = strconv.Itoa(s.cpu)
		}
		return fmt.Errorf("fleetCpu %d: Fargate offers %s CPU units (1024 = 1 vCPU)", cpu, strings.Join(cpus, ", "))
	}
	if slices.Contains(allowed, mem) {
		return nil
	}
	list := make([]string, len(allowed))
	for i, m := range allowed {
		list[i] = strconv.Itoa(m)
	}
	return fmt.Errorf("fleetMemoryMiB %d is not a Fargate size for fleetCpu %d: fleetCpu %d allows fleetMemoryMiB %s", mem, cpu, cpu, strings.Join(list, ", "))
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
// -c key=value`, cdk.json's "context"), on top of Defaults. A key the
// context does not set is taken from the stage's block in StagesKey, if
// any; a block may hold only keys read here.
func ConfigFromContext(scope constructs.Construct) (Config, error) {
	c := Defaults()
	node := scope.Node()
	var errs []string
	if v := node.TryGetContext(jsii.String("stage")); v != nil {
		if s := contextString(v); s != "" {
			c.Stage = s
		}
	}
	block, err := stageBlock(node.TryGetContext(jsii.String(StagesKey)), c.Stage)
	if err != nil {
		errs = append(errs, err.Error())
	}
	read := map[string]bool{} // the keys read, which a block may hold
	str := func(key string) (string, bool) {
		read[key] = true
		v := node.TryGetContext(jsii.String(key))
		if v == nil {
			v = block[key]
		}
		if v == nil {
			return "", false
		}
		return contextString(v), true
	}
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
	list("allowedSources", &c.AllowedSources)
	list("privateLinkPrincipals", &c.PrivateLinkPrincipals)
	num("urgentConcurrencyMax", &c.UrgentConcurrencyMax)
	num("bulkConcurrencyMin", &c.BulkConcurrencyMin)
	num("bulkConcurrencyMax", &c.BulkConcurrencyMax)
	num("compileMemoryMiB", &c.CompileMemoryMiB)
	num("compileTimeoutSeconds", &c.CompileTimeoutSeconds)
	if _, set := str("fleetDesiredCount"); set {
		errs = append(errs, "context fleetDesiredCount is gone: the service sets no desired count (Application Auto Scaling owns it, "+
			"and a deploy no longer resets a scaled-out fleet); use fleetMinCount for the autoscaling minimum")
	}
	num("fleetMinCount", &c.FleetMinCount)
	num("fleetMaxCount", &c.FleetMaxCount)
	num("fleetCpu", &c.FleetCPU)
	num("fleetMemoryMiB", &c.FleetMemoryMiB)
	num("reportRetentionDays", &c.ReportRetentionDays)
	num("supersededCatalogDays", &c.SupersededCatalogDays)
	num("caGeneration", &c.CAGeneration)
	if _, set := str("catalogRetentionDays"); set {
		errs = append(errs, "context catalogRetentionDays is retired: it expired catalogs by age, those nodes still pointed at too; "+
			"catalogs no node refers to are removed supersededCatalogDays (default 7) after they were superseded (docs/operations.md, Retention): remove the key")
	}
	if c.FleetMaxCount < c.FleetMinCount {
		if _, set := str("fleetMaxCount"); !set {
			c.FleetMaxCount = c.FleetMinCount // a larger minimum raises the default maximum
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
	boolean("internal", &c.Internal)
	boolean("retain", &c.Retain)
	boolean("protect", &c.Protect)
	boolean("caNextTable", &c.CANextTable)
	c.AutoDeleteObjects = !c.Retain
	boolean("autoDeleteObjects", &c.AutoDeleteObjects)
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
	text("caKeySecret", &c.CAKeySecret)
	text("caKmsKey", &c.CAKmsKey)
	text("account", &c.Account)
	text("region", &c.Region)
	keys := make([]string, 0, len(block))
	for k := range block {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if !read[k] {
			errs = append(errs, fmt.Sprintf("context %s.%s.%s: %s is not a context key of the stack (infra/README.md lists them)", StagesKey, c.Stage, k, k))
		}
	}
	if len(errs) > 0 {
		return c, fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return c, c.Validate()
}

// contextString is a context value as text: JSON numbers and booleans as Go
// formats them, a JSON list (a stage block may hold one) joined by commas.
func contextString(v interface{}) string {
	switch v := v.(type) {
	case string:
		return strings.TrimSpace(v)
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64)
	case bool:
		return strconv.FormatBool(v)
	case []interface{}:
		parts := make([]string, 0, len(v))
		for _, e := range v {
			parts = append(parts, contextString(e))
		}
		return strings.Join(parts, ",")
	}
	return fmt.Sprint(v)
}

// stageBlock returns stage's block of the stage blocks v (the context
// value of StagesKey); nil when there is none.
func stageBlock(v interface{}, stage string) (map[string]interface{}, error) {
	if v == nil {
		return nil, nil
	}
	blocks, ok := v.(map[string]interface{})
	if !ok {
		return nil, fmt.Errorf("context %s: want an object of stage blocks (stage name to its context values), not %T", StagesKey, v)
	}
	b, ok := blocks[stage]
	if !ok || b == nil {
		return nil, nil
	}
	block, ok := b.(map[string]interface{})
	if !ok {
		return nil, fmt.Errorf("context %s.%s: want an object of context values, not %T", StagesKey, stage, b)
	}
	return block, nil
}

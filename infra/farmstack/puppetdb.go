package farmstack

import (
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsec2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsecs"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssecretsmanager"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssqs"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"
)

// The outbox queue's settings.
const (
	// OutboxVisibility is the outbox's visibility timeout: how long a
	// received command stays hidden before SQS hands it out again. A
	// drainer receives at most 10 commands and posts each to PuppetDB
	// (which answers once it has queued the command on its disk) before it
	// deletes them; 5 minutes leaves room for 10 slow posts, so a live
	// drainer's command never goes to a second one while it is still being
	// posted. What it costs: the groups a drainer that died was holding
	// wait this long (OutboxAgeAlarm is three times it).
	OutboxVisibility = 5 * time.Minute
	// OutboxMaxReceives is the outbox's maxReceiveCount, SQS's own
	// backstop against a message no drainer can finish (one that makes it
	// crash, say). The drainer moves a command PuppetDB refuses (4xx) to
	// the dead-letter queue itself; a command it cannot deliver (PuppetDB
	// down or unreachable) it retries with back-off, and every retry is a
	// receive. So the count must be high enough that an outage never
	// dead-letters anything: PuppetDB down for an hour is 60 receives of a
	// group's first command at a 1-minute back-off, and 1000 (SQS's
	// maximum) lasts 16 hours at that back-off, days at a 5-minute one.
	OutboxMaxReceives = 1000
	// OutboxRetentionDays is both queues' retention: SQS's maximum.
	OutboxRetentionDays = 14
	// OutboxAgeAlarm: the outbox age alarm fires when its oldest command
	// has waited longer than this (PuppetDB unreachable, or the drain
	// stuck): three visibility timeouts, so one drainer dying alone does
	// not fire it.
	OutboxAgeAlarm = 15 * time.Minute
)

// The fields of the identity secret's JSON (puppetdbIdentitySecret):
// {"cert": "<client certificate PEM>", "key": "<its private key PEM>"}.
const (
	IdentityCertField = "cert"
	IdentityKeyField  = "key"
)

// Environment variables that carry PuppetDB's settings into the fleet's
// container and the compile function.
const (
	// EnvPuppetDBCert, EnvPuppetDBKey and EnvPuppetDBCA are the fleet
	// container's variables ECS fills from the secrets (puppetdbCa's PEM
	// as a plain variable), passed to broker serve as
	// --puppetdb-cert/--puppetdb-key/--puppetdb-ca env:NAME.
	EnvPuppetDBCert = "COMPILEFARM_PUPPETDB_CERT"
	EnvPuppetDBKey  = "COMPILEFARM_PUPPETDB_KEY"
	EnvPuppetDBCA   = "COMPILEFARM_PUPPETDB_CA"

	// The compile function's: PuppetDB's URLs (comma list), its CA (PEM
	// text, from puppetdbCa), the ARN of the secret holding that CA (from
	// puppetdbCaSecret) and the ARN of the identity secret, both read by
	// the function at init (the key never sits in the function's
	// configuration), and farm or puppetdb.
	EnvPuppetDB               = "COMPILEFARM_PUPPETDB"
	EnvPuppetDBCASecret       = "COMPILEFARM_PUPPETDB_CA_SECRET"
	EnvPuppetDBIdentitySecret = "COMPILEFARM_PUPPETDB_IDENTITY_SECRET"
	EnvStoreconfigs           = "COMPILEFARM_STORECONFIGS"
)

// PuppetDB is what the stack adds for a site's PuppetDB (puppetdbUrls): the
// outbox queue the fleet's sink writes PuppetDB's commands to and drains,
// its dead-letter queue, references to the operator's secrets, and the
// network the compile function reaches PuppetDB through.
type PuppetDB struct {
	Construct constructs.Construct // the construct holding the resources
	Config    PuppetDBConfig
	// Outbox is an SQS FIFO queue, one message group per node, so a node's
	// commands reach PuppetDB in order and several tasks drain it at once.
	Outbox awssqs.Queue
	// DLQ takes the commands PuppetDB refused (the drainer moves them) and,
	// as a backstop, those received OutboxMaxReceives times.
	DLQ awssqs.Queue
	// Identity and CASecret: the operator's secrets; nil when not given.
	Identity, CASecret awssecretsmanager.ISecret
	// CompileSubnetIDs and CompileSecurityGroupID place the compile
	// function in the VPC PuppetDB is reached from: puppetdbSubnetIds, and
	// puppetdbSecurityGroupId or the stack's group. Empty and nil without
	// puppetdbSubnetIds.
	CompileSubnetIDs       []string
	CompileSecurityGroupID *string
}

// NewPuppetDB declares the outbox, its dead-letter queue and the compile
// function's network; nil without puppetdbUrls.
func NewPuppetDB(scope constructs.Construct, id string, cfg Config) *PuppetDB {
	pc := cfg.PuppetDB
	if !pc.Enabled() {
		return nil
	}
	p := &PuppetDB{Construct: constructs.NewConstruct(scope, jsii.String(id)), Config: pc}
	retention := awscdk.Duration_Days(jsii.Number(OutboxRetentionDays))
	// Content-based deduplication: the sink need not name each message.
	// Two identical bodies in a group within SQS's 5-minute window are the
	// same command (its producer timestamp is in it), so keeping one is
	// right, and a Send the SDK retried is not queued twice.
	p.DLQ = awssqs.NewQueue(p.Construct, jsii.String("OutboxDlq"), &awssqs.QueueProps{
		QueueName:                 jsii.String(cfg.Name("puppetdb-dlq.fifo")),
		Fifo:                      jsii.Bool(true),
		ContentBasedDeduplication: jsii.Bool(true),
		Encryption:                awssqs.QueueEncryption_SQS_MANAGED,
		EnforceSSL:                jsii.Bool(true),
		RetentionPeriod:           retention,
	})
	p.Outbox = awssqs.NewQueue(p.Construct, jsii.String("Outbox"), &awssqs.QueueProps{
		QueueName:                 jsii.String(cfg.Name("puppetdb-outbox.fifo")),
		Fifo:                      jsii.Bool(true),
		ContentBasedDeduplication: jsii.Bool(true),
		// High-throughput FIFO: throughput and deduplication per message
		// group (per node), not per queue, so the fleet's whole command
		// rate (hundreds a second) is not capped at one queue's 300/s.
		DeduplicationScope:  awssqs.DeduplicationScope_MESSAGE_GROUP,
		FifoThroughputLimit: awssqs.FifoThroughputLimit_PER_MESSAGE_GROUP_ID,
		Encryption:          awssqs.QueueEncryption_SQS_MANAGED,
		EnforceSSL:          jsii.Bool(true),
		VisibilityTimeout:   awscdk.Duration_Seconds(jsii.Number(OutboxVisibility.Seconds())),
		// 14 days: a PuppetDB that is down for days loses nothing either.
		RetentionPeriod: retention,
		DeadLetterQueue: &awssqs.DeadLetterQueue{Queue: p.DLQ, MaxReceiveCount: jsii.Number(OutboxMaxReceives)},
	})

	if pc.IdentitySecret != "" {
		p.Identity = awssecretsmanager.Secret_FromSecretCompleteArn(p.Construct, jsii.String("Identity"), jsii.String(pc.IdentitySecret))
	} else if cfg.CompileFunction {
		awscdk.Annotations_Of(p.Construct).AddWarningV2(jsii.String("compilefarm:puppetdbNoIdentity"), jsii.String(
			"puppetdbIdentitySecret is not set: the fleet presents each task's front door certificate to PuppetDB (named after the "+
				"task's host, which changes with every task: PuppetDB's certificate-allowlist cannot list it), and the compile function "+
				"has none, so puppetdb_query() in a manifest fails unless PuppetDB takes queries without a client certificate "+
				"(docs/operations.md, PuppetDB)"))
	}
	if pc.CASecret != "" {
		p.CASecret = awssecretsmanager.Secret_FromSecretCompleteArn(p.Construct, jsii.String("CA"), jsii.String(pc.CASecret))
	}

	if len(pc.SubnetIDs) > 0 {
		p.CompileSubnetIDs = pc.SubnetIDs
		if pc.SecurityGroupID != "" {
			p.CompileSecurityGroupID = jsii.String(pc.SecurityGroupID)
		} else {
			// PuppetDB's ports (from the URLs), and HTTPS for S3, DynamoDB,
			// SQS and Secrets Manager through the subnets' NAT gateway or
			// VPC endpoints; no ingress (Lambda needs none). Giving egress
			// rules replaces the default allow-all one. A CloudFormation
			// resource, as the function's VpcConfig (compile.go): the L2
			// constructs want the VPC's zones, which only a lookup would
			// give (the stack stays environment-agnostic).
			var egress []interface{}
			ports := PuppetDBPorts(pc.URLs)
			for _, port := range ports {
				desc := "PuppetDB on " + strconv.Itoa(port)
				if port == 443 {
					desc = "PuppetDB and the AWS APIs (HTTPS)"
				}
				egress = append(egress, &awsec2.CfnSecurityGroup_EgressProperty{
					IpProtocol: jsii.String("tcp"), FromPort: jsii.Number(port), ToPort: jsii.Number(port),
					CidrIp: jsii.String("0.0.0.0/0"), Description: jsii.String(desc),
				})
			}
			if !slices.Contains(ports, 443) {
				egress = append(egress, &awsec2.CfnSecurityGroup_EgressProperty{
					IpProtocol: jsii.String("tcp"), FromPort: jsii.Number(443), ToPort: jsii.Number(443),
					CidrIp: jsii.String("0.0.0.0/0"), Description: jsii.String("AWS APIs (HTTPS)"),
				})
			}
			sg := awsec2.NewCfnSecurityGroup(p.Construct, jsii.String("CompileSecurityGroup"), &awsec2.CfnSecurityGroupProps{
				GroupDescription:    jsii.String("compilefarm " + cfg.Stage + ": the compile function, to PuppetDB and the AWS APIs"),
				VpcId:               jsii.String(pc.VpcID),
				SecurityGroupEgress: &egress,
			})
			p.CompileSecurityGroupID = sg.AttrGroupId()
		}
	}
	return p
}

// PuppetDBPorts are the TCP ports of the URLs (443 when a URL names
// none), sorted, each once.
func PuppetDBPorts(urls []string) []int {
	var ports []int
	for _, raw := range urls {
		port := 443
		if u, err := url.Parse(raw); err == nil && u.Port() != "" {
			port, _ = strconv.Atoi(u.Port())
		}
		if !slices.Contains(ports, port) {
			ports = append(ports, port)
		}
	}
	slices.Sort(ports)
	return ports
}

// urls is the URLs as broker's --puppetdb and COMPILEFARM_PUPPETDB take
// them.
func (p *PuppetDB) urls() string { return strings.Join(p.Config.URLs, ",") }

// ServeArgs are broker serve's PuppetDB flags; ServeEnvironment and
// ServeSecrets fill the variables the env:NAME flags name. Without the
// identity secret serve presents the front door's own certificate; without
// a CA setting it checks PuppetDB against the farm's CA.
func (p *PuppetDB) ServeArgs() []*string {
	args := []*string{
		jsii.String("--puppetdb"), jsii.String(p.urls()),
		jsii.String("--puppetdb-outbox-queue"), p.Outbox.QueueUrl(),
		jsii.String("--puppetdb-dead-letter-queue"), p.DLQ.QueueUrl(),
		jsii.String("--puppetdb-query-refresh"), jsii.String(p.Config.QueryRefresh.String()),
		jsii.String("--storeconfigs"), jsii.String(p.Config.Storeconfigs),
	}
	if p.Config.CA != "" || p.CASecret != nil {
		args = append(args, jsii.String("--puppetdb-ca"), jsii.String("env:"+EnvPuppetDBCA))
	}
	if p.Identity != nil {
		args = append(args, jsii.String("--puppetdb-cert"), jsii.String("env:"+EnvPuppetDBCert),
			jsii.String("--puppetdb-key"), jsii.String("env:"+EnvPuppetDBKey))
	}
	return args
}

// ServeEnvironment is the fleet container's plain PuppetDB variables:
// puppetdbCa's PEM (a CA certificate is no secret).
func (p *PuppetDB) ServeEnvironment() map[string]*string {
	if p.Config.CA == "" {
		return nil
	}
	return map[string]*string{EnvPuppetDBCA: jsii.String(p.Config.CA)}
}

// ServeSecrets is the fleet container's variables ECS fills from Secrets
// Manager when it starts a task (its execution role reads them; the task
// role does not): the identity's two JSON fields and the CA secret.
func (p *PuppetDB) ServeSecrets() map[string]awsecs.Secret {
	s := map[string]awsecs.Secret{}
	if p.Identity != nil {
		s[EnvPuppetDBCert] = awsecs.Secret_FromSecretsManager(p.Identity, jsii.String(IdentityCertField))
		s[EnvPuppetDBKey] = awsecs.Secret_FromSecretsManager(p.Identity, jsii.String(IdentityKeyField))
	}
	if p.CASecret != nil {
		s[EnvPuppetDBCA] = awsecs.Secret_FromSecretsManager(p.CASecret, nil)
	}
	return s
}

// CompileEnvironment is the compile function's PuppetDB variables.
func (p *PuppetDB) CompileEnvironment() map[string]*string {
	env := map[string]*string{
		EnvPuppetDB:     jsii.String(p.urls()),
		EnvStoreconfigs: jsii.String(p.Config.Storeconfigs),
	}
	if p.Config.CA != "" {
		env[EnvPuppetDBCA] = jsii.String(p.Config.CA)
	}
	if p.CASecret != nil {
		env[EnvPuppetDBCASecret] = jsii.String(p.Config.CASecret)
	}
	if p.Identity != nil {
		env[EnvPuppetDBIdentitySecret] = jsii.String(p.Config.IdentitySecret)
	}
	return env
}

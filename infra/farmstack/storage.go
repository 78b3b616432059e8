package farmstack

import (
	"fmt"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsdynamodb"
	"github.com/aws/aws-cdk-go/awscdk/v2/awskms"
	"github.com/aws/aws-cdk-go/awscdk/v2/awss3"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssecretsmanager"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"

	"github.com/compilefarm/compilefarm/pkg/dynamostate"
	"github.com/compilefarm/compilefarm/pkg/farm"
)

// supersededTag is the object tag pkg/s3store's Retire sets
// (s3store.RetiredTagKey=RetiredTagValue; spelled out here because the
// infra module does not build the S3 SDK in): the lifecycle rule of
// superseded catalogs selects it. Both sides' tests pin the words.
var supersededTag = map[string]interface{}{"compilefarm-superseded": "true"}

// Storage is the farm's state: the content store bucket (pkg/s3store), the
// DynamoDB tables (pkg/dynamostate, one per role of dynamostate.Tables())
// and the CA's private key: the stack's KMS key, or with caKmsKey the
// site's, or with caKeySecret a Secrets Manager secret the site made.
type Storage struct {
	Construct constructs.Construct // the construct holding the resources
	Bucket    awss3.Bucket
	// Tables by dynamostate role (RoleNodes, RoleNodeIndex,
	// RoleEnvironments, RoleCA, RolePresence, RoleJobs); RoleCA's is
	// caGeneration's (CATableName).
	Tables map[string]awsdynamodb.Table
	// NextCATable is the CA table of generation caGeneration+1, empty,
	// for `broker ca init` before the deploy that moves the fleet to it
	// (caNextTable); nil without.
	NextCATable awsdynamodb.Table
	// CAKey is the CA's asymmetric KMS key (`broker ca init --ca-key-kms`
	// makes the CA with it, `broker serve --ca-key-kms` signs with it): the
	// stack's own, or caKmsKey's, referenced by its ARN; nil with
	// caKeySecret.
	CAKey awskms.IKey
	// CAKeySecret is the imported CA key's secret (caKeySecret); nil
	// without.
	CAKeySecret awssecretsmanager.ISecret
}

// CAKeyBits is the CA key's size: KMS's RSA_4096, the size `broker ca
// init` makes by default and Puppet Server's CA key.
const CAKeyBits = 4096

// CAKeyAlias is the CA key's alias: alias/compilefarm/<stage>/ca (a KMS key
// ID for `broker ca init --ca-key-kms`, and how people find the key).
func CAKeyAlias(cfg Config) string { return "alias/compilefarm/" + cfg.Stage + "/ca" }

// NewStorage declares the bucket, the tables and the CA key.
func NewStorage(scope constructs.Construct, id string, cfg Config) *Storage {
	s := &Storage{Construct: constructs.NewConstruct(scope, jsii.String(id)), Tables: map[string]awsdynamodb.Table{}}
	// retain (by default): the stage's state outlives the stack, and a
	// resource CloudFormation replaces keeps its old copy.
	removal := awscdk.RemovalPolicy_DESTROY
	if cfg.Retain {
		removal = awscdk.RemovalPolicy_RETAIN
	}

	// Lifecycle rules select on the s3store key layout:
	// <prefix><space>/<d[0:2]>/<d> and <prefix><space>/names/<name>!, with
	// an empty prefix here (the bucket is the stage's own).
	rules := []*awss3.LifecycleRule{{
		Id:                                  jsii.String("abort-incomplete-uploads"),
		AbortIncompleteMultipartUploadAfter: awscdk.Duration_Days(jsii.Number(1)),
	}}
	if cfg.ReportRetentionDays > 0 {
		// Agent reports are written once and only read by operators (and
		// the nodes' last-run summaries, which live in DynamoDB): old ones
		// can go.
		rules = append(rules, &awss3.LifecycleRule{
			Id:         jsii.String("expire-reports"),
			Prefix:     jsii.String(string(farm.SpaceReports) + "/"),
			Expiration: awscdk.Duration_Days(jsii.Number(cfg.ReportRetentionDays)),
		})
	}
	if cfg.SupersededCatalogDays > 0 {
		// Catalogs are content addressed and a node's own; the compiler
		// and the intake retire those a node stops referring to (the one
		// that falls out of its History, a replaced candidate) by copying
		// them onto themselves with this tag, so the days count from the
		// retirement (lifecycle counts from Last-Modified), and take the
		// tag back when a node refers to one again (pkg/farm
		// RetireCatalogs). Only catalogs/: read records, exports and
		// query texts there may be shared and carry no tag.
		rules = append(rules, &awss3.LifecycleRule{
			Id:         jsii.String("expire-superseded-catalogs"),
			Prefix:     jsii.String(string(farm.SpaceCatalogs) + "/"),
			TagFilters: &supersededTag,
			Expiration: awscdk.Duration_Days(jsii.Number(cfg.SupersededCatalogDays)),
		})
	}
	s.Bucket = awss3.NewBucket(s.Construct, jsii.String("Content"), &awss3.BucketProps{
		Encryption:        awss3.BucketEncryption_S3_MANAGED,
		BlockPublicAccess: awss3.BlockPublicAccess_BLOCK_ALL(),
		EnforceSSL:        jsii.Bool(true),
		ObjectOwnership:   awss3.ObjectOwnership_BUCKET_OWNER_ENFORCED,
		// Versioning off: the store never overwrites an object with other
		// bytes (content addressed blobs and write-once names, both with
		// If-None-Match: *; a retirement copies an object onto itself), so
		// versions would add nothing but noncurrent copies that outlive the
		// lifecycle expirations above. What a version would protect
		// against (a delete) is covered by the data being derived: catalogs
		// recompile, code is deployed again from its repository.
		Versioned:      jsii.Bool(false),
		LifecycleRules: &rules,
		RemovalPolicy:  removal,
		// A disposable stage's bucket is emptied on stack deletion (a custom
		// resource Lambda); a retained one is kept whole, and stage local
		// (LocalStack, whose free tier runs no custom resources) leaves it
		// to LocalStack's own reset (its block: autoDeleteObjects false).
		AutoDeleteObjects: jsii.Bool(cfg.AutoDeleteObjects),
	})

	// Tables: from dynamostate.Tables(), the one definition of their keys
	// and indexes (dynamostate.EnsureTables creates the same ones for tests).
	for _, spec := range dynamostate.Tables() {
		if spec.Role == dynamostate.RoleCA {
			// The CA's table is its generation's (CATableName): a new CA
			// (a rotation) is a new, empty table, and the fleet moves to
			// it only once `broker ca init` has filled it.
			s.Tables[spec.Role] = s.newTable(cfg, spec, caTableID(cfg.CAGeneration), CATableName(cfg, cfg.CAGeneration), removal)
			if cfg.CANextTable {
				s.NextCATable = s.newTable(cfg, spec, caTableID(cfg.CAGeneration+1), CATableName(cfg, cfg.CAGeneration+1), removal)
			}
			continue
		}
		s.Tables[spec.Role] = s.newTable(cfg, spec, "Table-"+spec.Role, cfg.Name(spec.Role), removal)
	}

	s.newCAKey(cfg, removal)
	return s
}

// newTable declares the table of spec, named name, as construct id.
func (s *Storage) newTable(cfg Config, spec dynamostate.TableSpec, id, name string, removal awscdk.RemovalPolicy) awsdynamodb.Table {
	var ttl *string // presence and ended jobs: expired items go by themselves
	if spec.TTLAttribute != "" {
		ttl = jsii.String(spec.TTLAttribute)
	}
	t := awsdynamodb.NewTable(s.Construct, jsii.String(id), &awsdynamodb.TableProps{
		TimeToLiveAttribute: ttl,
		TableName:           jsii.String(name),
		PartitionKey:        attribute(spec.PartitionKey),
		SortKey:             optAttribute(spec.SortKey),
		BillingMode:         awsdynamodb.BillingMode_PAY_PER_REQUEST,
		PointInTimeRecoverySpecification: &awsdynamodb.PointInTimeRecoverySpecification{
			PointInTimeRecoveryEnabled: jsii.Bool(true),
		},
		DeletionProtection: jsii.Bool(cfg.Protect),
		RemovalPolicy:      removal,
	})
	indexes := spec.Indexes
	if spec.Role == dynamostate.RolePresence && cfg.PresenceOldIndex {
		// Kept for one deploy of a stack made before the sharded
		// index: CloudFormation adds or removes one index per update.
		indexes = append([]dynamostate.IndexSpec{dynamostate.OldIndexByClientType()}, indexes...)
	}
	for _, ix := range indexes {
		var include *[]*string
		if len(ix.NonKeyAttributes) > 0 {
			include = jsii.Strings(ix.NonKeyAttributes...)
		}
		t.AddGlobalSecondaryIndex(&awsdynamodb.GlobalSecondaryIndexProps{
			IndexName:        jsii.String(ix.Name),
			PartitionKey:     attribute(ix.PartitionKey),
			SortKey:          optAttribute(ix.SortKey),
			ProjectionType:   projection(ix.Projection),
			NonKeyAttributes: include,
		})
	}
	return t
}

// CATableName is the name of the CA table of generation gen (caGeneration):
// compilefarm-<stage>-ca for the first CA, compilefarm-<stage>-ca-<gen>
// for each one a rotation makes after it.
func CATableName(cfg Config, gen int) string {
	if gen <= 1 {
		return cfg.Name(dynamostate.RoleCA)
	}
	return cfg.Name(dynamostate.RoleCA + "-" + itoa(gen))
}

// caTableID is the construct ID of generation gen's CA table: the first
// keeps the ID every table had before generations (so its logical ID, and
// the table, stay), each later one its own, so that moving caGeneration
// removes the old table from the template (kept or deleted as retain says)
// and never asks CloudFormation to replace one table by another under the
// same logical ID.
func caTableID(gen int) string {
	if gen <= 1 {
		return "Table-" + dynamostate.RoleCA
	}
	return "Table-" + dynamostate.RoleCA + "-" + itoa(gen)
}

// newCAKey declares the CA's key: an asymmetric KMS key the fleet signs
// with, whose private half never leaves KMS (AWS's HSMs), or with
// caKmsKey or caKeySecret a reference to the site's key or secret.
func (s *Storage) newCAKey(cfg Config, removal awscdk.RemovalPolicy) {
	if cfg.CAKmsKey != "" {
		// A key the stack does not own: a Puppet Server CA key imported
		// with ImportKeyMaterial, or a rotation's new key. The stack only
		// lets the fleet use it (fleet.go); its key policy, alias and
		// deletion are the site's.
		s.CAKey = awskms.Key_FromKeyArn(s.Construct, jsii.String("CAKey"), jsii.String(cfg.CAKmsKey))
		return
	}
	if cfg.CAKeySecret != "" {
		// The import route: a Puppet Server CA key in Secrets Manager. The
		// tasks read the private key itself; whoever controls a task holds
		// the CA. (Importing the key into a KMS key with ImportKeyMaterial
		// keeps it in KMS instead: docs/operations.md.)
		s.CAKeySecret = awssecretsmanager.Secret_FromSecretCompleteArn(s.Construct, jsii.String("CAKeySecret"), jsii.String(cfg.CAKeySecret))
		awscdk.Annotations_Of(s.Construct).AddWarningV2(jsii.String("compilefarm:caKeySecret"), jsii.String(
			"caKeySecret: the fleet's tasks read the CA's private key from Secrets Manager, so a compromised task is a compromised CA; "+
				"a KMS key (without caKeySecret) keeps the key inside KMS, and a Puppet Server key can be imported into one (docs/operations.md)"))
		return
	}
	s.CAKey = awskms.NewKey(s.Construct, jsii.String("CAKey"), &awskms.KeyProps{
		Description: jsii.String("compilefarm " + cfg.Stage + ": the Puppet CA's private key (signs certificates and CRLs; broker --ca-key-kms)"),
		KeySpec:     awskms.KeySpec_RSA_4096,
		KeyUsage:    awskms.KeyUsage_SIGN_VERIFY,
		// The key policy: CDK's default, one statement letting the account
		// root administer the key, so IAM policies decide who uses it (the
		// fleet's task role: Sign, GetPublicKey, DescribeKey, fleet.go).
		// RETAIN whatever the stage's retain says: a stack delete never
		// schedules the CA key's deletion (every agent certificate would
		// be orphaned); an operator does, with KMS's 30-day window.
		RemovalPolicy: awscdk.RemovalPolicy_RETAIN,
		PendingWindow: awscdk.Duration_Days(jsii.Number(30)),
	})
	// The alias follows retain: kept, a second deploy of a deleted stage
	// stops at it instead of quietly making a new CA key; gone with a
	// disposable stage (its retained key is then found by its
	// description; schedule its deletion).
	awskms.NewAlias(s.Construct, jsii.String("CAKeyAlias"), &awskms.AliasProps{
		AliasName:     jsii.String(CAKeyAlias(cfg)),
		TargetKey:     s.CAKey,
		RemovalPolicy: removal,
	})
}

// Table returns the table of a dynamostate role.
func (s *Storage) Table(role string) awsdynamodb.Table {
	t, ok := s.Tables[role]
	if !ok {
		panic("farmstack: no table for role " + role)
	}
	return t
}

func attribute(k dynamostate.KeyAttr) *awsdynamodb.Attribute {
	return &awsdynamodb.Attribute{Name: jsii.String(k.Name), Type: attributeType(k.Type)}
}

func optAttribute(k *dynamostate.KeyAttr) *awsdynamodb.Attribute {
	if k == nil {
		return nil
	}
	return attribute(*k)
}

func attributeType(t ddbtypes.ScalarAttributeType) awsdynamodb.AttributeType {
	switch t {
	case ddbtypes.ScalarAttributeTypeS:
		return awsdynamodb.AttributeType_STRING
	case ddbtypes.ScalarAttributeTypeN:
		return awsdynamodb.AttributeType_NUMBER
	case ddbtypes.ScalarAttributeTypeB:
		return awsdynamodb.AttributeType_BINARY
	}
	panic(fmt.Sprintf("farmstack: unknown DynamoDB attribute type %q", t))
}

func projection(p ddbtypes.ProjectionType) awsdynamodb.ProjectionType {
	switch p {
	case ddbtypes.ProjectionTypeKeysOnly:
		return awsdynamodb.ProjectionType_KEYS_ONLY
	case ddbtypes.ProjectionTypeAll, "":
		return awsdynamodb.ProjectionType_ALL
	case ddbtypes.ProjectionTypeInclude:
		return awsdynamodb.ProjectionType_INCLUDE
	}
	panic(fmt.Sprintf("farmstack: unsupported projection %q", p))
}

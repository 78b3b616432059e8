package farmstack

import (
	"fmt"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsdynamodb"
	"github.com/aws/aws-cdk-go/awscdk/v2/awss3"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssecretsmanager"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"

	"github.com/compilefarm/compilefarm/pkg/dynamostate"
	"github.com/compilefarm/compilefarm/pkg/farm"
)

// Storage is the farm's state: the content store bucket (pkg/s3store), the
// DynamoDB tables (pkg/dynamostate, one per role of dynamostate.Tables())
// and the Secrets Manager secret of the CA key (pkg/cakey).
type Storage struct {
	Construct constructs.Construct // the construct holding the resources
	Bucket    awss3.Bucket
	// Tables by dynamostate role (RoleNodes, RoleNodeIndex,
	// RoleEnvironments, RoleCA, RolePresence, RoleJobs).
	Tables map[string]awsdynamodb.Table
	// CAKeySecret is the secret `broker ca init --ca-key-secret` fills;
	// CAKeySecretName is its name (what `broker ca init` and `broker serve`
	// are given).
	CAKeySecret     awssecretsmanager.ISecret
	CAKeySecretName string
}

// NewStorage declares the bucket, the tables and the CA key secret.
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
	if cfg.CatalogRetentionDays > 0 {
		// Off by default: catalogs are content addressed, so a node whose
		// catalog has not changed for N days still points at an N-day-old
		// object, and the front door serves it from there (a missing one is
		// an error, not a recompile). Only turn this on when every node is
		// recompiled more often than this (code deploys recompile the nodes
		// they touch).
		rules = append(rules, &awss3.LifecycleRule{
			Id:         jsii.String("expire-catalogs"),
			Prefix:     jsii.String(string(farm.SpaceCatalogs) + "/"),
			Expiration: awscdk.Duration_Days(jsii.Number(cfg.CatalogRetentionDays)),
		})
	}
	s.Bucket = awss3.NewBucket(s.Construct, jsii.String("Content"), &awss3.BucketProps{
		Encryption:        awss3.BucketEncryption_S3_MANAGED,
		BlockPublicAccess: awss3.BlockPublicAccess_BLOCK_ALL(),
		EnforceSSL:        jsii.Bool(true),
		ObjectOwnership:   awss3.ObjectOwnership_BUCKET_OWNER_ENFORCED,
		// Versioning off: the store never overwrites an object (content
		// addressed blobs and write-once names, both with If-None-Match: *),
		// so versions would add nothing but noncurrent copies that outlive
		// the lifecycle expirations above. What a version would protect
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
		var ttl *string // the presence table's: expired records go by themselves
		if spec.TTLAttribute != "" {
			ttl = jsii.String(spec.TTLAttribute)
		}
		t := awsdynamodb.NewTable(s.Construct, jsii.String("Table-"+spec.Role), &awsdynamodb.TableProps{
			TimeToLiveAttribute: ttl,
			TableName:           jsii.String(cfg.Name(spec.Role)),
			PartitionKey:        attribute(spec.PartitionKey),
			SortKey:             optAttribute(spec.SortKey),
			BillingMode:         awsdynamodb.BillingMode_PAY_PER_REQUEST,
			PointInTimeRecoverySpecification: &awsdynamodb.PointInTimeRecoverySpecification{
				PointInTimeRecoveryEnabled: jsii.Bool(true),
			},
			DeletionProtection: jsii.Bool(cfg.Protect),
			RemovalPolicy:      removal,
		})
		for _, ix := range spec.Indexes {
			t.AddGlobalSecondaryIndex(&awsdynamodb.GlobalSecondaryIndexProps{
				IndexName:      jsii.String(ix.Name),
				PartitionKey:   attribute(ix.PartitionKey),
				SortKey:        optAttribute(ix.SortKey),
				ProjectionType: projection(ix.Projection),
			})
		}
		s.Tables[spec.Role] = t
	}

	// The CA key secret, created without a value: CloudFormation creates an
	// empty secret when neither SecretString nor GenerateSecretString is
	// given (the L2 Secret would generate a random password, which
	// `broker ca init` would then refuse as "already holds a key").
	// cakey.Secret.CreateKey puts the first value into it.
	s.CAKeySecretName = "compilefarm/" + cfg.Stage + "/ca-key"
	sec := awssecretsmanager.NewCfnSecret(s.Construct, jsii.String("CAKey"), &awssecretsmanager.CfnSecretProps{
		Name:        jsii.String(s.CAKeySecretName),
		Description: jsii.String("compilefarm " + cfg.Stage + ": Puppet CA private key (PEM), written by `broker ca init --ca-key-secret`"),
	})
	sec.ApplyRemovalPolicy(removal, nil)
	s.CAKeySecret = awssecretsmanager.Secret_FromSecretAttributes(s.Construct, jsii.String("CAKeyRef"), &awssecretsmanager.SecretAttributes{
		SecretCompleteArn: sec.Ref(), // Ref of AWS::SecretsManager::Secret is its full ARN
	})
	return s
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
	}
	// INCLUDE would need the non-key attributes, which IndexSpec does not carry.
	panic(fmt.Sprintf("farmstack: unsupported projection %q", p))
}

package farmstack

import (
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/jsii-runtime-go"

	"github.com/compilefarm/compilefarm/pkg/dynamostate"
	"github.com/compilefarm/compilefarm/pkg/farm"
)

func TestBucket(t *testing.T) {
	s := dev(t)
	check(t, "one bucket", func() { s.tpl.ResourceCountIs(jsii.String("AWS::S3::Bucket"), jsii.Number(1)) })
	check(t, "bucket properties", func() {
		s.tpl.HasResourceProperties(jsii.String("AWS::S3::Bucket"), map[string]interface{}{
			"BucketEncryption": map[string]interface{}{"ServerSideEncryptionConfiguration": []interface{}{
				map[string]interface{}{"ServerSideEncryptionByDefault": map[string]interface{}{"SSEAlgorithm": "AES256"}}}},
			"PublicAccessBlockConfiguration": map[string]interface{}{
				"BlockPublicAcls": true, "BlockPublicPolicy": true, "IgnorePublicAcls": true, "RestrictPublicBuckets": true},
			"VersioningConfiguration": assertions.Match_Absent(),
			"LifecycleConfiguration": map[string]interface{}{"Rules": assertions.Match_ArrayWith(&[]interface{}{
				map[string]interface{}{"Id": "expire-reports", "Prefix": string(farm.SpaceReports) + "/", "ExpirationInDays": 30, "Status": "Enabled"},
			})},
		})
	})
	check(t, "enforceSSL", func() {
		s.tpl.HasResourceProperties(jsii.String("AWS::S3::BucketPolicy"), map[string]interface{}{
			"PolicyDocument": map[string]interface{}{"Statement": assertions.Match_ArrayWith(&[]interface{}{
				assertions.Match_ObjectLike(&map[string]interface{}{
					"Effect": "Deny", "Condition": map[string]interface{}{"Bool": map[string]interface{}{"aws:SecureTransport": "false"}},
				}),
			})},
		})
	})
	c := synth(t, map[string]string{"supersededCatalogDays": "14", "reportRetentionDays": "7"})
	check(t, "superseded catalog and report retention from context", func() {
		c.tpl.HasResourceProperties(jsii.String("AWS::S3::Bucket"), map[string]interface{}{
			"LifecycleConfiguration": map[string]interface{}{"Rules": assertions.Match_ArrayWith(&[]interface{}{
				map[string]interface{}{"Id": "expire-reports", "Prefix": "reports/", "ExpirationInDays": 7, "Status": "Enabled"},
				supersededRule(14),
			})},
		})
	})
}

// supersededRule is the bucket's lifecycle rule of superseded catalogs:
// catalogs/ objects tagged as pkg/s3store's Retire tags them
// (TestRetireTags there pins the same words), days after the retirement.
func supersededRule(days int) map[string]interface{} {
	return map[string]interface{}{
		"Id": "expire-superseded-catalogs", "ExpirationInDays": days, "Status": "Enabled",
		"Prefix":     "catalogs/",
		"TagFilters": []interface{}{map[string]interface{}{"Key": "compilefarm-superseded", "Value": "true"}},
	}
}

// TestCatalogRetention: by default catalogs no node refers to go 7 days
// after they were superseded, and no rule expires catalogs by age alone
// (one would remove catalogs nodes still point at); 0 keeps them;
// catalogRetentionDays, the age rule's key, is refused.
func TestCatalogRetention(t *testing.T) {
	s := dev(t)
	check(t, "superseded catalogs expire after 7 days", func() {
		s.tpl.HasResourceProperties(jsii.String("AWS::S3::Bucket"), map[string]interface{}{
			"LifecycleConfiguration": map[string]interface{}{"Rules": assertions.Match_ArrayWith(&[]interface{}{supersededRule(7)})},
		})
	})
	for _, stage := range []*synthed{s, synth(t, map[string]string{"supersededCatalogDays": "0"})} {
		for _, r := range stage.resources("AWS::S3::Bucket") {
			rules, _ := props(r)["LifecycleConfiguration"].(map[string]interface{})["Rules"].([]interface{})
			for _, rule := range rules {
				rule := rule.(map[string]interface{})
				if p, _ := rule["Prefix"].(string); strings.HasPrefix(p, "catalogs/") && rule["TagFilters"] == nil {
					t.Errorf("a rule expires catalogs without the superseded tag: %s", jsonString(rule))
				}
			}
		}
	}
	for _, r := range synth(t, map[string]string{"supersededCatalogDays": "0"}).resources("AWS::S3::Bucket") {
		if containsAll(jsonString(props(r)), "expire-superseded-catalogs") {
			t.Errorf("supersededCatalogDays=0 still expires superseded catalogs: %s", jsonString(props(r)["LifecycleConfiguration"]))
		}
	}
	if _, err := configFrom(t, map[string]interface{}{"catalogRetentionDays": "90"}); err == nil || !strings.Contains(err.Error(), "supersededCatalogDays") {
		t.Errorf("catalogRetentionDays: %v, want a refusal naming supersededCatalogDays", err)
	}
	if _, err := configFrom(t, map[string]interface{}{"supersededCatalogDays": "-1"}); err == nil {
		t.Error("supersededCatalogDays=-1 accepted")
	}
}

// TestTablesFromDynamostate compares the tables with dynamostate.Tables(),
// the one definition of their keys and indexes.
func TestTablesFromDynamostate(t *testing.T) {
	s := dev(t)
	specs := dynamostate.Tables()
	if got := len(s.resources("AWS::DynamoDB::Table")); got != len(specs) {
		t.Errorf("%d tables, dynamostate.Tables() has %d", got, len(specs))
	}
	keySchema := func(pk dynamostate.KeyAttr, sk *dynamostate.KeyAttr) []interface{} {
		ks := []interface{}{map[string]interface{}{"AttributeName": pk.Name, "KeyType": "HASH"}}
		if sk != nil {
			ks = append(ks, map[string]interface{}{"AttributeName": sk.Name, "KeyType": "RANGE"})
		}
		return ks
	}
	for _, spec := range specs {
		name := "compilefarm-dev-" + spec.Role
		_, p := s.find(t, "AWS::DynamoDB::Table", "TableName", name)
		if got, want := p["KeySchema"], keySchema(spec.PartitionKey, spec.SortKey); !reflect.DeepEqual(got, want) {
			t.Errorf("%s KeySchema = %s, want %s", name, jsonString(got), jsonString(want))
		}
		attrs := map[string]string{}
		add := func(k *dynamostate.KeyAttr) {
			if k != nil {
				attrs[k.Name] = string(k.Type)
			}
		}
		add(&spec.PartitionKey)
		add(spec.SortKey)
		var wantGSIs []interface{}
		for _, ix := range spec.Indexes {
			add(&ix.PartitionKey)
			add(ix.SortKey)
			projection := map[string]interface{}{"ProjectionType": string(ix.Projection)}
			if len(ix.NonKeyAttributes) > 0 {
				var attrs []interface{}
				for _, a := range ix.NonKeyAttributes {
					attrs = append(attrs, a)
				}
				projection["NonKeyAttributes"] = attrs
			}
			wantGSIs = append(wantGSIs, map[string]interface{}{
				"IndexName":  ix.Name,
				"KeySchema":  keySchema(ix.PartitionKey, ix.SortKey),
				"Projection": projection,
			})
		}
		var wantAttrs []interface{}
		for n, typ := range attrs {
			wantAttrs = append(wantAttrs, map[string]interface{}{"AttributeName": n, "AttributeType": typ})
		}
		byName := func(l []interface{}) []interface{} {
			sort.Slice(l, func(i, j int) bool {
				return l[i].(map[string]interface{})["AttributeName"].(string) < l[j].(map[string]interface{})["AttributeName"].(string)
			})
			return l
		}
		gotAttrs, _ := p["AttributeDefinitions"].([]interface{})
		if !reflect.DeepEqual(byName(gotAttrs), byName(wantAttrs)) {
			t.Errorf("%s AttributeDefinitions = %s, want %s", name, jsonString(gotAttrs), jsonString(wantAttrs))
		}
		gotGSIs, _ := p["GlobalSecondaryIndexes"].([]interface{})
		if !reflect.DeepEqual(gotGSIs, wantGSIs) {
			t.Errorf("%s GlobalSecondaryIndexes = %s, want %s", name, jsonString(gotGSIs), jsonString(wantGSIs))
		}
		if p["BillingMode"] != "PAY_PER_REQUEST" {
			t.Errorf("%s BillingMode = %v", name, p["BillingMode"])
		}
		if jsonString(p["PointInTimeRecoverySpecification"]) != `{"PointInTimeRecoveryEnabled":true}` {
			t.Errorf("%s PITR = %s", name, jsonString(p["PointInTimeRecoverySpecification"]))
		}
		var wantTTL interface{}
		if spec.TTLAttribute != "" {
			wantTTL = map[string]interface{}{"AttributeName": spec.TTLAttribute, "Enabled": true}
		}
		if got := p["TimeToLiveSpecification"]; !reflect.DeepEqual(got, wantTTL) {
			t.Errorf("%s TimeToLiveSpecification = %s, want %s", name, jsonString(got), jsonString(wantTTL))
		}
	}
	// The PCP broker's tables: presence expires by itself.
	_, p := s.find(t, "AWS::DynamoDB::Table", "TableName", "compilefarm-dev-"+dynamostate.RolePresence)
	if got := jsonString(p["TimeToLiveSpecification"]); got != `{"AttributeName":"expires_at","Enabled":true}` {
		t.Errorf("presence table TimeToLiveSpecification = %s, want expires_at enabled", got)
	}
	// Ended jobs too (dynamostate.JobRetention).
	_, p = s.find(t, "AWS::DynamoDB::Table", "TableName", "compilefarm-dev-"+dynamostate.RoleJobs)
	if got := jsonString(p["TimeToLiveSpecification"]); got != `{"AttributeName":"expires_at","Enabled":true}` {
		t.Errorf("jobs table TimeToLiveSpecification = %s, want expires_at enabled", got)
	}
}

// TestPresenceIndex: the presence table's one index is keyed by client
// type and shard and projects what QueryPresence reads only; with
// presenceOldIndex the old one is kept beside it (an upgrade's first
// deploy: one index added, none removed).
func TestPresenceIndex(t *testing.T) {
	gsis := func(s *synthed) string {
		t.Helper()
		_, p := s.find(t, "AWS::DynamoDB::Table", "TableName", "compilefarm-dev-"+dynamostate.RolePresence)
		return jsonString(p["GlobalSecondaryIndexes"])
	}
	want := `{"IndexName":"by-client-shard","KeySchema":[{"AttributeName":"client_shard","KeyType":"HASH"},{"AttributeName":"uri","KeyType":"RANGE"}],` +
		`"Projection":{"NonKeyAttributes":["task","expires_ns"],"ProjectionType":"INCLUDE"}}`
	if got := gsis(dev(t)); got != "["+want+"]" {
		t.Errorf("presence indexes = %s, want [%s]", got, want)
	}
	old := `{"IndexName":"by-client-type","KeySchema":[{"AttributeName":"client_type","KeyType":"HASH"},{"AttributeName":"uri","KeyType":"RANGE"}],` +
		`"Projection":{"ProjectionType":"ALL"}}`
	if got := gsis(synth(t, map[string]string{"presenceOldIndex": "true"})); got != "["+old+","+want+"]" {
		t.Errorf("presence indexes with presenceOldIndex = %s, want [%s,%s]", got, old, want)
	}
}

// TestRemovalPolicies: prod keeps its state when the stack goes; other
// stages may delete it.
func TestRemovalPolicies(t *testing.T) {
	for _, c := range []struct {
		stage, policy string
		protect       bool
	}{{"dev", "Delete", false}, {"prod", "Retain", true}} {
		s := synth(t, map[string]string{"stage": c.stage})
		for _, typ := range []string{"AWS::DynamoDB::Table", "AWS::S3::Bucket", "AWS::SecretsManager::Secret"} {
			for id, r := range s.resources(typ) {
				if r["DeletionPolicy"] != c.policy {
					t.Errorf("%s: %s %s DeletionPolicy = %v, want %s", c.stage, typ, id, r["DeletionPolicy"], c.policy)
				}
				if typ == "AWS::DynamoDB::Table" && props(r)["DeletionProtectionEnabled"] != c.protect {
					t.Errorf("%s: table %s DeletionProtectionEnabled = %v", c.stage, id, props(r)["DeletionProtectionEnabled"])
				}
			}
		}
	}
}

// TestCAKeySecret: the secret exists without a value, so that `broker ca
// init --ca-key-secret` can put the CA key in it (cakey.Secret.CreateKey).
func TestCAKeySecret(t *testing.T) {
	s := dev(t)
	_, p := s.find(t, "AWS::SecretsManager::Secret", "Name", "compilefarm/dev/ca-key")
	for _, k := range []string{"SecretString", "GenerateSecretString"} {
		if _, ok := p[k]; ok {
			t.Errorf("the CA key secret has %s: broker ca init would find a value that is not a key", k)
		}
	}
}

// TestLocalStage: stage local (LocalStack) has no autoDeleteObjects custom
// resource; dev has one, prod none.
func TestLocalStage(t *testing.T) {
	for stage, want := range map[string]int{"local": 0, "dev": 1, "prod": 0} {
		s := synth(t, map[string]string{"stage": stage})
		if n := len(s.resources("Custom::S3AutoDeleteObjects")); n != want {
			t.Errorf("stage %s: %d Custom::S3AutoDeleteObjects, want %d", stage, n, want)
		}
	}
}

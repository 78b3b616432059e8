package farmstack

import (
	"fmt"
	"reflect"
	"sort"
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
	// Catalogs do not expire unless asked for (see storage.go).
	for _, r := range s.resources("AWS::S3::Bucket") {
		if containsAll(jsonString(props(r)), "expire-catalogs") {
			t.Errorf("catalogs expire by default: %s", jsonString(props(r)["LifecycleConfiguration"]))
		}
	}
	c := synth(t, map[string]string{"catalogRetentionDays": "90", "reportRetentionDays": "7"})
	check(t, "catalog and report retention from context", func() {
		c.tpl.HasResourceProperties(jsii.String("AWS::S3::Bucket"), map[string]interface{}{
			"LifecycleConfiguration": map[string]interface{}{"Rules": assertions.Match_ArrayWith(&[]interface{}{
				map[string]interface{}{"Id": "expire-reports", "Prefix": "reports/", "ExpirationInDays": 7, "Status": "Enabled"},
				map[string]interface{}{"Id": "expire-catalogs", "Prefix": "catalogs/", "ExpirationInDays": 90, "Status": "Enabled"},
			})},
		})
	})
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
			wantGSIs = append(wantGSIs, map[string]interface{}{
				"IndexName":  ix.Name,
				"KeySchema":  keySchema(ix.PartitionKey, ix.SortKey),
				"Projection": map[string]interface{}{"ProjectionType": string(ix.Projection)},
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
	s.find(t, "AWS::DynamoDB::Table", "TableName", "compilefarm-dev-"+dynamostate.RoleJobs)
}

// TestSafeByDefault (D5): whatever a stage is called, its state is
// retained when the stack goes (tables and bucket RETAIN, the bucket not
// emptied), its tables, its stack and its load balancer are protected from
// deletion, and it deploys only to the account and region of its context;
// a stage is less safe only when its context says so (retain, protect: the
// committed dev and local blocks of infra/cdk.json).
func TestSafeByDefault(t *testing.T) {
	for _, stage := range []string{"prd", "prod-eu", "production"} {
		s := synth(t, protectedStage(stage))
		checkRemoval(t, s, stage, "Retain", true)
		if n := len(s.resources("Custom::S3AutoDeleteObjects")); n != 0 {
			t.Errorf("%s: %d Custom::S3AutoDeleteObjects: the bucket would be emptied on stack deletion", stage, n)
		}
		if tp := s.stack.Stack.TerminationProtection(); tp == nil || !*tp {
			t.Errorf("%s: the stack has no termination protection", stage)
		}
		for id, r := range s.resources("AWS::ElasticLoadBalancingV2::LoadBalancer") {
			if !containsAll(jsonString(props(r)["LoadBalancerAttributes"]), `{"Key":"deletion_protection.enabled","Value":"true"}`) {
				t.Errorf("%s: load balancer %s attributes %s: no deletion protection (agents know it by its DNS name)", stage, id, jsonString(props(r)["LoadBalancerAttributes"]))
			}
		}
		if a, r := s.stack.Stack.Account(), s.stack.Stack.Region(); a == nil || *a != testAccount || r == nil || *r != testRegion {
			t.Errorf("%s: stack environment %v/%v, want %s/%s", stage, deref(a), deref(r), testAccount, testRegion)
		}
		// An environment makes the VPC ask for the region's zones; the
		// named zones answer, so synth does no lookup (offline, no
		// credentials, nothing in cdk.context.json).
		if missing := s.manifest(t)["missing"]; missing != nil {
			t.Errorf("%s: the cloud assembly asks for lookups: %s", stage, jsonString(missing))
		}
	}
	// Only an explicit setting makes a stage disposable: the committed dev
	// block, or retain/protect given as context.
	for _, ctx := range []map[string]string{nil, {"stage": "scratch", "retain": "false", "protect": "false"}} {
		s := synth(t, ctx)
		checkRemoval(t, s, fmt.Sprint(ctx), "Delete", false)
		if n := len(s.resources("Custom::S3AutoDeleteObjects")); n != 1 {
			t.Errorf("%v: %d Custom::S3AutoDeleteObjects, want 1 (a disposable stage's bucket is emptied when it goes)", ctx, n)
		}
		if tp := s.stack.Stack.TerminationProtection(); tp != nil && *tp {
			t.Errorf("%v: termination protection on", ctx)
		}
	}
}

// checkRemoval checks the tables' and the bucket's deletion policy and the
// tables' deletion protection.
func checkRemoval(t *testing.T, s *synthed, what, policy string, protect bool) {
	t.Helper()
	for _, typ := range []string{"AWS::DynamoDB::Table", "AWS::S3::Bucket"} {
		rs := s.resources(typ)
		if len(rs) == 0 {
			t.Errorf("%s: no %s", what, typ)
		}
		for id, r := range rs {
			if r["DeletionPolicy"] != policy || r["UpdateReplacePolicy"] != policy {
				t.Errorf("%s: %s %s DeletionPolicy/UpdateReplacePolicy = %v/%v, want %s", what, typ, id, r["DeletionPolicy"], r["UpdateReplacePolicy"], policy)
			}
			if typ == "AWS::DynamoDB::Table" && props(r)["DeletionProtectionEnabled"] != protect {
				t.Errorf("%s: table %s DeletionProtectionEnabled = %v, want %v", what, id, props(r)["DeletionProtectionEnabled"], protect)
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
// resource (LocalStack's free tier runs none): its block in cdk.json says
// autoDeleteObjects false.
func TestLocalStage(t *testing.T) {
	s := synth(t, map[string]string{"stage": "local"})
	if n := len(s.resources("Custom::S3AutoDeleteObjects")); n != 0 {
		t.Errorf("stage local: %d Custom::S3AutoDeleteObjects, want 0", n)
	}
	checkRemoval(t, s, "local", "Delete", false)
}

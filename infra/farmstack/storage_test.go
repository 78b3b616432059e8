package farmstack

import (
	"fmt"
	"reflect"
	"slices"
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

// TestCAKey (D2): the CA's key is an asymmetric KMS key of the stage
// (RSA_4096, SIGN_VERIFY, alias alias/compilefarm/<stage>/ca), retained
// whatever the stage's retain says, its key policy only the account root's
// administration; the fleet signs with it (--ca-key-kms, its ARN) and its
// task role may Sign, GetPublicKey and DescribeKey on that key and read no
// secret; output CAKmsKey. With caKeySecret (an imported Puppet Server
// key) the fleet reads that secret instead, with a custody warning.
func TestCAKey(t *testing.T) {
	for _, c := range []struct {
		stage string
		ctx   map[string]string
	}{{"dev", nil}, {"prd", protectedStage("prd")}} {
		s := synth(t, c.ctx)
		keys := s.resources("AWS::KMS::Key")
		if len(keys) != 1 {
			t.Fatalf("%s: %d KMS keys, want 1", c.stage, len(keys))
		}
		keyID, key := firstID(keys)
		p := props(key)
		if p["KeySpec"] != "RSA_4096" || p["KeyUsage"] != "SIGN_VERIFY" || num(p["PendingWindowInDays"]) != 30 {
			t.Errorf("%s: key %s KeySpec/KeyUsage/PendingWindowInDays %v/%v/%v, want RSA_4096/SIGN_VERIFY/30", c.stage, keyID, p["KeySpec"], p["KeyUsage"], p["PendingWindowInDays"])
		}
		if key["DeletionPolicy"] != "Retain" || key["UpdateReplacePolicy"] != "Retain" {
			t.Errorf("%s: key DeletionPolicy/UpdateReplacePolicy %v/%v: a stack delete must never schedule the CA key's deletion", c.stage, key["DeletionPolicy"], key["UpdateReplacePolicy"])
		}
		stmts := asList(digMap(p, "KeyPolicy")["Statement"])
		if len(stmts) != 1 {
			t.Errorf("%s: key policy %s, want one statement (the account root administers; IAM grants the rest)", c.stage, jsonString(p["KeyPolicy"]))
		} else if st := jsonString(stmts[0]); !containsAll(st, `"Effect":"Allow"`, `"Action":"kms:*"`, `:iam::`, `:root"`, `"Resource":"*"`) {
			t.Errorf("%s: key policy statement %s, want the account root's", c.stage, st)
		}
		_, alias := s.find(t, "AWS::KMS::Alias", "AliasName", "alias/compilefarm/"+c.stage+"/ca")
		if getAttID(alias["TargetKeyId"]) != keyID {
			t.Errorf("%s: alias targets %s, want %s", c.stage, jsonString(alias["TargetKeyId"]), keyID)
		}
		if n := len(s.resources("AWS::SecretsManager::Secret")); n != 0 {
			t.Errorf("%s: %d Secrets Manager secrets: nothing holds a CA private key any more", c.stage, n)
		}
		flags := s.flags(t)
		if got := jsonString(flags["ca-key-kms"]); got != `{"Fn::GetAtt":["`+keyID+`","Arn"]}` {
			t.Errorf("%s: --ca-key-kms %s, want the key's ARN", c.stage, got)
		}
		if _, ok := flags["ca-key-secret"]; ok {
			t.Errorf("%s: the fleet still gets --ca-key-secret", c.stage)
		}
		kms, secrets := s.taskRoleActions(t, keyID)
		if want := []string{"kms:DescribeKey", "kms:GetPublicKey", "kms:Sign"}; !slices.Equal(kms, want) {
			t.Errorf("%s: the task role's actions on the key %v, want %v", c.stage, kms, want)
		}
		if len(secrets) != 0 {
			t.Errorf("%s: the task role may %v: it reads no secret", c.stage, secrets)
		}
		outs := jsonString(s.json["Outputs"])
		if !containsAll(outs, `"CAKmsKey"`, keyID) || containsAll(outs, "CAKeySecret") {
			t.Errorf("%s: outputs %s, want CAKmsKey (the key's ARN) and no CAKeySecret", c.stage, outs)
		}
	}

	// The import route: a Puppet Server CA key in a secret the site made.
	s := synth(t, map[string]string{"caKeySecret": testCAKeyARN})
	if n := len(s.resources("AWS::KMS::Key")); n != 0 {
		t.Errorf("caKeySecret: %d KMS keys", n)
	}
	flags := s.flags(t)
	if got := jsonString(flags["ca-key-secret"]); got != `"`+testCAKeyARN+`"` {
		t.Errorf("caKeySecret: --ca-key-secret %s", got)
	}
	if _, ok := flags["ca-key-kms"]; ok {
		t.Error("caKeySecret: the fleet still gets --ca-key-kms")
	}
	if _, secrets := s.taskRoleActions(t, ""); !slices.Equal(secrets, []string{"secretsmanager:GetSecretValue"}) {
		t.Errorf("caKeySecret: the task role may %v on the secret, want GetSecretValue only", secrets)
	}
	if outs := jsonString(s.json["Outputs"]); !containsAll(outs, `"CAKeySecret"`, testCAKeyARN) || containsAll(outs, "CAKmsKey") {
		t.Errorf("caKeySecret: outputs %s", outs)
	}
	if _, err := configFrom(t, map[string]interface{}{"caKeySecret": "compilefarm/dev/ca-key"}); err == nil || !strings.Contains(err.Error(), "complete ARN") {
		t.Errorf("caKeySecret by name: %v, want an error asking for the complete ARN", err)
	}
	check(t, "caKeySecret's custody warning", func() {
		assertions.Annotations_FromStack(s.stack.Stack).HasWarning(jsii.String("*"), assertions.Match_StringLikeRegexp(jsii.String("caKeySecret")))
	})
}

// TestCAKmsKey: with caKmsKey (a Puppet Server key imported into KMS, a
// rotation's new key) the stack makes no key and no alias; the fleet
// signs with that key (--ca-key-kms, its ARN), and its task role may Sign,
// GetPublicKey and DescribeKey on that ARN only, in a statement of its
// own, and read no secret; output CAKmsKey is the ARN. Refused with
// caKeySecret, as an alias's ARN, in another shape or another region.
func TestCAKmsKey(t *testing.T) {
	for _, c := range []struct {
		name string
		ctx  map[string]string
	}{
		{"dev", map[string]string{"caKmsKey": testKmsKeyARN}},
		{"prd", withContext(protectedStage("prd"), "caKmsKey", testKmsKeyARN)},
	} {
		s := synth(t, c.ctx)
		for _, typ := range []string{"AWS::KMS::Key", "AWS::KMS::Alias", "AWS::SecretsManager::Secret"} {
			if n := len(s.resources(typ)); n != 0 {
				t.Errorf("%s: %d %s: the key is the site's", c.name, n, typ)
			}
		}
		flags := s.flags(t)
		if got := jsonString(flags["ca-key-kms"]); got != `"`+testKmsKeyARN+`"` {
			t.Errorf("%s: --ca-key-kms %s, want %s", c.name, got, testKmsKeyARN)
		}
		if _, ok := flags["ca-key-secret"]; ok {
			t.Errorf("%s: the fleet gets --ca-key-secret", c.name)
		}
		kms, secrets := s.taskRoleActions(t, testKmsKeyARN)
		if want := sorted(CAKeyActions); !slices.Equal(kms, want) {
			t.Errorf("%s: the task role's actions on the key %v, want %v", c.name, kms, want)
		}
		if len(secrets) != 0 {
			t.Errorf("%s: the task role may %v: it reads no secret", c.name, secrets)
		}
		_, taskRole, _ := s.roles(t)
		r := s.json["Resources"].(map[string]interface{})[taskRole].(map[string]interface{})
		for _, st := range s.allowsOf(r, taskRole) {
			res := jsonString(st["Resource"])
			if strings.Contains(res, testKmsKeyARN) && res != `"`+testKmsKeyARN+`"` {
				t.Errorf("%s: the key's statement is on %s, want the key's ARN alone", c.name, res)
			}
			for _, a := range asList(st["Action"]) {
				if strings.HasPrefix(a.(string), "kms:") && res != `"`+testKmsKeyARN+`"` {
					t.Errorf("%s: the task role may %s on %s, want KMS actions on the key only", c.name, a, res)
				}
			}
		}
		outs := s.json["Outputs"].(map[string]interface{})
		if got := jsonString(digMap(outs, "CAKmsKey")["Value"]); got != `"`+testKmsKeyARN+`"` {
			t.Errorf("%s: output CAKmsKey %s, want %s", c.name, got, testKmsKeyARN)
		}
		if _, ok := outs["CAKeySecret"]; ok {
			t.Errorf("%s: output CAKeySecret", c.name)
		}
	}

	// A multi-region key's ARN is a key's ARN too.
	mrk := "arn:aws:kms:eu-west-1:123456789012:key/mrk-1234abcd12ab34cd56ef1234567890ab"
	if c, err := configFrom(t, map[string]interface{}{"caKmsKey": mrk}); err != nil || c.CAKmsKey != mrk {
		t.Errorf("caKmsKey %s: %+v, %v", mrk, c.CAKmsKey, err)
	}
	prd := func(kv ...string) map[string]interface{} {
		ctx := map[string]interface{}{}
		for k, v := range protectedStage("prd") {
			ctx[k] = v
		}
		for i := 0; i+1 < len(kv); i += 2 {
			ctx[kv[i]] = kv[i+1]
		}
		return ctx
	}
	for _, c := range []struct {
		ctx  map[string]interface{}
		want string
	}{
		{map[string]interface{}{"caKmsKey": testKmsKeyARN, "caKeySecret": testCAKeyARN}, "caKeySecret and caKmsKey"},
		{map[string]interface{}{"caKmsKey": "arn:aws:kms:eu-west-1:123456789012:alias/compilefarm/dev/ca-2"}, "alias's ARN: give the key's own ARN"},
		{map[string]interface{}{"caKmsKey": "alias/compilefarm/dev/ca-2"}, "want a KMS key's ARN"},
		{map[string]interface{}{"caKmsKey": "1234abcd-12ab-34cd-56ef-1234567890ab"}, "want a KMS key's ARN"},
		{map[string]interface{}{"caKmsKey": "arn:aws:kms:eu-west-1:1234:key/1234abcd-12ab-34cd-56ef-1234567890ab"}, "want a KMS key's ARN"},
		{map[string]interface{}{"caKmsKey": testCAKeyARN}, "want a KMS key's ARN"},
		{prd("caKmsKey", "arn:aws:kms:us-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab"), "a key of region us-east-1, but stage prd is in eu-west-1"},
	} {
		if _, err := configFrom(t, c.ctx); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("context %v: %v, want an error saying %q", c.ctx, err, c.want)
		}
	}
}

// TestCAGeneration: the CA table is its generation's, compilefarm-<stage>-ca
// for the first (the table, and its logical ID, every stack had before) and
// compilefarm-<stage>-ca-<N> after; the fleet's --ca-table, its grants and
// output CATable follow caGeneration. caNextTable adds the next
// generation's table, empty, with no role's grant on it, under the logical
// ID the deploy that raises caGeneration keeps (so that deploy moves the
// fleet to the table `broker ca init` filled rather than replacing it).
func TestCAGeneration(t *testing.T) {
	caTables := func(s *synthed) map[string]string { // name → logical ID
		out := map[string]string{}
		for id, r := range s.resources("AWS::DynamoDB::Table") {
			if name, _ := props(r)["TableName"].(string); strings.HasPrefix(name, "compilefarm-"+s.stack.Config.Stage+"-ca") {
				out[name] = id
			}
		}
		return out
	}
	output := func(s *synthed, name string) string {
		return jsonString(digMap(s.json["Outputs"].(map[string]interface{}), name)["Value"])
	}
	first := dev(t)
	firstTables := caTables(first)
	if len(firstTables) != 1 || firstTables["compilefarm-dev-ca"] == "" || !strings.HasPrefix(firstTables["compilefarm-dev-ca"], "StorageTableca") {
		t.Fatalf("dev: CA tables %v, want compilefarm-dev-ca under the logical ID StorageTableca...", firstTables)
	}

	caActions := "dynamodb:DeleteItem dynamodb:GetItem dynamodb:PutItem dynamodb:Scan dynamodb:UpdateItem"
	for _, c := range []struct {
		name      string
		ctx       map[string]string
		tables    []string // the CA tables, the fleet's first
		next      string   // output CANextTable's table, if any
		retention string   // the tables' DeletionPolicy
	}{
		{"next", map[string]string{"caNextTable": "true"}, []string{"compilefarm-dev-ca", "compilefarm-dev-ca-2"}, "compilefarm-dev-ca-2", "Delete"},
		{"second", map[string]string{"caGeneration": "2"}, []string{"compilefarm-dev-ca-2"}, "", "Delete"},
		{"second, next", map[string]string{"caGeneration": "2", "caNextTable": "true"}, []string{"compilefarm-dev-ca-2", "compilefarm-dev-ca-3"}, "compilefarm-dev-ca-3", "Delete"},
		{"prd third", withContext(protectedStage("prd"), "caGeneration", "3"), []string{"compilefarm-prd-ca-3"}, "", "Retain"},
	} {
		s := synth(t, c.ctx)
		got := caTables(s)
		if len(got) != len(c.tables) {
			t.Errorf("%s: CA tables %v, want %v", c.name, got, c.tables)
		}
		for _, name := range c.tables {
			id := got[name]
			if id == "" {
				t.Errorf("%s: no table %s (CA tables %v)", c.name, name, got)
				continue
			}
			r := s.resources("AWS::DynamoDB::Table")[id]
			if r["DeletionPolicy"] != c.retention || r["UpdateReplacePolicy"] != c.retention {
				t.Errorf("%s: %s DeletionPolicy/UpdateReplacePolicy %v/%v, want %s", c.name, name, r["DeletionPolicy"], r["UpdateReplacePolicy"], c.retention)
			}
			if !reflect.DeepEqual(props(r)["KeySchema"], props(first.resources("AWS::DynamoDB::Table")[firstTables["compilefarm-dev-ca"]])["KeySchema"]) {
				t.Errorf("%s: %s KeySchema %s, not the CA table's", c.name, name, jsonString(props(r)["KeySchema"]))
			}
		}
		fleetTable := got[c.tables[0]]
		if f := jsonString(s.flags(t)["ca-table"]); f != `{"Ref":"`+fleetTable+`"}` {
			t.Errorf("%s: --ca-table %s, want %s's", c.name, f, c.tables[0])
		}
		if o := output(s, "CATable"); o != `{"Ref":"`+fleetTable+`"}` {
			t.Errorf("%s: output CATable %s, want %s", c.name, o, c.tables[0])
		}
		if c.next == "" {
			if _, ok := s.json["Outputs"].(map[string]interface{})["CANextTable"]; ok {
				t.Errorf("%s: output CANextTable without caNextTable", c.name)
			}
		} else if o := output(s, "CANextTable"); o != `{"Ref":"`+got[c.next]+`"}` {
			t.Errorf("%s: output CANextTable %s, want %s", c.name, o, c.next)
		}
		// The fleet's grants are on its generation's table alone; no role
		// may touch the next one before it is the fleet's.
		ca := strings.TrimPrefix(c.tables[0], "compilefarm-"+s.stack.Config.Stage+"-")
		compileRole, taskRole, _ := s.roles(t)
		fleet := s.resourceActions(t, taskRole)
		if fleet["table "+ca] != caActions {
			t.Errorf("%s: the fleet's task role on table %s: %q, want %q", c.name, ca, fleet["table "+ca], caActions)
		}
		for _, role := range []struct {
			what string
			got  map[string]string
		}{{"fleet task", fleet}, {"compile function", s.resourceActions(t, compileRole)}} {
			for res, actions := range role.got {
				if strings.HasPrefix(res, "table ca") && (role.what != "fleet task" || res != "table "+ca) {
					t.Errorf("%s: the %s role may %s on %s", c.name, role.what, actions, res)
				}
			}
		}
		// Logical IDs: the first generation's is the one the stack always
		// had; a prepared table keeps its ID when it becomes the fleet's.
		if id, ok := got["compilefarm-dev-ca"]; ok && id != firstTables["compilefarm-dev-ca"] {
			t.Errorf("%s: compilefarm-dev-ca's logical ID %s, want %s (the table every stack has)", c.name, id, firstTables["compilefarm-dev-ca"])
		}
	}
	next, second := caTables(synth(t, map[string]string{"caNextTable": "true"})), caTables(synth(t, map[string]string{"caGeneration": "2"}))
	if next["compilefarm-dev-ca-2"] != second["compilefarm-dev-ca-2"] {
		t.Errorf("compilefarm-dev-ca-2's logical ID is %s while prepared (caNextTable) and %s as the fleet's (caGeneration 2): "+
			"raising caGeneration would replace the table ca init filled", next["compilefarm-dev-ca-2"], second["compilefarm-dev-ca-2"])
	}

	for _, bad := range []struct {
		ctx  map[string]interface{}
		want string
	}{
		{map[string]interface{}{"caGeneration": "0"}, "caGeneration 0: want 1"},
		{map[string]interface{}{"caGeneration": "-2"}, "caGeneration -2"},
		{map[string]interface{}{"caGeneration": "two"}, "caGeneration=\"two\" is not a whole number"},
		{map[string]interface{}{"caNextTable": "yes please"}, "caNextTable"},
	} {
		if _, err := configFrom(t, bad.ctx); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("context %v: %v, want an error saying %q", bad.ctx, err, bad.want)
		}
	}
}

// withContext returns ctx with the keys and values kv added.
func withContext(ctx map[string]string, kv ...string) map[string]string {
	for i := 0; i+1 < len(kv); i += 2 {
		ctx[kv[i]] = kv[i+1]
	}
	return ctx
}

// testKmsKeyARN is a KMS key the site made (caKmsKey).
const testKmsKeyARN = "arn:aws:kms:eu-west-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab"

// testCAKeyARN is an imported CA key's secret (caKeySecret).
const testCAKeyARN = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:site/puppet-ca-key-AbCdEf"

// taskRoleActions returns the fleet task role's actions on the KMS key
// keyID and its Secrets Manager actions on anything, each sorted.
func (s *synthed) taskRoleActions(t *testing.T, keyID string) (kms, secrets []string) {
	t.Helper()
	_, task := firstID(s.resources("AWS::ECS::TaskDefinition"))
	role := getAttID(props(task)["TaskRoleArn"])
	if role == "" {
		t.Fatalf("no task role in %s", jsonString(props(task)["TaskRoleArn"]))
	}
	for _, r := range s.resources("AWS::IAM::Policy") {
		p := props(r)
		if !strings.Contains(jsonString(p["Roles"]), `{"Ref":"`+role+`"}`) {
			continue
		}
		for _, st := range asList(digMap(p, "PolicyDocument")["Statement"]) {
			st := st.(map[string]interface{})
			onKey := keyID != "" && strings.Contains(jsonString(st["Resource"]), `"`+keyID+`"`)
			for _, a := range asList(st["Action"]) {
				a := a.(string)
				if onKey {
					kms = append(kms, a)
				}
				if strings.HasPrefix(a, "secretsmanager:") {
					secrets = append(secrets, a)
				}
			}
		}
	}
	sort.Strings(kms)
	sort.Strings(secrets)
	return slices.Compact(kms), slices.Compact(secrets)
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

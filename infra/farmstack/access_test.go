package farmstack

import (
	"maps"
	"slices"
	"sort"
	"strings"
	"testing"
)

// roleGrants is what a role of the template may do: its allowed actions,
// each with the resources it is allowed on (as JSON), from the role's
// inline policies and every AWS::IAM::Policy attached to it; and its
// managed policies.
type roleGrants struct {
	actions map[string][]string // action → resources (JSON, sorted)
	managed []string            // ManagedPolicyArns, as JSON
}

// sortedActions is the role's allowed actions, sorted.
func (g roleGrants) sortedActions() []string {
	out := make([]string, 0, len(g.actions))
	for a := range g.actions {
		out = append(out, a)
	}
	sort.Strings(out)
	return out
}

// allowsOf returns the Allow statements of role r (logical ID role): its
// inline policies' and those of the template's IAM policies attached to it.
func (s *synthed) allowsOf(r map[string]interface{}, role string) []map[string]interface{} {
	var docs []interface{}
	for _, pol := range asList(props(r)["Policies"]) {
		docs = append(docs, pol.(map[string]interface{})["PolicyDocument"])
	}
	for _, pol := range s.resources("AWS::IAM::Policy") {
		for _, ref := range asList(props(pol)["Roles"]) {
			if id, _ := ref.(map[string]interface{})["Ref"].(string); id == role {
				docs = append(docs, props(pol)["PolicyDocument"])
			}
		}
	}
	var out []map[string]interface{}
	for _, d := range docs {
		for _, st := range asList(d.(map[string]interface{})["Statement"]) {
			if st := st.(map[string]interface{}); st["Effect"] == "Allow" {
				out = append(out, st)
			}
		}
	}
	return out
}

// grantsOf collects the grants of role (a logical ID).
func (s *synthed) grantsOf(t *testing.T, role string) roleGrants {
	t.Helper()
	r, ok := s.json["Resources"].(map[string]interface{})[role].(map[string]interface{})
	if !ok || r["Type"] != "AWS::IAM::Role" {
		t.Fatalf("%s is not a role of the template", role)
	}
	g := roleGrants{actions: map[string][]string{}}
	for _, m := range asList(props(r)["ManagedPolicyArns"]) {
		g.managed = append(g.managed, jsonString(m))
	}
	for _, st := range s.allowsOf(r, role) {
		for _, a := range asList(st["Action"]) {
			for _, res := range asList(st["Resource"]) {
				g.actions[a.(string)] = append(g.actions[a.(string)], jsonString(res))
			}
		}
	}
	for a := range g.actions {
		sort.Strings(g.actions[a])
		g.actions[a] = slices.Compact(g.actions[a])
	}
	return g
}

// roles returns the logical IDs of the compile function's role ("" with
// compileFunction=false) and the fleet's task and execution roles (""
// with fleet=false).
func (s *synthed) roles(t *testing.T) (compile, task, execution string) {
	t.Helper()
	for _, r := range s.resources("AWS::Lambda::Function") {
		if p := props(r); p["FunctionName"] == "compilefarm-"+s.stack.Config.Stage+"-compile" {
			compile = getAttID(p["Role"])
		}
	}
	if _, td := firstID(s.resources("AWS::ECS::TaskDefinition")); td != nil {
		task, execution = getAttID(props(td)["TaskRoleArn"]), getAttID(props(td)["ExecutionRoleArn"])
	}
	return compile, task, execution
}

// caKey is what the fleet's task role does with the CA's KMS key, and on
// what (grantCAKey in fleet.go; caKeySecret's route is TestCAKey's).
var caKey = struct {
	resource string // as synthed.describe renders it
	actions  []string
}{"kms key", []string{"kms:DescribeKey", "kms:GetPublicKey", "kms:Sign"}}

// TestRoleActions pins the exact sorted action list of the compile
// function's role and the fleet's task role, with and without PuppetDB:
// every action is one the code calls (access.go says which call needs
// which), so an added action, however it got there, fails here and must be
// justified in access.go.
func TestRoleActions(t *testing.T) {
	// The compile function: the data (access.go) plus the SQS event
	// sources' grant, which the CDK adds for the poller Lambda runs with
	// the function's role (sqs:ChangeMessageVisibility, DeleteMessage,
	// GetQueueAttributes, GetQueueUrl, ReceiveMessage on both lanes).
	compile := []string{
		"dynamodb:BatchGetItem", "dynamodb:BatchWriteItem", "dynamodb:DeleteItem", "dynamodb:GetItem", "dynamodb:Query", "dynamodb:UpdateItem",
		"s3:GetObject", "s3:ListBucket", "s3:PutObject", "s3:PutObjectTagging",
		"sqs:ChangeMessageVisibility", "sqs:DeleteMessage", "sqs:GetQueueAttributes", "sqs:GetQueueUrl", "sqs:ReceiveMessage", "sqs:SendMessage",
	}
	// With PuppetDB: the queries table's RecordQueries (PutItem) and the
	// operator's secrets, read at init.
	compilePDB := sorted(append(slices.Clone(compile), "dynamodb:PutItem", "secretsmanager:GetSecretValue"))
	task := sorted(append([]string{
		"dynamodb:BatchGetItem", "dynamodb:BatchWriteItem", "dynamodb:DeleteItem", "dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:Query",
		"dynamodb:Scan", "dynamodb:UpdateItem",
		"s3:GetObject", "s3:ListBucket", "s3:PutObject", "s3:PutObjectTagging",
		"sqs:CreateQueue", "sqs:DeleteMessage", "sqs:DeleteQueue", "sqs:GetQueueAttributes", "sqs:GetQueueUrl", "sqs:ReceiveMessage", "sqs:SendMessage",
	}, caKey.actions...))
	// With PuppetDB: the outbox's Retry (ChangeMessageVisibility).
	taskPDB := sorted(append(slices.Clone(task), "sqs:ChangeMessageVisibility"))

	for _, c := range []struct {
		name          string
		ctx           map[string]string
		compile, task []string // nil: no such role
	}{
		{"dev", nil, compile, task},
		{"prod", withAlarmEmail(protectedStage("prod")), compile, task},
		{"no fleet", map[string]string{"fleet": "false"}, compile, nil},
		{"no compile function", map[string]string{"compileFunction": "false"}, nil, task},
		{"PuppetDB", pdbFull(), compilePDB, taskPDB},
		{"PuppetDB inline", pdbInline(t), sorted(append(slices.Clone(compile), "dynamodb:PutItem")), taskPDB},
	} {
		s := synth(t, c.ctx)
		compileRole, taskRole, _ := s.roles(t)
		for _, r := range []struct {
			what, id string
			want     []string
		}{{"compile function", compileRole, c.compile}, {"fleet task", taskRole, c.task}} {
			if (r.id == "") != (r.want == nil) {
				t.Errorf("%s: %s role %q, want one: %v", c.name, r.what, r.id, r.want != nil)
				continue
			}
			if r.id == "" {
				continue
			}
			if got := s.grantsOf(t, r.id).sortedActions(); !slices.Equal(got, r.want) {
				t.Errorf("%s: %s role's actions:\n got %s\nwant %s\n(added %v, missing %v)", c.name, r.what,
					strings.Join(got, " "), strings.Join(r.want, " "), minus(got, r.want), minus(r.want, got))
			}
		}
	}
}

// sorted returns v sorted, each once.
func sorted(v []string) []string {
	v = slices.Clone(v)
	sort.Strings(v)
	return slices.Compact(v)
}

// minus is what a has that b does not.
func minus(a, b []string) []string {
	var out []string
	for _, x := range a {
		if !slices.Contains(b, x) {
			out = append(out, x)
		}
	}
	return out
}

// describe renders a policy resource readably: a table or queue by its
// name, the bucket as "bucket", a joined ARN with its pseudo parameters as
// ${AWS::Region} and the like.
func (s *synthed) describe(res interface{}) string {
	switch v := res.(type) {
	case string:
		return v
	case map[string]interface{}:
		if id := getAttID(v); id != "" {
			r, _ := s.json["Resources"].(map[string]interface{})[id].(map[string]interface{})
			p := props(r)
			switch r["Type"] {
			case "AWS::DynamoDB::Table":
				return "table " + strings.TrimPrefix(p["TableName"].(string), "compilefarm-"+s.stack.Config.Stage+"-")
			case "AWS::SQS::Queue":
				return "queue " + strings.TrimPrefix(p["QueueName"].(string), "compilefarm-"+s.stack.Config.Stage+"-")
			case "AWS::S3::Bucket":
				return "bucket"
			case "AWS::KMS::Key":
				return "kms key"
			}
			return id
		}
		if ref, ok := v["Ref"].(string); ok {
			r, _ := s.json["Resources"].(map[string]interface{})[ref].(map[string]interface{})
			if r["Type"] == "AWS::SecretsManager::Secret" { // Ref is its ARN
				return "secret " + strings.TrimPrefix(props(r)["Name"].(string), "compilefarm/"+s.stack.Config.Stage+"/")
			}
			return "${" + ref + "}"
		}
		if j, ok := v["Fn::Join"].([]interface{}); ok && len(j) == 2 {
			var b strings.Builder
			for _, part := range asList(j[1]) {
				b.WriteString(s.describe(part))
			}
			return b.String()
		}
	}
	return jsonString(res)
}

// resourceActions is role's grants as resource (described) → its sorted
// actions.
func (s *synthed) resourceActions(t *testing.T, role string) map[string]string {
	t.Helper()
	by := map[string][]string{}
	r := s.json["Resources"].(map[string]interface{})[role].(map[string]interface{})
	for _, st := range s.allowsOf(r, role) {
		for _, res := range asList(st["Resource"]) {
			for _, a := range asList(st["Action"]) {
				by[s.describe(res)] = append(by[s.describe(res)], a.(string))
			}
		}
	}
	out := map[string]string{}
	for res, actions := range by {
		out[res] = strings.Join(sorted(actions), " ")
	}
	return out
}

// TestRoleResources pins what the compile function's role and the fleet's
// task role may do on each resource: the bucket's prefixes (farm spaces),
// each table and each index apart, each queue; with PuppetDB, the
// operator's secrets (compile) and the outbox and its dead-letter queue
// (fleet). No role can delete an object, scan a table other than the
// environments and the CA, or read reports/ and filebucket/ from a compile.
func TestRoleResources(t *testing.T) {
	consume := "sqs:ChangeMessageVisibility sqs:DeleteMessage sqs:GetQueueAttributes sqs:GetQueueUrl sqs:ReceiveMessage" // the event sources'
	compile := map[string]string{
		"bucket":                          "s3:ListBucket",
		"bucket/catalogs/*":               "s3:GetObject s3:PutObject s3:PutObjectTagging",
		"bucket/code/*":                   "s3:GetObject",
		"bucket/content/*":                "s3:GetObject",
		"bucket/facts/*":                  "s3:GetObject",
		"bucket/nodeinfo/*":               "s3:GetObject s3:PutObject",
		"queue bulk":                      consume + " sqs:SendMessage",
		"queue urgent":                    consume + " sqs:SendMessage",
		"table environments":              "dynamodb:GetItem",
		"table node-index":                "dynamodb:BatchWriteItem dynamodb:DeleteItem",
		"table node-index/index/by-entry": "dynamodb:Query",
		"table nodes":                     "dynamodb:BatchGetItem dynamodb:GetItem dynamodb:UpdateItem",
	}
	fleet := map[string]string{
		caKey.resource: strings.Join(caKey.actions, " "),
		"arn:${AWS::Partition}:sqs:${AWS::Region}:${AWS::AccountId}:compilefarm-dev-pcp-*": strings.Join(sorted(PCPInboxActions), " "),
		"bucket":                               "s3:ListBucket",
		"bucket/catalogs/*":                    "s3:GetObject s3:PutObject s3:PutObjectTagging",
		"bucket/code/*":                        "s3:GetObject s3:PutObject",
		"bucket/content/*":                     "s3:GetObject s3:PutObject",
		"bucket/facts/*":                       "s3:GetObject s3:PutObject",
		"bucket/filebucket/*":                  "s3:GetObject s3:PutObject",
		"bucket/nodeinfo/*":                    "s3:GetObject s3:PutObject",
		"bucket/reports/*":                     "s3:GetObject s3:PutObject",
		"queue bulk":                           "sqs:GetQueueAttributes sqs:SendMessage",
		"queue urgent":                         "sqs:GetQueueAttributes sqs:SendMessage",
		"table ca":                             "dynamodb:DeleteItem dynamodb:GetItem dynamodb:PutItem dynamodb:Scan dynamodb:UpdateItem",
		"table environments":                   "dynamodb:GetItem dynamodb:PutItem dynamodb:Scan",
		"table jobs":                           "dynamodb:BatchWriteItem dynamodb:GetItem dynamodb:PutItem dynamodb:Query dynamodb:UpdateItem",
		"table jobs/index/by-created":          "dynamodb:Query",
		"table node-index":                     "dynamodb:BatchWriteItem dynamodb:DeleteItem",
		"table node-index/index/by-entry":      "dynamodb:Query",
		"table nodes":                          "dynamodb:BatchGetItem dynamodb:GetItem dynamodb:UpdateItem",
		"table presence":                       "dynamodb:DeleteItem dynamodb:GetItem dynamodb:PutItem",
		"table presence/index/by-client-shard": "dynamodb:Query",
	}
	with := func(m map[string]string, more map[string]string) map[string]string {
		out := maps.Clone(m)
		maps.Copy(out, more)
		return out
	}
	for _, c := range []struct {
		name           string
		ctx            map[string]string
		compile, fleet map[string]string
	}{
		{"dev", nil, compile, fleet},
		{"PuppetDB", pdbFull(), with(compile, map[string]string{
			testIdentityARN: "secretsmanager:GetSecretValue",
			testCAARN:       "secretsmanager:GetSecretValue",
			"table queries": "dynamodb:BatchGetItem dynamodb:PutItem",
		}), with(fleet, map[string]string{
			"queue puppetdb-outbox.fifo": "sqs:ChangeMessageVisibility sqs:DeleteMessage sqs:GetQueueAttributes sqs:ReceiveMessage sqs:SendMessage",
			"queue puppetdb-dlq.fifo":    "sqs:GetQueueAttributes sqs:SendMessage",
			"table queries":              "dynamodb:GetItem dynamodb:Query dynamodb:UpdateItem",
		})},
	} {
		s := synth(t, c.ctx)
		compileRole, taskRole, _ := s.roles(t)
		for _, r := range []struct {
			what, id string
			want     map[string]string
		}{{"compile function", compileRole, c.compile}, {"fleet task", taskRole, c.fleet}} {
			got := s.resourceActions(t, r.id)
			for _, res := range sorted(append(slices.Collect(maps.Keys(got)), slices.Collect(maps.Keys(r.want))...)) {
				if got[res] != r.want[res] {
					t.Errorf("%s: %s role on %s: %q, want %q", c.name, r.what, res, got[res], r.want[res])
				}
			}
		}
	}
}

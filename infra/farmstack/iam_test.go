package farmstack

import (
	"strings"
	"testing"
)

// TestLeastPrivilege: grants only. No statement allows every action of a
// data service (or everything), and no role carries a full-access or
// administrator managed policy.
func TestLeastPrivilege(t *testing.T) {
	for _, ctx := range []map[string]string{nil, {"fleet": "false"}, {"stage": "prod", "alarmEmail": "ops@example.com"}} {
		s := synth(t, ctx)
		var docs []interface{}
		for _, r := range s.resources("AWS::IAM::Policy") {
			docs = append(docs, props(r)["PolicyDocument"])
		}
		for id, r := range s.resources("AWS::IAM::Role") {
			p := props(r)
			for _, pol := range asList(p["Policies"]) {
				docs = append(docs, pol.(map[string]interface{})["PolicyDocument"])
			}
			if m := jsonString(p["ManagedPolicyArns"]); strings.Contains(m, "FullAccess") || strings.Contains(m, "AdministratorAccess") || strings.Contains(m, "PowerUser") {
				t.Errorf("%v: role %s has managed policies %s", ctx, id, m)
			}
		}
		n := 0
		for _, d := range docs {
			for _, st := range asList(d.(map[string]interface{})["Statement"]) {
				st := st.(map[string]interface{})
				if st["Effect"] != "Allow" {
					continue
				}
				for _, a := range asList(st["Action"]) {
					n++
					a, _ := a.(string)
					if a == "*" {
						t.Errorf("%v: statement allows every action: %s", ctx, jsonString(st))
					}
					for _, svc := range []string{"s3", "dynamodb", "sqs", "secretsmanager", "kms", "lambda", "iam"} {
						if strings.EqualFold(a, svc+":*") {
							t.Errorf("%v: statement allows %s: %s", ctx, a, jsonString(st))
						}
					}
				}
			}
		}
		if n == 0 {
			t.Errorf("%v: no IAM statements found", ctx)
		}
	}
}

func asList(v interface{}) []interface{} {
	switch v := v.(type) {
	case nil:
		return nil
	case []interface{}:
		return v
	}
	return []interface{}{v}
}

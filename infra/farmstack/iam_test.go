package farmstack

import (
	"slices"
	"sort"
	"strings"
	"testing"
)

// TestLeastPrivilege: grants only. No statement allows every action of a
// data service (or everything), and no role carries a full-access or
// administrator managed policy; with PuppetDB too (TestPuppetDBGrants
// checks who gets the outbox and the secrets).
func TestLeastPrivilege(t *testing.T) {
	prod := protectedStage("prod")
	prod["alarmEmail"] = "ops@example.com"
	for _, ctx := range []map[string]string{nil, {"fleet": "false"}, prod, pdbFull()} {
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
		n, inboxes := 0, 0
		for _, d := range docs {
			for _, st := range asList(d.(map[string]interface{})["Statement"]) {
				st := st.(map[string]interface{})
				if st["Effect"] != "Allow" {
					continue
				}
				if st["Sid"] == "PCPInboxes" {
					inboxes++
					checkPCPInboxes(t, ctx, st)
				}
				for _, a := range asList(st["Action"]) {
					n++
					a, _ := a.(string)
					if a == "*" {
						t.Errorf("%v: statement allows every action: %s", ctx, jsonString(st))
					}
					// Queues are created and deleted only as PCP inboxes.
					if (a == "sqs:CreateQueue" || a == "sqs:DeleteQueue") && st["Sid"] != "PCPInboxes" {
						t.Errorf("%v: statement allows %s beyond the PCP inboxes: %s", ctx, a, jsonString(st))
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
		if want := map[bool]int{true: 0, false: 1}[ctx["fleet"] == "false"]; inboxes != want {
			t.Errorf("%v: %d PCPInboxes statements, want %d (the fleet's)", ctx, inboxes, want)
		}
	}
}

// checkPCPInboxes: the fleet's inbox statement allows exactly what
// sqsqueue.Inbox calls, on the stage's compilefarm-<stage>-pcp-* queues
// only.
func checkPCPInboxes(t *testing.T, ctx map[string]string, st map[string]interface{}) {
	t.Helper()
	var actions []string
	for _, a := range asList(st["Action"]) {
		actions = append(actions, a.(string))
	}
	sort.Strings(actions)
	want := slices.Sorted(slices.Values(PCPInboxActions))
	if !slices.Equal(actions, want) {
		t.Errorf("%v: PCPInboxes actions %v, want %v", ctx, actions, want)
	}
	stage := ctx["stage"]
	if stage == "" {
		stage = "dev"
	}
	res := asList(st["Resource"])
	if len(res) != 1 {
		t.Fatalf("%v: PCPInboxes resources %s, want one", ctx, jsonString(res))
	}
	r := jsonString(res[0])
	if ctx["account"] != "" { // a stack with an environment writes it in
		if want := `"arn:aws:sqs:` + ctx["region"] + `:` + ctx["account"] + `:compilefarm-` + stage + `-pcp-*"`; r != want {
			t.Errorf("%v: PCPInboxes resource %s, want %s", ctx, r, want)
		}
	} else if !containsAll(r, `"arn:"`, `{"Ref":"AWS::Partition"}`, `":sqs:"`, `{"Ref":"AWS::Region"}`, `{"Ref":"AWS::AccountId"}`, `":compilefarm-`+stage+`-pcp-*"`) {
		t.Errorf("%v: PCPInboxes resource %s, want arn:PARTITION:sqs:REGION:ACCOUNT:compilefarm-%s-pcp-*", ctx, r, stage)
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

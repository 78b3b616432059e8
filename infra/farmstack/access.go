package farmstack

import (
	"slices"
	"strings"

	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssecretsmanager"
	"github.com/aws/jsii-runtime-go"

	"github.com/compilefarm/compilefarm/pkg/dynamostate"
	"github.com/compilefarm/compilefarm/pkg/farm"
)

// Access: what the compile function's role and the fleet's task role may
// do with the farm's data, as explicit statements of the actions the code
// calls on the resources it calls them on (issue 23, D6). The CDK's
// Grant* helpers give more: GrantReadWrite on a bucket adds
// s3:DeleteObject*, the object lock actions (PutObjectRetention,
// PutObjectLegalHold) and tagging; GrantReadWriteData on a table adds
// dynamodb:Scan, DescribeTable, ConditionCheckItem and the stream reads
// (GetRecords, GetShardIterator) on every index; nothing here calls them.
// TestRoleActions and TestRoleResources pin the result.
//
// How each SDK call maps to an IAM action, where the name does not say it:
//   - S3 HeadObject (s3store.Has) is s3:GetObject; GetObject with a
//     checksum mode and PutObject with x-amz-checksum-sha256 and
//     If-None-Match: * need nothing more than s3:GetObject and
//     s3:PutObject (SSE-S3: no KMS permission). s3:ListBucket on the
//     bucket makes S3 answer 404 rather than 403 for a missing key, which
//     s3store needs to tell "absent" from "forbidden" (its package doc).
//   - DynamoDB BatchGetItem and BatchWriteItem are their own actions
//     (dynamodb:BatchGetItem, dynamodb:BatchWriteItem), not GetItem or
//     PutItem/DeleteItem; a Query of a global secondary index is
//     dynamodb:Query on the index's ARN (TABLE/index/NAME), not the
//     table's. A Scan paginator is dynamodb:Scan per page. Conditional
//     writes need no more than the write. No code path uses
//     TransactWriteItems (it would be PutItem/UpdateItem/DeleteItem/
//     ConditionCheckItem per element), DescribeTable (only
//     dynamostate.EnsureTables' waiter, for tests) or the streams.
//   - SQS DeleteMessageBatch is sqs:DeleteMessage; calls that take a
//     queue URL need no sqs:GetQueueUrl.
//   - Secrets Manager GetSecretValue is secretsmanager:GetSecretValue
//     only; DescribeSecret is not called.

// ContentAccess is what a role does in the content bucket: the farm.Space
// prefixes (s3store's key layout, <space>/..., with the stack's empty
// prefix: the bucket is the stage's own) it reads and writes. Names
// (s3store's names.go) live inside their space's prefix, so a space's
// statement covers them.
type ContentAccess struct {
	Read, Write []farm.Space
	// Retire are the spaces whose superseded objects the role retires
	// (farm.ContentRetirer, s3store.Retire and Keep): a CopyObject of an
	// object onto itself with a tag is s3:GetObject on the source,
	// s3:PutObject on the target and s3:PutObjectTagging for the tag;
	// Keep is a PutObjectTagging.
	Retire []farm.Space
}

// TableAccess is what a role does with one table of dynamostate.Tables().
type TableAccess struct {
	Role    string   // the dynamostate role: RoleNodes, ...
	Actions []string // on the table itself
	// Indexes are the global secondary indexes the role queries
	// (dynamodb:Query on TABLE/index/NAME).
	Indexes []string
}

// RoleAccess is what one role does with the farm's data.
type RoleAccess struct {
	Content ContentAccess
	Tables  []TableAccess
	// CompileQueues are the actions on the urgent and bulk queues.
	CompileQueues []string
}

// DynamoDB actions, as the code calls them.
const (
	ddbBatchGet   = "dynamodb:BatchGetItem"
	ddbBatchWrite = "dynamodb:BatchWriteItem"
	ddbDelete     = "dynamodb:DeleteItem"
	ddbGet        = "dynamodb:GetItem"
	ddbPut        = "dynamodb:PutItem"
	ddbQuery      = "dynamodb:Query"
	ddbScan       = "dynamodb:Scan"
	ddbUpdate     = "dynamodb:UpdateItem"
)

// CompileAccess is what the compile function (functions/compile: the
// compiler.Pool's HandleBatch, the intake's RecompileCollectors for
// collectors, and with PuppetDB the QueryStore's RecordQueries) calls;
// puppetDB adds the queries table.
//
// Content: reads a job's facts (facts/), node information (nodeinfo/),
// code manifests and files (code/, content/ through code.Library) and the
// node's earlier catalogs (catalogs/: exports, reads records); writes
// catalogs (and their gzip form, read records, query texts) and node
// information (with a classifier). Never reports/ or filebucket/, which
// hold what agents send: the function runs the site's Puppet code.
func CompileAccess(puppetDB bool) RoleAccess {
	a := RoleAccess{
		Content: ContentAccess{
			Read:  []farm.Space{farm.SpaceCatalogs, farm.SpaceCode, farm.SpaceContent, farm.SpaceFacts, farm.SpaceNodeInfo},
			Write: []farm.Space{farm.SpaceCatalogs, farm.SpaceNodeInfo},
			// A compile that moves a node's catalog retires the one it
			// drops, and keeps one it comes back to.
			Retire: []farm.Space{farm.SpaceCatalogs},
		},
		Tables: []TableAccess{
			// GetNode and UpdateNode's consistent read (GetItem), its
			// conditional write (UpdateItem); QueryNodes' records
			// (BatchGetItem), for RecompileCollectors.
			{Role: dynamostate.RoleNodes, Actions: []string{ddbBatchGet, ddbGet, ddbUpdate}},
			// UpdateNode's index entries (BatchWriteItem puts and deletes);
			// QueryNodes (Query of by-entry) and its removal of a stale
			// entry (DeleteItem).
			{Role: dynamostate.RoleNodeIndex, Actions: []string{ddbBatchWrite, ddbDelete}, Indexes: []string{dynamostate.IndexByEntry}},
			// RecompileCollectors' GetEnvironment. The function never lists
			// environments (no Scan).
			{Role: dynamostate.RoleEnvironments, Actions: []string{ddbGet}},
		},
		// Collectors' recompiles are queued from the function (Enqueue);
		// the event sources' own grant covers the receive side.
		CompileQueues: []string{"sqs:SendMessage"},
	}
	if puppetDB {
		// RecordQueries: BatchGetItem of the keys, a conditional PutItem
		// per new query.
		a.Tables = append(a.Tables, TableAccess{Role: dynamostate.RoleQueries, Actions: []string{ddbBatchGet, ddbPut}})
	}
	return a
}

// FleetAccess is what broker serve --backend aws calls (broker/serve.go:
// the front door, intake, operator API, release deployer, CA, PCP broker
// and, with PuppetDB, the sink's spills and the query refresher);
// puppetDB adds the queries table. The CA key, the PCP inboxes and the
// PuppetDB queues are granted beside it (grantFleet).
//
// Content: reads every space; writes every space but catalogs/ (only
// compiles write catalogs): facts/ and nodeinfo/ (intake), reports/ (the
// front door, the PuppetDB sink's spills), filebucket/ (the filebucket
// API), code/ and content/ (code deploys through the operator API); in
// catalogs/ it only retires (a copy of a catalog onto itself, tagged).
func FleetAccess(puppetDB bool) RoleAccess {
	a := RoleAccess{
		Content: ContentAccess{
			Read: []farm.Space{farm.SpaceCatalogs, farm.SpaceCode, farm.SpaceContent, farm.SpaceFacts, farm.SpaceFilebucket,
				farm.SpaceNodeInfo, farm.SpaceReports},
			Write: []farm.Space{farm.SpaceCode, farm.SpaceContent, farm.SpaceFacts, farm.SpaceFilebucket, farm.SpaceNodeInfo, farm.SpaceReports},
			// The intake retires the catalogs a promotion or a dropped
			// candidate leaves behind (a copy onto itself: it writes no
			// new catalog).
			Retire: []farm.Space{farm.SpaceCatalogs},
		},
		Tables: []TableAccess{
			// Nodes as for the compile function; RecordReport is an
			// UpdateItem, the last run's summary a GetItem.
			{Role: dynamostate.RoleNodes, Actions: []string{ddbBatchGet, ddbGet, ddbUpdate}},
			{Role: dynamostate.RoleNodeIndex, Actions: []string{ddbBatchWrite, ddbDelete}, Indexes: []string{dynamostate.IndexByEntry}},
			// GetEnvironment, PutEnvironment (deploys) and
			// ListEnvironments, a Scan (the environment cache, the node
			// API, RequeuePending).
			{Role: dynamostate.RoleEnvironments, Actions: []string{ddbGet, ddbPut, ddbScan}},
			// CAStore: GetItem, conditional PutItem/UpdateItem (serials,
			// requests, certificates, the CRL's head), DeleteItem
			// (requests, revoked certificates, old CRL parts) and Scan
			// (listing requests and certificates: the operator API).
			{Role: dynamostate.RoleCA, Actions: []string{ddbDelete, ddbGet, ddbPut, ddbScan, ddbUpdate}},
			// PresenceStore: SetPresence (PutItem), ClearPresence
			// (DeleteItem), LookupPresence (GetItem), QueryPresence
			// (Query of by-client-shard, one per shard).
			{Role: dynamostate.RolePresence, Actions: []string{ddbDelete, ddbGet, ddbPut}, Indexes: []string{dynamostate.IndexByClientShard}},
			// RunJobStore: CreateJob (PutItem, BatchWriteItem of its
			// nodes, UpdateItem), GetJob/UpdateJob (GetItem, UpdateItem),
			// ListJobNodes (Query of the table), ListJobs (Query of
			// by-created).
			{Role: dynamostate.RoleJobs, Actions: []string{ddbBatchWrite, ddbGet, ddbPut, ddbQuery, ddbUpdate}, Indexes: []string{dynamostate.IndexByCreated}},
		},
		// Enqueue (SendMessage) and the queue depth on /metrics
		// (GetQueueAttributes); the fleet never receives compile jobs.
		CompileQueues: []string{"sqs:GetQueueAttributes", "sqs:SendMessage"},
	}
	if puppetDB {
		// The query refresher: ListQueries (Query), SetQueryState
		// (conditional UpdateItem, then GetItem when it fails).
		a.Tables = append(a.Tables, TableAccess{Role: dynamostate.RoleQueries, Actions: []string{ddbGet, ddbQuery, ddbUpdate}})
	}
	return a
}

// Actions of the PuppetDB outbox and its dead-letter queue
// (sqsqueue.Outbox: Send, Receive, Ack and Retry on the outbox;
// DeadLetter sends to the dead-letter queue; Stats reads both queues'
// attributes).
var (
	OutboxActions     = []string{"sqs:ChangeMessageVisibility", "sqs:DeleteMessage", "sqs:GetQueueAttributes", "sqs:ReceiveMessage", "sqs:SendMessage"}
	DeadLetterActions = []string{"sqs:GetQueueAttributes", "sqs:SendMessage"}
)

// statements are a RoleAccess as IAM statements on the stack's resources.
func (a RoleAccess) statements(st *Storage, q *Queues) []awsiam.PolicyStatement {
	stmt := func(sid string, actions []string, resources ...*string) awsiam.PolicyStatement {
		return awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
			Sid: jsii.String(sid), Actions: jsii.Strings(actions...), Resources: &resources,
		})
	}
	prefixes := func(spaces []farm.Space) []*string {
		var out []*string
		for _, sp := range spaces {
			out = append(out, st.Bucket.ArnForObjects(jsii.String(string(sp)+"/*")))
		}
		return out
	}
	out := []awsiam.PolicyStatement{
		stmt("ContentRead", []string{"s3:GetObject"}, prefixes(a.Content.Read)...),
		stmt("ContentWrite", []string{"s3:PutObject"}, prefixes(a.Content.Write)...),
		stmt("ContentList", []string{"s3:ListBucket"}, st.Bucket.BucketArn()),
	}
	if len(a.Content.Retire) > 0 {
		out = append(out, stmt("ContentRetire", []string{"s3:PutObject", "s3:PutObjectTagging"}, prefixes(a.Content.Retire)...))
	}
	for _, t := range a.Tables {
		table := st.Table(t.Role)
		out = append(out, stmt("Table"+sidPart(t.Role), t.Actions, table.TableArn()))
		if len(t.Indexes) > 0 {
			var arns []*string
			for _, ix := range t.Indexes {
				arns = append(arns, jsii.String(*table.TableArn()+"/index/"+ix))
			}
			out = append(out, stmt("Index"+sidPart(t.Role), []string{ddbQuery}, arns...))
		}
	}
	var queues []*string
	for _, l := range q.Lanes() {
		queues = append(queues, l.Queue.QueueArn())
	}
	return append(out, stmt("CompileQueues", a.CompileQueues, queues...))
}

// sidPart is a dynamostate role as part of a statement ID (letters and
// digits only): "node-index" → "NodeIndex".
func sidPart(role string) string {
	var b strings.Builder
	for _, w := range strings.Split(role, "-") {
		if w != "" {
			b.WriteString(strings.ToUpper(w[:1]) + w[1:])
		}
	}
	return b.String()
}

// grantCompile gives the compile function's role CompileAccess and, with
// PuppetDB, secretsmanager:GetSecretValue on the operator's secrets it
// reads at init (functions/compile's puppetDBSecrets).
func grantCompile(role awsiam.IRole, st *Storage, q *Queues, pdb *PuppetDB) {
	for _, s := range CompileAccess(pdb != nil).statements(st, q) {
		role.AddToPrincipalPolicy(s)
	}
	if pdb == nil {
		return
	}
	var secrets []*string
	for _, s := range []awssecretsmanager.ISecret{pdb.Identity, pdb.CASecret} {
		if s != nil {
			secrets = append(secrets, s.SecretArn())
		}
	}
	if len(secrets) > 0 {
		role.AddToPrincipalPolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
			Sid: jsii.String("PuppetDBSecrets"), Actions: jsii.Strings("secretsmanager:GetSecretValue"), Resources: &secrets,
		}))
	}
}

// grantFleet gives the fleet's task role FleetAccess, the PCP inboxes
// (PCPInboxStatement) and, with PuppetDB, the outbox and its dead-letter
// queue (nothing else gets them).
func grantFleet(role awsiam.IRole, cfg Config, st *Storage, q *Queues, pdb *PuppetDB) {
	for _, s := range FleetAccess(pdb != nil).statements(st, q) {
		role.AddToPrincipalPolicy(s)
	}
	role.AddToPrincipalPolicy(PCPInboxStatement(st.Construct, cfg))
	if pdb == nil {
		return
	}
	role.AddToPrincipalPolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
		Sid: jsii.String("PuppetDBOutbox"), Actions: jsii.Strings(slices.Sorted(slices.Values(OutboxActions))...),
		Resources: &[]*string{pdb.Outbox.QueueArn()},
	}))
	role.AddToPrincipalPolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
		Sid: jsii.String("PuppetDBDeadLetters"), Actions: jsii.Strings(slices.Sorted(slices.Values(DeadLetterActions))...),
		Resources: &[]*string{pdb.DLQ.QueueArn()},
	}))
}

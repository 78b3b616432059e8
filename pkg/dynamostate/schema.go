package dynamostate

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// KeyAttr is a key attribute of a table or index: its name and DynamoDB
// scalar type ("S" or "N").
type KeyAttr struct {
	Name string
	Type types.ScalarAttributeType
}

// IndexSpec is a global secondary index of a table.
type IndexSpec struct {
	Name         string
	PartitionKey KeyAttr
	SortKey      *KeyAttr
	Projection   types.ProjectionType
	// NonKeyAttributes are the attributes an INCLUDE projection copies
	// besides the keys (the table's and the index's).
	NonKeyAttributes []string
}

// TableSpec is what the drivers need of a table: its keys and global
// secondary indexes. It is the one definition of the farm's tables:
// EnsureTables creates them from it for tests and development, and the CDK
// stack (infra/) declares its tables from it, so the two cannot drift.
type TableSpec struct {
	// Role names the table's purpose ("nodes"); the table's name is
	// chosen by whoever deploys it (Options, the stack's stage).
	Role         string
	PartitionKey KeyAttr
	SortKey      *KeyAttr
	Indexes      []IndexSpec
	// TTLAttribute, when set, names a numeric attribute (Unix seconds)
	// after which DynamoDB's time to live deletes the item; the stack
	// enables it. Readers never rely on it: its deletions lag by hours.
	TTLAttribute string
}

// Table roles.
const (
	RoleNodes        = "nodes"
	RoleNodeIndex    = "node-index"
	RoleEnvironments = "environments"
	RoleCA           = "ca"
	RolePresence     = "presence" // PresenceStore's records (presence.go)
	RoleJobs         = "jobs"     // RunJobStore's jobs and their nodes (runjobs.go)
	RoleQueries      = "queries"  // QueryStore's recorded PuppetDB queries (queries.go)
)

// IndexByEntry is the node-index table's global secondary index: from an
// index entry (farm.Node.IndexEntries) to the certnames under it, in order.
const IndexByEntry = "by-entry"

// IndexByClientShard is the presence table's global secondary index: from
// a PCP client type and shard (AttrClientShard) to the URIs of its
// clients in that shard, in order, with what QueryPresence reads of them
// (its task and expiry). QueryPresence reads every shard of a type.
const IndexByClientShard = "by-client-shard"

// PresenceShards is how many partitions of IndexByClientShard one client
// type's records spread over. A partition of an index takes about 1,000
// writes a second, and a write to the table that the index cannot take is
// throttled with it: one client type under one key (the index before
// this, by-client-type) capped the fleet's presence writes there, and a
// reconnect storm (a fleet restart: 20,000 PCP clients within seconds,
// each a write) passes that. 16 shards take 16,000 a second, eight times
// such a storm spread over ten seconds, while a whole-fleet query costs 16
// small Query calls a page instead of one. Changing it moves every
// record to another shard: a new index name and a migration.
const PresenceShards = 16

// OldIndexByClientType is the presence table's index before
// IndexByClientShard (client type alone, every attribute projected).
// Nothing reads it; the stack keeps it for one deploy of a stack made
// before, when asked to (CloudFormation adds or removes one index of a
// table per update, never both).
func OldIndexByClientType() IndexSpec {
	uri := KeyAttr{Name: AttrURI, Type: types.ScalarAttributeTypeS}
	return IndexSpec{Name: "by-client-type", PartitionKey: KeyAttr{Name: AttrClientType, Type: types.ScalarAttributeTypeS},
		SortKey: &uri, Projection: types.ProjectionTypeAll}
}

// IndexByCreated is the jobs table's global secondary index: every job's
// item under one partition (AttrList), by created time and id (ListJobs).
const IndexByCreated = "by-created"

// Tables returns the specs of every table the package's drivers use.
func Tables() []TableSpec {
	s := func(name string) KeyAttr { return KeyAttr{Name: name, Type: types.ScalarAttributeTypeS} }
	certname, entry := s(AttrCertname), s(AttrEntry)
	uri, item, created, query := s(AttrURI), s(AttrItem), s(AttrCreated), s(AttrQuery)
	return []TableSpec{
		{Role: RoleNodes, PartitionKey: certname},
		{
			// One item per (node, index entry), written with the node
			// when its entries change; queried through IndexByEntry.
			Role: RoleNodeIndex, PartitionKey: certname, SortKey: &entry,
			Indexes: []IndexSpec{{Name: IndexByEntry, PartitionKey: entry, SortKey: &certname, Projection: types.ProjectionTypeKeysOnly}},
		},
		{Role: RoleEnvironments, PartitionKey: s(AttrName)},
		{Role: RoleCA, PartitionKey: s(AttrKey)},
		{
			// One item per PCP client; reads skip expired items, which
			// time to live deletes eventually.
			Role: RolePresence, PartitionKey: uri, TTLAttribute: AttrExpiresAt,
			Indexes: []IndexSpec{{Name: IndexByClientShard, PartitionKey: s(AttrClientShard), SortKey: &uri,
				Projection: types.ProjectionTypeInclude, NonKeyAttributes: []string{AttrTask, AttrExpiresNS}}},
		},
		{
			// A job's item (sort key ItemJob) and one item per node of it
			// (ItemNodePrefix + certname) under the job's id; ended ones
			// expire (JobRetention, JobNodeRetention).
			Role: RoleJobs, PartitionKey: s(AttrJob), SortKey: &item, TTLAttribute: AttrExpiresAt,
			Indexes: []IndexSpec{{Name: IndexByCreated, PartitionKey: s(AttrList), SortKey: &created, Projection: types.ProjectionTypeAll}},
		},
		{
			// Every recorded query under one partition (QueriesListValue),
			// by environment and digest (ListQueries pages through it).
			Role: RoleQueries, PartitionKey: s(AttrList), SortKey: &query,
		},
	}
}

// TableSpecFor returns the spec of role; it panics for an unknown role (a
// programming error).
func TableSpecFor(role string) TableSpec {
	for _, t := range Tables() {
		if t.Role == role {
			return t
		}
	}
	panic("dynamostate: no table role " + role)
}

func keySchema(pk KeyAttr, sk *KeyAttr) []types.KeySchemaElement {
	ks := []types.KeySchemaElement{{AttributeName: aws.String(pk.Name), KeyType: types.KeyTypeHash}}
	if sk != nil {
		ks = append(ks, types.KeySchemaElement{AttributeName: aws.String(sk.Name), KeyType: types.KeyTypeRange})
	}
	return ks
}

// createTableInput is the CreateTable request of spec named table
// (on-demand billing).
func (spec TableSpec) createTableInput(table string) *dynamodb.CreateTableInput {
	attrs := map[string]types.ScalarAttributeType{}
	add := func(k *KeyAttr) {
		if k != nil {
			attrs[k.Name] = k.Type
		}
	}
	add(&spec.PartitionKey)
	add(spec.SortKey)
	in := &dynamodb.CreateTableInput{
		TableName:   aws.String(table),
		BillingMode: types.BillingModePayPerRequest,
		KeySchema:   keySchema(spec.PartitionKey, spec.SortKey),
	}
	for _, ix := range spec.Indexes {
		add(&ix.PartitionKey)
		add(ix.SortKey)
		in.GlobalSecondaryIndexes = append(in.GlobalSecondaryIndexes, types.GlobalSecondaryIndex{
			IndexName:  aws.String(ix.Name),
			KeySchema:  keySchema(ix.PartitionKey, ix.SortKey),
			Projection: &types.Projection{ProjectionType: ix.Projection, NonKeyAttributes: ix.NonKeyAttributes},
		})
	}
	for name, typ := range attrs {
		in.AttributeDefinitions = append(in.AttributeDefinitions, types.AttributeDefinition{AttributeName: aws.String(name), AttributeType: typ})
	}
	return in
}

// ensureTable creates table from spec unless it exists, and waits until it
// is active.
func ensureTable(ctx context.Context, client *dynamodb.Client, table string, spec TableSpec) error {
	_, err := client.CreateTable(ctx, spec.createTableInput(table))
	var inUse *types.ResourceInUseException
	if err != nil && !errors.As(err, &inUse) {
		return fmt.Errorf("create dynamodb table %s: %w", table, translate(err, table))
	}
	w := dynamodb.NewTableExistsWaiter(client, func(o *dynamodb.TableExistsWaiterOptions) {
		o.MinDelay, o.MaxDelay = 100*time.Millisecond, 2*time.Second
	})
	if err := w.Wait(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(table)}, 5*time.Minute); err != nil {
		return fmt.Errorf("wait for dynamodb table %s: %w", table, translate(err, table))
	}
	return nil
}

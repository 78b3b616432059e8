package farm

import (
	"context"
	"errors"
	"math/big"
	"strings"
	"testing"
	"time"
)

// checkCase is one call of a contract method's check: err is what the
// check returned, want the error it must wrap (nil: it must pass) and text
// the message it must give, when the words matter.
type checkCase struct {
	name string
	err  error
	want error
	text string
}

func runChecks(t *testing.T, cases []checkCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			switch {
			case c.want == nil && c.err != nil:
				t.Fatalf("got %v, want no error", c.err)
			case c.want != nil && !errors.Is(c.err, c.want):
				t.Fatalf("got %v, want an error wrapping %v", c.err, c.want)
			case c.text != "" && c.err.Error() != c.text:
				t.Fatalf("got %q, want %q", c.err, c.text)
			}
		})
	}
}

// ended returns a context that has been cancelled.
func ended() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

func TestQueueChecks(t *testing.T) {
	ctx := context.Background()
	job := Job{Certname: "web01.example.com", Lane: LaneUrgent}
	d := Delivery{Job: job, ID: "receipt-1", Attempts: 1}
	noID, badLane := d, d
	noID.ID = ""
	badLane.Lane = "whenever"
	runChecks(t, []checkCase{
		{"enqueue", CheckEnqueue(ctx, job), nil, ""},
		{"enqueue, ended", CheckEnqueue(ended(), job), context.Canceled, "enqueue job of web01.example.com: context canceled"},
		{"enqueue, bad certname", CheckEnqueue(ctx, Job{Certname: "Web01", Lane: LaneBulk}), ErrInvalid, ""},
		{"enqueue, no lane", CheckEnqueue(ctx, Job{Certname: "web01"}), ErrInvalid, `enqueue job: lane "" is not "urgent" or "bulk": invalid`},
		{"receive", CheckQueueReceive(ctx), nil, ""},
		{"receive, ended", CheckQueueReceive(ended()), context.Canceled, "receive job: context canceled"},
		{"ack", CheckAck(ctx, d), nil, ""},
		{"ack, ended", CheckAck(ended(), d), context.Canceled, ""},
		{"ack, no ID", CheckAck(ctx, noID), ErrInvalid, "ack job of web01.example.com: the delivery has no ID: invalid"},
		{"ack, bad lane", CheckAck(ctx, badLane), ErrInvalid, ""},
		{"retry", CheckRetry(ctx, d, time.Minute), nil, ""},
		{"retry, negative delay", CheckRetry(ctx, d, -time.Minute), nil, ""},
		{"retry, ended", CheckRetry(ended(), d, 0), context.Canceled, ""},
		{"retry, no ID", CheckRetry(ctx, noID, 0), ErrInvalid, ""},
		{"retry, bad lane", CheckRetry(ctx, badLane, 0), ErrInvalid, `retry job of web01.example.com: the delivery's lane "whenever" is not "urgent" or "bulk": invalid`},
		{"stats", CheckQueueStats(ctx), nil, ""},
		{"stats, ended", CheckQueueStats(ended()), context.Canceled, "queue stats: context canceled"},
	})
}

func TestContentAndNameChecks(t *testing.T) {
	ctx := context.Background()
	d := DigestOf([]byte("x"))
	runChecks(t, []checkCase{
		{"put", CheckContentPut(ctx, SpaceContent), nil, ""},
		{"put, ended", CheckContentPut(ended(), SpaceContent), context.Canceled, "put content in content: context canceled"},
		{"put, bad space", CheckContentPut(ctx, "../x"), ErrInvalid, `put content: content space "../x" must be lowercase letters, digits, '-' or '_': invalid`},
		{"get", CheckContentGet(ctx, SpaceCatalogs, d), nil, ""},
		{"get, ended", CheckContentGet(ended(), SpaceCatalogs, d), context.Canceled, "get content catalogs/" + string(d) + ": context canceled"},
		{"get, bad space", CheckContentGet(ctx, "", d), ErrInvalid, ""},
		{"get, bad digest", CheckContentGet(ctx, SpaceCatalogs, "../etc/passwd"), ErrInvalid, `get content: digest "../etc/passwd" is not a lowercase hex sha256: invalid`},
		{"has", CheckContentHas(ctx, SpaceFacts, d), nil, ""},
		{"has, ended", CheckContentHas(ended(), SpaceFacts, d), context.Canceled, ""},
		{"has, bad digest", CheckContentHas(ctx, SpaceFacts, Digest(strings.ToUpper(string(d)))), ErrInvalid, ""},
		{"put name", CheckPutName(ctx, SpaceFilebucket, "md5/ab", d), nil, ""},
		{"put name, ended", CheckPutName(ended(), SpaceFilebucket, "md5/ab", d), context.Canceled, "put name filebucket/md5/ab: context canceled"},
		{"put name, bad space", CheckPutName(ctx, "Bad", "md5/ab", d), ErrInvalid, ""},
		{"put name, bad name", CheckPutName(ctx, SpaceFilebucket, "a/../b", d), ErrInvalid, ""},
		{"put name, bad digest", CheckPutName(ctx, SpaceFilebucket, "md5/ab", "abc"), ErrInvalid, ""},
		{"get name", CheckGetName(ctx, SpaceFilebucket, "md5/ab"), nil, ""},
		{"get name, ended", CheckGetName(ended(), SpaceFilebucket, "md5/ab"), context.Canceled, ""},
		{"get name, bad name", CheckGetName(ctx, SpaceFilebucket, "/abs"), ErrInvalid, ""},
		{"get name, bad space", CheckGetName(ctx, "", "md5/ab"), ErrInvalid, ""},
	})
}

func TestNodeAndEnvironmentChecks(t *testing.T) {
	ctx := context.Background()
	sum := ReportSummary{Status: "changed", At: time.Unix(1700000000, 0)}
	renamed := Node{Certname: "other.example.com"}
	same := Node{Certname: "web01.example.com"}
	runChecks(t, []checkCase{
		{"get node", CheckGetNode(ctx, "web01.example.com"), nil, ""},
		{"get node, ended", CheckGetNode(ended(), "web01.example.com"), context.Canceled, "get node web01.example.com: context canceled"},
		{"get node, bad certname", CheckGetNode(ctx, "../etc"), ErrInvalid, `get node: certname "../etc" must be lowercase letters, digits, '.', '-' or '_' (at most 255): invalid`},
		{"query nodes", CheckQueryNodes(ctx, NodeQuery{Environment: "production"}), nil, ""},
		{"query nodes, ended", CheckQueryNodes(ended(), NodeQuery{Environment: "production"}), context.Canceled, "query nodes: context canceled"},
		{"query nodes, no environment", CheckQueryNodes(ctx, NodeQuery{}), ErrInvalid, ""},
		{"query nodes, limit", CheckQueryNodes(ctx, NodeQuery{Environment: "production", Limit: MaxNodePage + 1}), ErrInvalid, ""},
		{"update node", CheckUpdateNode(ctx, "web01.example.com"), nil, ""},
		{"update node, ended", CheckUpdateNode(ended(), "web01.example.com"), context.Canceled, "update node web01.example.com: context canceled"},
		{"update node, bad certname", CheckUpdateNode(ctx, "Web01"), ErrInvalid, ""},
		{"updated node", CheckUpdatedNode("web01.example.com", &same), nil, ""},
		{"updated node, renamed", CheckUpdatedNode("web01.example.com", &renamed), ErrInvalid, `update node web01.example.com: fn renamed it to "other.example.com": invalid`},
		{"record report", CheckRecordReport(ctx, "web01.example.com", sum), nil, ""},
		{"record report, ended", CheckRecordReport(ended(), "web01.example.com", sum), context.Canceled, "record report of web01.example.com: context canceled"},
		{"record report, bad certname", CheckRecordReport(ctx, "", sum), ErrInvalid, ""},
		{"record report, no time", CheckRecordReport(ctx, "web01.example.com", ReportSummary{Status: "changed"}), ErrInvalid, "record report of web01.example.com: report summary without a time: invalid"},
		{"get environment", CheckGetEnvironment(ctx, "production"), nil, ""},
		{"get environment, ended", CheckGetEnvironment(ended(), "production"), context.Canceled, "get environment production: context canceled"},
		{"get environment, bad name", CheckGetEnvironment(ctx, "a-b"), ErrInvalid, `get environment: environment "a-b" must be lowercase letters, digits and '_': invalid`},
		{"list environments", CheckListEnvironments(ctx), nil, ""},
		{"list environments, ended", CheckListEnvironments(ended()), context.Canceled, "list environments: context canceled"},
		{"put environment", CheckPutEnvironment(ctx, &Environment{Name: "production"}), nil, ""},
		{"put environment, ended", CheckPutEnvironment(ended(), &Environment{Name: "production"}), context.Canceled, ""},
		{"put environment, bad name", CheckPutEnvironment(ctx, &Environment{Name: "Production"}), ErrInvalid, ""},
	})
}

func TestPresenceAndInboxChecks(t *testing.T) {
	ctx := context.Background()
	p := Presence{URI: "pcp://web01.example.com/agent", Task: "task-a", Expires: time.Unix(1700000000, 0)}
	runChecks(t, []checkCase{
		{"set", CheckSetPresence(ctx, &p), nil, ""},
		{"set, ended", CheckSetPresence(ended(), &p), context.Canceled, "set presence of pcp://web01.example.com/agent: context canceled"},
		{"set, no task", CheckSetPresence(ctx, &Presence{URI: p.URI, Expires: p.Expires}), ErrInvalid, ""},
		{"set, bad URI", CheckSetPresence(ctx, &Presence{URI: "pcp://*/agent", Task: "t", Expires: p.Expires}), ErrInvalid, ""},
		{"clear", CheckClearPresence(ctx, p.URI, "task-a"), nil, ""},
		{"clear, ended", CheckClearPresence(ended(), p.URI, "task-a"), context.Canceled, ""},
		{"clear, bad URI", CheckClearPresence(ctx, "agent", "task-a"), ErrInvalid, `clear presence: PCP URI "agent" is not pcp://<common name>/<client type>: invalid`},
		{"clear, no task", CheckClearPresence(ctx, p.URI, ""), ErrInvalid, ""},
		{"look up", CheckLookupPresence(ctx, p.URI), nil, ""},
		{"look up, ended", CheckLookupPresence(ended(), p.URI), context.Canceled, "look up presence of pcp://web01.example.com/agent: context canceled"},
		{"look up, bad URI", CheckLookupPresence(ctx, ""), ErrInvalid, ""},
		{"query", CheckQueryPresence(ctx, PresenceQuery{ClientType: "agent"}), nil, ""},
		{"query, ended", CheckQueryPresence(ended(), PresenceQuery{ClientType: "agent"}), context.Canceled, "query presence of agent: context canceled"},
		{"query, no client type", CheckQueryPresence(ctx, PresenceQuery{}), ErrInvalid, "query presence: presence query: no client type: invalid"},
		{"open", CheckInboxOpen(ctx, "task-a"), nil, ""},
		{"open, ended", CheckInboxOpen(ended(), "task-a"), context.Canceled, "open inbox task-a: context canceled"},
		{"open, no task", CheckInboxOpen(ctx, ""), ErrInvalid, `open inbox: task name "" must be 1-256 bytes: invalid`},
		{"post", CheckInboxPost(ctx, "task-a", []byte("m")), nil, ""},
		{"post, ended", CheckInboxPost(ended(), "task-a", []byte("m")), context.Canceled, ""},
		{"post, empty", CheckInboxPost(ctx, "task-a", nil), ErrInvalid, "post to inbox task-a: inbox message of 0 bytes: must be 1-196608: invalid"},
		{"post, too large", CheckInboxPost(ctx, "task-a", make([]byte, MaxInboxMessage+1)), ErrInvalid, ""},
		{"receive", CheckInboxReceive(ctx, "task-a"), nil, ""},
		{"receive, ended", CheckInboxReceive(ended(), "task-a"), context.Canceled, "receive from inbox task-a: context canceled"},
		{"receive, long task", CheckInboxReceive(ctx, string(make([]byte, 257))), ErrInvalid, ""},
		{"close", CheckInboxClose(ctx, "task-a"), nil, ""},
		{"close, ended", CheckInboxClose(ended(), "task-a"), context.Canceled, ""},
		{"close, no task", CheckInboxClose(ctx, ""), ErrInvalid, ""},
	})
}

func TestRunJobChecks(t *testing.T) {
	ctx := context.Background()
	created := time.Unix(1700000000, 5)
	job := RunJob{ID: "job-1", Created: created}
	moved := RunJob{ID: "job-2", Created: created}
	redated := RunJob{ID: "job-1", Created: created.Add(time.Second)}
	node := RunJobNode{Job: "job-1", Node: "web01.example.com"}
	otherNode := RunJobNode{Job: "job-1", Node: "web02.example.com"}
	runChecks(t, []checkCase{
		{"create", CheckCreateJob(ctx, &job, []string{"a.example.com", "b.example.com"}), nil, ""},
		{"create, ended", CheckCreateJob(ended(), &job, nil), context.Canceled, "create job job-1: context canceled"},
		{"create, no created time", CheckCreateJob(ctx, &RunJob{ID: "job-1"}, nil), ErrInvalid, ""},
		{"create, repeated node", CheckCreateJob(ctx, &job, []string{"a.example.com", "a.example.com"}), ErrInvalid, ""},
		{"get", CheckGetJob(ctx, "job-1"), nil, ""},
		{"get, bad id", CheckGetJob(ctx, "../x"), ErrInvalid, ""},
		{"update", CheckUpdateJob(ended(), "job-1"), context.Canceled, "update job job-1: context canceled"},
		{"updated", CheckUpdatedJob("job-1", created, &job), nil, ""},
		{"updated, id changed", CheckUpdatedJob("job-1", created, &moved), ErrInvalid, "update job job-1: fn changed its id or created time: invalid"},
		{"updated, created changed", CheckUpdatedJob("job-1", created, &redated), ErrInvalid, ""},
		{"update node, bad node", CheckUpdateJobNode(ctx, "job-1", "Web01"), ErrInvalid, ""},
		{"updated node", CheckUpdatedJobNode("job-1", "web01.example.com", &node), nil, ""},
		{"updated node, moved", CheckUpdatedJobNode("job-1", "web01.example.com", &otherNode), ErrInvalid, "update node web01.example.com of job job-1: fn changed its job or node: invalid"},
		{"list jobs, limit", CheckListJobs(ctx, RunJobQuery{Limit: -1}), ErrInvalid, ""},
		{"list job nodes, no job", CheckListJobNodes(ctx, RunJobNodeQuery{}), ErrInvalid, ""},
		{"list job nodes, ended", CheckListJobNodes(ended(), RunJobNodeQuery{Job: "job-1"}), context.Canceled, ""},
	})
}

func TestCAStoreChecks(t *testing.T) {
	ctx := context.Background()
	pem := []byte("-----BEGIN CERTIFICATE-----\n...")
	one, two := big.NewInt(1), big.NewInt(2)
	issued := CertIssued{Certname: "Puppet CA: test", Serial: one}
	genesis := CAGenesis{CertPEM: pem, CRLPEM: pem, NextSerial: two, Issued: issued}
	noNext := genesis
	noNext.NextSerial = nil
	noCRL := genesis
	noCRL.CRLPEM = nil
	runChecks(t, []checkCase{
		{"lock", CheckCALock(ctx), nil, ""},
		{"lock, ended", CheckCALock(ended()), context.Canceled, "lock CA store: context canceled"},
		{"CA cert, ended", CheckCACert(ended()), context.Canceled, ""},
		{"check, ended", CheckCACheck(ended()), context.Canceled, ""},
		{"create", CheckCACreate(ctx, &genesis), nil, ""},
		{"create, ended", CheckCACreate(ended(), &genesis), context.Canceled, ""},
		{"create, no next serial", CheckCACreate(ctx, &noNext), ErrInvalid, "create CA: next serial <nil> is not a positive number: invalid"},
		{"create, no CRL", CheckCACreate(ctx, &noCRL), ErrInvalid, ""},
		{"next serial, ended", CheckCANextSerial(ended()), context.Canceled, ""},
		{"record issued", CheckCARecordIssued(ctx, &issued), nil, ""},
		{"record issued, no serial", CheckCARecordIssued(ctx, &CertIssued{Certname: "a"}), ErrInvalid, ""},
		{"record issued, no certname", CheckCARecordIssued(ctx, &CertIssued{Serial: one}), ErrInvalid, "record issued certificate: no certname: invalid"},
		{"CRL, ended", CheckCACRL(ended()), context.Canceled, "read CRL: context canceled"},
		{"put CRL", CheckCAPutCRL(ctx, pem, one, big.NewInt(0)), nil, ""},
		{"put CRL, ended", CheckCAPutCRL(ended(), pem, one, big.NewInt(0)), context.Canceled, ""},
		{"put CRL, no CRL", CheckCAPutCRL(ctx, nil, one, big.NewInt(0)), ErrInvalid, ""},
		{"put CRL, no prev", CheckCAPutCRL(ctx, pem, one, nil), ErrInvalid, ""},
		{"put CRL, not above prev", CheckCAPutCRL(ctx, pem, one, one), ErrInvalid, "replace CRL number 1 with number 1: CRL numbers must grow from 0: invalid"},
		{"request", CheckCARequest(ctx, "a.example.com"), nil, ""},
		{"request, path", CheckCARequest(ctx, "../a"), ErrInvalid, ""},
		{"put request", CheckCAPutRequest(ctx, "a.example.com", pem), nil, ""},
		{"put request, no PEM", CheckCAPutRequest(ctx, "a.example.com", nil), ErrInvalid, "store certificate request of a.example.com: no PEM: invalid"},
		{"put request, ended", CheckCAPutRequest(ended(), "a.example.com", pem), context.Canceled, "store certificate request of a.example.com: context canceled"},
		{"delete request, bad certname", CheckCADeleteRequest(ctx, "A"), ErrInvalid, ""},
		{"requests, ended", CheckCARequests(ended()), context.Canceled, ""},
		{"signed", CheckCASigned(ctx, "a.example.com"), nil, ""},
		{"signed, empty", CheckCASigned(ctx, ""), ErrInvalid, ""},
		{"put signed", CheckCAPutSigned(ctx, "a.example.com", pem, nil), nil, ""},
		{"put signed, replacing", CheckCAPutSigned(ctx, "a.example.com", pem, two), nil, ""},
		{"put signed, replacing 0", CheckCAPutSigned(ctx, "a.example.com", pem, big.NewInt(0)), ErrInvalid, ""},
		{"put signed, no PEM", CheckCAPutSigned(ctx, "a.example.com", []byte{}, nil), ErrInvalid, ""},
		{"delete signed", CheckCADeleteSigned(ctx, "a.example.com", two), nil, ""},
		{"delete signed, no serial", CheckCADeleteSigned(ctx, "a.example.com", nil), ErrInvalid, ""},
		{"signed certs, ended", CheckCASignedCerts(ended()), context.Canceled, ""},
		{"put server cert", CheckCAPutServerCert(ctx, "door.example.com", pem), nil, ""},
		{"put server cert, bad certname", CheckCAPutServerCert(ctx, "door/1", pem), ErrInvalid, ""},
		{"server certs, any name", CheckCAServerCerts(ctx, "*.Example.COM"), nil, ""},
		{"server certs, ended", CheckCAServerCerts(ended(), ""), context.Canceled, ""},
	})
}

// source is a CAKeySource's name in messages.
type source string

func (s source) String() string { return string(s) }

func TestCAKeySourceChecks(t *testing.T) {
	ctx := context.Background()
	src := source("file /tmp/ca_key.pem")
	runChecks(t, []checkCase{
		{"signer", CheckSigner(ctx, src), nil, ""},
		{"signer, ended", CheckSigner(ended(), src), context.Canceled, "read CA key from file /tmp/ca_key.pem: context canceled"},
		{"generate", CheckGenerateKey(ctx, src, 4096), nil, ""},
		{"generate, least", CheckGenerateKey(ctx, src, MinCAKeyBits), nil, ""},
		{"generate, largest", CheckGenerateKey(ctx, src, MaxCAKeyBits), nil, ""},
		{"generate, ended", CheckGenerateKey(ended(), src, 4096), context.Canceled, "generate CA key in file /tmp/ca_key.pem: context canceled"},
		{"generate, too small", CheckGenerateKey(ctx, src, 1024), ErrInvalid, "generate CA key in file /tmp/ca_key.pem: an RSA key of 1024 bits: must be 2048-16384: invalid"},
		{"generate, too large", CheckGenerateKey(ctx, src, MaxCAKeyBits+1), ErrInvalid, ""},
		{"import", CheckImportKey(ctx, src, []byte("key")), nil, ""},
		{"import, largest", CheckImportKey(ctx, src, make([]byte, MaxCAKey)), nil, ""},
		{"import, ended", CheckImportKey(ended(), src, []byte("key")), context.Canceled, "import CA key into file /tmp/ca_key.pem: context canceled"},
		{"import, empty", CheckImportKey(ctx, src, nil), ErrInvalid, "import CA key into file /tmp/ca_key.pem: a key of 0 bytes: must be 1-65536: invalid"},
		{"import, too large", CheckImportKey(ctx, src, make([]byte, MaxCAKey+1)), ErrInvalid, ""},
	})
}

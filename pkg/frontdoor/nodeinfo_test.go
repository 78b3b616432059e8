package frontdoor

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/compilefarm/compilefarm/pkg/classifier"
	"github.com/compilefarm/compilefarm/pkg/farm"
	"github.com/compilefarm/compilefarm/pkg/intake"
)

// stubClassifier answers from a table; a node missing from it fails as a
// classifier that exits non-zero.
type stubClassifier struct {
	mu      sync.Mutex
	answers map[string]classifier.Classification
}

func (c *stubClassifier) Classify(ctx context.Context, certname string) (classifier.Classification, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if a, ok := c.answers[certname]; ok {
		return a, nil
	}
	return classifier.Classification{}, classifierError(fmt.Sprintf("Failed to find %s via exec: Execution of '/usr/local/bin/enc %s' returned 2: CMDB unreachable",
		certname, certname))
}

// classifierError is a failed classification as classifier.Exec returns
// it: Puppet's message, matching classifier.ErrFailed.
type classifierError string

func (e classifierError) Error() string        { return string(e) }
func (e classifierError) Is(target error) bool { return target == classifier.ErrFailed }

// enrolWithExtensions gives the rig a client certificate for certname whose
// CSR asks for extensions (csr_attributes.yaml's extension_requests).
func (r *rig) enrolWithExtensions(certname string, exts map[string]string) {
	r.t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		r.t.Fatal(err)
	}
	var extra []pkix.Extension
	for oid, v := range exts {
		var id asn1.ObjectIdentifier
		for _, p := range strings.Split(oid, ".") {
			var n int
			fmt.Sscan(p, &n)
			id = append(id, n)
		}
		val, _ := asn1.Marshal(asn1.RawValue{Class: asn1.ClassUniversal, Tag: asn1.TagUTF8String, Bytes: []byte(v)})
		extra = append(extra, pkix.Extension{Id: id, Value: val})
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: certname}, ExtraExtensions: extra}, key)
	if err != nil {
		r.t.Fatal(err)
	}
	ctx := context.Background()
	if err := r.ca.SubmitCSR(ctx, certname, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})); err != nil {
		r.t.Fatal(err)
	}
	certPEM, err := r.ca.Certificate(ctx, certname)
	if err != nil {
		r.t.Fatal(err)
	}
	kder, _ := x509.MarshalECPrivateKey(key)
	c, err := tls.X509KeyPair(certPEM, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}))
	if err != nil {
		r.t.Fatal(err)
	}
	r.certs[certname] = c
}

// storedNodeInfo reads the node information the intake stored for a node.
func (r *rig) storedNodeInfo(certname string) map[string]any {
	r.t.Helper()
	ctx := context.Background()
	n, err := r.store.GetNode(ctx, certname)
	if err != nil {
		r.t.Fatal(err)
	}
	b, err := r.store.Get(ctx, farm.SpaceNodeInfo, n.NodeInfo)
	if err != nil {
		r.t.Fatalf("node information %q of %s: %v", n.NodeInfo, certname, err)
	}
	var out map[string]any
	json.Unmarshal(b, &out)
	return out
}

// TestCatalogRequestCarriesTrustedExtensions: the extensions of the
// certificate the agent presents reach the node's compile input, named as
// Puppet names them.
func TestCatalogRequestCarriesTrustedExtensions(t *testing.T) {
	r := newRig(t)
	name := "web1.example.test"
	r.enrolWithExtensions(name, map[string]string{"1.3.6.1.4.1.34380.1.1.13": "web", "1.3.6.1.4.1.34380.1.2.1": "custom"})
	resp := r.do(r.client(name), "POST", "/puppet/v3/catalog/"+name+"?environment=production", catalogForm(name, "web"), agentHeaders)
	if resp.status != 503 { // nothing compiles in this rig: the first request waits, then 503
		t.Fatalf("catalog request: %d %s", resp.status, resp.body)
	}
	got := r.storedNodeInfo(name)["trusted_extensions"]
	want := map[string]any{"pp_role": "web", "1.3.6.1.4.1.34380.1.2.1": "custom"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("stored trusted extensions %v, want %v", got, want)
	}
}

// TestNodeEndpointWithClassifier: with a classifier, the node object
// carries its environment (winning over the agent's), classes and
// parameters (winning over facts); a failing classifier is Puppet Server's
// 500 with the classifier's error, on the node and the catalog endpoints.
func TestNodeEndpointWithClassifier(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	prod, _ := r.store.GetEnvironment(ctx, "production")
	if err := r.store.PutEnvironment(ctx, farm.Environment{Name: "staging", CodeID: prod.CodeID}); err != nil {
		t.Fatal(err)
	}
	enc := &stubClassifier{answers: map[string]classifier.Classification{
		"agent1.example.test": {Classes: []string{"role::web"}, Parameters: map[string]any{"cf_role": "from the classifier", "tier": "gold"},
			Environment: "staging"},
	}}
	r.fd.Classifier = enc
	r.fd.Intake.(*intake.Intake).Classifier = enc
	a1 := r.client("agent1.example.test")

	// The agent's first run: it sends facts with its catalog request in
	// production; the classifier puts it in staging.
	resp := r.do(a1, "POST", "/puppet/v3/catalog/agent1.example.test?environment=production", catalogForm("agent1.example.test", "web"), agentHeaders)
	if resp.status != 503 {
		t.Fatalf("catalog request: %d %s", resp.status, resp.body)
	}
	n, _ := r.store.GetNode(ctx, "agent1.example.test")
	if n.Environment != "staging" || n.Requested == nil || n.Requested.Environment != "staging" {
		t.Fatalf("node after check-in: environment %q, request %+v; want staging", n.Environment, n.Requested)
	}
	info := r.storedNodeInfo("agent1.example.test")
	if !reflect.DeepEqual(info["classes"], []any{"role::web"}) || info["parameters"].(map[string]any)["tier"] != "gold" {
		t.Errorf("stored classification %v", info)
	}

	resp = r.do(a1, "GET", "/puppet/v3/node/agent1.example.test?environment=production", nil, nil)
	var node struct {
		Name        string         `json:"name"`
		Environment string         `json:"environment"`
		Classes     []string       `json:"classes"`
		Parameters  map[string]any `json:"parameters"`
	}
	if resp.status != 200 || json.Unmarshal([]byte(resp.body), &node) != nil {
		t.Fatalf("node request: %d %s", resp.status, resp.body)
	}
	if node.Environment != "staging" || !reflect.DeepEqual(node.Classes, []string{"role::web"}) ||
		node.Parameters["cf_role"] != "from the classifier" || node.Parameters["tier"] != "gold" {
		t.Errorf("node object %+v: want the classifier's environment, classes, and parameters over facts", node)
	}

	// The classifier fails: Puppet Server's 500 with its error, and the
	// node keeps what it had.
	enc.mu.Lock()
	delete(enc.answers, "agent1.example.test")
	enc.mu.Unlock()
	resp = r.do(a1, "GET", "/puppet/v3/node/agent1.example.test", nil, nil)
	if resp.status != 500 || !strings.Contains(resp.body, `"message":"Server Error: Failed to find agent1.example.test via exec: Execution of '/usr/local/bin/enc agent1.example.test' returned 2: CMDB unreachable","issue_kind":"RUNTIME_ERROR"`) {
		t.Errorf("node request with a failing classifier: %d %s", resp.status, resp.body)
	}
	resp = r.do(a1, "POST", "/puppet/v3/catalog/agent1.example.test?environment=staging", catalogForm("agent1.example.test", "db"), agentHeaders)
	if resp.status != 500 || !strings.Contains(resp.body, `"message":"Server Error: Failed when searching for node agent1.example.test: Failed to find agent1.example.test via exec`) ||
		!strings.Contains(resp.body, "CMDB unreachable") {
		t.Errorf("catalog request with a failing classifier: %d %s", resp.status, resp.body)
	}
	after, _ := r.store.GetNode(ctx, "agent1.example.test")
	if after.ClassifierFailure == nil || after.FactsDigest != n.FactsDigest || after.RequestSeq != n.RequestSeq {
		t.Errorf("node after a failed classification: failure %+v, facts %s (was %s), seq %d (was %d)",
			after.ClassifierFailure, after.FactsDigest, n.FactsDigest, after.RequestSeq, n.RequestSeq)
	}
}

package e2e

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"
)

// SyntheticNode is a node that talks to the farm from Go (for load and
// bad-input tests): its own key and a certificate signed by the farm's CA.
type SyntheticNode struct {
	Certname string
	Client   *http.Client
}

// Enrol makes a key and CSR for certname, submits it (the farm autosigns),
// and fetches the certificate. Call it from the test's goroutine; other
// goroutines use TryEnrol.
func Enrol(t *testing.T, f *Farm, certname string) *SyntheticNode {
	t.Helper()
	n, err := TryEnrol(f, certname)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TryEnrol is Enrol returning its error, for use from any goroutine.
func TryEnrol(f *Farm, certname string) (*SyntheticNode, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	csrDER, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: certname}}, key)
	if err != nil {
		return nil, err
	}
	insecure := &http.Client{Timeout: time.Minute, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	base := "https://" + f.Addr
	req, _ := http.NewRequest(http.MethodPut, base+"/puppet-ca/v1/certificate_request/"+certname,
		bytes.NewReader(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: csrDER})))
	req.Header.Set("Content-Type", "text/plain")
	resp, err := insecure.Do(req)
	if err != nil {
		return nil, fmt.Errorf("submit CSR for %s: %w", certname, err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("submit CSR for %s: %s: %s", certname, resp.Status, body)
	}
	get := func(path string) ([]byte, error) {
		resp, err := insecure.Get(base + path)
		if err != nil {
			return nil, fmt.Errorf("GET %s: %w", path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("GET %s: %s: %s", path, resp.Status, b)
		}
		return b, nil
	}
	certPEM, err := get("/puppet-ca/v1/certificate/" + certname)
	if err != nil {
		return nil, err
	}
	caPEM, err := get("/puppet-ca/v1/certificate/ca")
	if err != nil {
		return nil, err
	}
	keyDER, _ := x509.MarshalECPrivateKey(key)
	cert, err := tls.X509KeyPair(certPEM, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}))
	if err != nil {
		return nil, fmt.Errorf("certificate for %s: %w", certname, err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	return &SyntheticNode{Certname: certname, Client: &http.Client{Timeout: 2 * time.Minute, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool, ServerName: "localhost"},
	}}}, nil
}

// PutFacts uploads a facts document for the node (from the test's
// goroutine; others use TryPutFacts).
func (n *SyntheticNode) PutFacts(t *testing.T, f *Farm, values map[string]any) {
	t.Helper()
	if err := n.TryPutFacts(f, values); err != nil {
		t.Fatal(err)
	}
}

// TryPutFacts is PutFacts returning its error, for use from any goroutine.
func (n *SyntheticNode) TryPutFacts(f *Farm, values map[string]any) error {
	doc, _ := json.Marshal(map[string]any{"name": n.Certname, "values": values})
	req, _ := http.NewRequest(http.MethodPut, "https://"+f.Addr+"/puppet/v3/facts/"+n.Certname+"?environment=production", bytes.NewReader(doc))
	req.Header.Set("Content-Type", "application/json")
	resp, err := n.Client.Do(req)
	if err != nil {
		return fmt.Errorf("put facts for %s: %w", n.Certname, err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("put facts for %s: %s: %s", n.Certname, resp.Status, b)
	}
	return nil
}

// EnrolFleet enrols count synthetic nodes named by nameFormat (given the
// node's index).
func EnrolFleet(t *testing.T, f *Farm, nameFormat string, count int) []*SyntheticNode {
	t.Helper()
	nodes := make([]*SyntheticNode, count)
	for i := range nodes {
		nodes[i] = Enrol(t, f, fmt.Sprintf(nameFormat, i))
	}
	return nodes
}

// PutFleetFacts uploads SyntheticFacts for every node (node i gets index
// i), at most parallel at once (0: all at once), and waits for all.
func PutFleetFacts(t *testing.T, f *Farm, nodes []*SyntheticNode, parallel int) {
	t.Helper()
	if parallel <= 0 {
		parallel = len(nodes)
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, parallel)
	for i, n := range nodes {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := n.TryPutFacts(f, SyntheticFacts(n.Certname, i)); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
}

// SyntheticFacts are the facts the example environment reads, for a node
// that is not a real agent.
func SyntheticFacts(certname string, i int) map[string]any {
	return map[string]any{
		"cf_root":    "/tmp/compilefarm-synthetic",
		"networking": map[string]any{"fqdn": certname, "hostname": certname},
		"os":         map[string]any{"name": "Debian", "family": "Debian", "release": map[string]any{"full": "12.11", "major": "12"}},
		"index":      i,
	}
}

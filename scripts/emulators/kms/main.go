// Command local-kms serves the AWS KMS API of local-kms
// (github.com/nsmithuk/local-kms, MIT) on a loopback address, for the tests
// of pkg/kmskey: scripts/emulators/kms.sh builds it into
// .tools/local-kms/local-kms and internal/emulator.StartKMS runs it as
//
//	local-kms -listen 127.0.0.1:PORT -data DIR
//
// It is local-kms's own request handler with three changes of how it runs,
// none of what it answers:
//   - it listens only where -listen says, and only on a loopback address
//     (local-kms's main listens on every interface);
//   - it handles one request at a time, so that each KMS operation is atomic
//     as on AWS (local-kms's CreateAlias checks for the alias, then writes
//     it: two concurrent CreateAlias calls could both succeed);
//   - it runs in Go's FIPS 140-3 mode (the go:debug line below), in which
//     an RSASSA-PSS signature's salt is as long as the digest, as AWS KMS's
//     FIPS-validated HSMs make it (local-kms asks Go for the default salt,
//     which outside FIPS mode is the longest that fits, a signature that
//     Go's crypto/x509 refuses for a certificate).
//
// No seed file is read; keys live in leveldb under -data.
//
//go:debug fips140=on
package main

import (
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"

	"github.com/nsmithuk/local-kms/src"
	"github.com/nsmithuk/local-kms/src/config"
	"github.com/nsmithuk/local-kms/src/data"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "loopback `address` to serve the KMS API on")
	dir := flag.String("data", "", "`directory` the keys are kept in (required)")
	region := flag.String("region", "us-east-1", "AWS `region` in the keys' ARNs")
	account := flag.String("account", "111122223333", "AWS `account` ID in the keys' ARNs")
	flag.Parse()
	if *dir == "" || flag.NArg() > 0 {
		flag.Usage()
		os.Exit(2)
	}
	ln, err := listenLoopback(*listen)
	if err != nil {
		log.Fatal(err)
	}
	abs, err := filepath.Abs(*dir)
	if err != nil {
		log.Fatal(err)
	}
	config.AWSRegion, config.AWSAccountId, config.DatabasePath = *region, *account, abs
	db := data.NewDatabase(abs)
	defer db.Close()

	var one sync.Mutex
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		one.Lock()
		defer one.Unlock()
		src.HandleRequest(w, r, db)
	})
	fmt.Printf("local-kms: serving the KMS API on %s, keys in %s\n", ln.Addr(), abs)
	log.Fatal(http.Serve(ln, handler))
}

// listenLoopback listens on addr, whose host must be a loopback IP address.
func listenLoopback(addr string) (net.Listener, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("-listen %q: %v", addr, err)
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return nil, fmt.Errorf("-listen %q: want a loopback IP address (127.0.0.1 or ::1)", addr)
	}
	return net.Listen("tcp", addr)
}

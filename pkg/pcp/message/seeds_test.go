package message

import (
	"crypto/sha256"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

var writeSeeds = flag.Bool("write-seeds", false, "rewrite testdata/fuzz seed files from the test vectors")

// TestSeedCorpus checks that testdata/fuzz holds every test vector as a
// fuzz seed, in go test's corpus format, so the fuzzers (and CI's run of
// the seeds) start from them; with -write-seeds it writes them:
// go test -run TestSeedCorpus -write-seeds
func TestSeedCorpus(t *testing.T) {
	var v1, v2 [][]byte
	for _, v := range v1Vectors {
		v1 = append(v1, v.in)
	}
	for _, v := range v1ErrorVectors {
		v1 = append(v1, v.in)
	}
	v1 = append(v1, frame(env, cppAssociateEnvelope, data, ""),
		frame(env, `{"id":"m","message_type":"t","targets":["pcp://*/agent"],"expires":"2026-11-26T05:30:00+01:00","sender":"pcp://n/agent","in_reply_to":"x","destination_report":true,"z":[1]}`,
			data, `{"a":1}`, debug, `{"hops":[]}`, debug, ""),
		benchV1)
	for _, v := range v2Vectors {
		v2 = append(v2, []byte(v.in))
	}
	v2 = append(v2, benchV2)
	write := func(dir string, seeds [][]byte) {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, s := range seeds {
			name := fmt.Sprintf("seed-%x", sha256.Sum256(s))[:21]
			body := "go test fuzz v1\n[]byte(" + strconv.Quote(string(s)) + ")\n"
			path := filepath.Join(dir, name)
			if !*writeSeeds {
				if got, err := os.ReadFile(path); err != nil || string(got) != body {
					t.Errorf("seed %s is missing or stale (%v): run go test -run TestSeedCorpus -write-seeds", path, err)
				}
				continue
			}
			if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	write(filepath.Join("testdata", "fuzz", "FuzzDecodeV1"), v1)
	write(filepath.Join("testdata", "fuzz", "FuzzDecodeV2"), v2)
}

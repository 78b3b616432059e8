// Command gen writes the corpus's node facts, testdata/corpus/facts/NODE.json,
// from the facts a real Puppet 7.23 agent (facter 4.3) uploaded,
// testdata/puppet-protocol/facts-agent1.json.
//
//	go run ./internal/corpus/gen
//
// Every node keeps all of the recorded facts and their shapes. Per node it
// sets the identity and network facts (certname, hostname, fqdn, domain,
// eth0's addresses), the role, the processors and memory size, the usage
// figures that follow from them, and for some nodes the Debian point
// release; it adds the uptime and ssh host key facts facter 4 reports on a
// VM running sshd, missing from the recording. The output is deterministic: running it again rewrites
// the same files. testdata/corpus/README.md describes the result.
package main

import (
	"bytes"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"log"
	"math"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/compilefarm/compilefarm/internal/corpus"
)

const domain = "example.test"

// node is one generated node.
type node struct {
	host   string
	role   string
	subnet int    // eth0 is 10.20.<subnet>.<host>/24
	octet  int    // last octet of eth0's address
	cpus   int    // processors.count
	memKB  uint64 // MemTotal from /proc/meminfo
	used   int    // percent of memory in use at recording time
	rootGB uint64 // GiB used on /
	minor  string // Debian 12 point release, "" for the recorded 12.11
	uptime uint64 // seconds since boot at recording time
}

// MemTotal of Debian 12 KVM guests with 4, 8, 16 and 32 GiB.
const (
	mem4  = 4005100
	mem8  = 8136020
	mem16 = 16372940
	mem32 = 32865388
)

var nodes = []node{
	{"lb01", "loadbalancer", 1, 10, 2, mem4, 18, 4, "", 38*86400 + 3*3600 + 11*60 + 7},
	{"lb02", "loadbalancer", 1, 11, 2, mem4, 21, 4, "", 38*86400 + 2*3600 + 58*60 + 41},
	{"web01", "web", 1, 21, 4, mem8, 34, 9, "", 12*86400 + 7*3600 + 3*60 + 12},
	{"web02", "web", 1, 22, 4, mem8, 31, 9, "", 12*86400 + 6*3600 + 49*60 + 55},
	{"web03", "web", 1, 23, 4, mem8, 27, 8, "10", 86400 + 4*3600 + 17*60 + 2},
	{"app01", "app", 2, 21, 4, mem16, 52, 14, "", 5*86400 + 22*3600 + 7*60 + 30},
	{"app02", "app", 2, 22, 4, mem16, 48, 13, "", 5*86400 + 21*3600 + 51*60 + 4},
	{"cache01", "cache", 2, 31, 2, mem8, 63, 5, "", 97*86400 + 13*3600 + 2*60 + 9},
	{"cache02", "cache", 2, 32, 2, mem8, 58, 5, "", 97*86400 + 12*3600 + 40*60 + 16},
	{"mysql01", "db_mysql", 3, 11, 8, mem32, 71, 88, "", 61*86400 + 8*3600 + 33*60 + 48},
	{"pg01", "db_postgres", 3, 21, 8, mem32, 44, 120, "", 23*86400 + 19*3600 + 5*60 + 27},
	{"pg02", "db_postgres", 3, 22, 8, mem16, 39, 117, "10", 5*3600 + 41*60 + 19},
	{"ntp01", "ntp_server", 0, 5, 2, mem4, 12, 3, "", 143*86400 + 2*3600 + 14*60 + 51},
	{"log01", "log_server", 0, 6, 4, mem8, 41, 162, "", 33*86400 + 10*3600 + 26*60 + 3},
	{"bastion01", "bastion", 0, 10, 2, mem4, 15, 4, "9", 9*86400 + 15*3600 + 9*60 + 36},
	{"mirror01", "mirror", 0, 20, 2, mem4, 22, 174, "", 47*86400 + 1*3600 + 2*60 + 3},
	{"mon01", "monitoring", 0, 30, 4, mem8, 38, 21, "", 19*86400 + 11*3600 + 45*60 + 22},
	{"backup01", "backup", 0, 40, 2, mem8, 25, 141, "", 2*86400 + 3*3600 + 12*60 + 44},
}

func main() {
	log.SetFlags(0)
	log.SetPrefix("corpus gen: ")
	dir, err := corpus.Dir()
	if err != nil {
		log.Fatal(err)
	}
	src := filepath.Join(dir, "..", "puppet-protocol", "facts-agent1.json")
	b, err := os.ReadFile(src)
	if err != nil {
		log.Fatal(err)
	}
	out := filepath.Join(dir, "facts")
	if err := os.MkdirAll(out, 0o755); err != nil {
		log.Fatal(err)
	}
	old, _ := filepath.Glob(filepath.Join(out, "*.json"))
	for _, f := range old {
		if err := os.Remove(f); err != nil {
			log.Fatal(err)
		}
	}
	for _, n := range nodes {
		var doc map[string]any
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.UseNumber()
		if err := dec.Decode(&doc); err != nil {
			log.Fatalf("decode %s: %v", src, err)
		}
		certname := n.host + "." + domain
		doc["name"] = certname
		n.apply(doc["values"].(map[string]any), certname)
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		enc.SetIndent("", "  ")
		if err := enc.Encode(doc); err != nil {
			log.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(out, certname+".json"), buf.Bytes(), 0o644); err != nil {
			log.Fatal(err)
		}
	}
	fmt.Printf("wrote %d nodes to %s\n", len(nodes), out)
}

// apply turns the recorded agent's facts into node n's.
func (n node) apply(v map[string]any, certname string) {
	fqdn := certname
	ip := fmt.Sprintf("10.20.%d.%d", n.subnet, n.octet)
	network := fmt.Sprintf("10.20.%d.0", n.subnet)
	ip6 := fmt.Sprintf("fd00:20:%x::%x", n.subnet, n.octet)
	network6 := fmt.Sprintf("fd00:20:%x::", n.subnet)
	mac := fmt.Sprintf("52:54:00:14:%02x:%02x", n.subnet, n.octet)
	linkLocal := eui64LinkLocal(mac)
	ifb0, ifb1 := randomMAC(n.host+"/ifb0"), randomMAC(n.host+"/ifb1")

	// Identity.
	v["role"] = n.role
	v["clientcert"] = certname
	v["hostname"] = n.host
	v["fqdn"] = fqdn
	v["domain"] = domain
	// The recording's agent ran from a demo directory; a Debian
	// puppet-agent's vardir and server are these.
	v["puppet_vardir"] = "/var/lib/puppet"
	v["puppet_server"] = "puppet." + domain

	// Network: eth0 in the node's subnet, a KVM MAC, ifb MACs random as
	// the kernel makes them.
	v["ipaddress"], v["ipaddress_eth0"] = ip, ip
	v["ipaddress6"], v["ipaddress6_eth0"] = ip6, ip6
	v["macaddress"], v["macaddress_eth0"] = mac, mac
	v["macaddress_ifb0"], v["macaddress_ifb1"] = ifb0, ifb1
	v["network"], v["network_eth0"] = network, network
	v["network6"], v["network6_eth0"] = network6, network6
	nw := v["networking"].(map[string]any)
	nw["fqdn"], nw["hostname"], nw["domain"] = fqdn, n.host, domain
	nw["ip"], nw["ip6"], nw["mac"] = ip, ip6, mac
	nw["network"], nw["network6"] = network, network6
	ifs := nw["interfaces"].(map[string]any)
	eth0 := ifs["eth0"].(map[string]any)
	eth0["ip"], eth0["ip6"], eth0["mac"] = ip, ip6, mac
	eth0["network"], eth0["network6"] = network, network6
	b4 := eth0["bindings"].([]any)[0].(map[string]any)
	b4["address"], b4["network"] = ip, network
	b6 := eth0["bindings6"].([]any)
	b6[0].(map[string]any)["address"] = ip6
	b6[0].(map[string]any)["network"] = network6
	b6[1].(map[string]any)["address"] = linkLocal
	ifs["ifb0"].(map[string]any)["mac"] = ifb0
	ifs["ifb1"].(map[string]any)["mac"] = ifb1
	// The mysql module's fact, as it computes it from the MAC.
	v["mysql_server_id"] = json.Number(strconv.FormatUint(mysqlServerID(mac), 10))

	// Processors.
	procs := v["processors"].(map[string]any)
	model := procs["models"].([]any)[0]
	models := make([]any, n.cpus)
	for i := range models {
		models[i] = model
		v[fmt.Sprintf("processor%d", i)] = model
	}
	procs["models"] = models
	procs["count"] = jsonInt(uint64(n.cpus))
	procs["cores"] = jsonInt(uint64(n.cpus))
	v["processorcount"] = jsonInt(uint64(n.cpus))

	// Memory: the size, and what is in use when the facts were recorded.
	oldTotal := uint64(mustInt(v["memory"].(map[string]any)["system"].(map[string]any)["total_bytes"]))
	total := n.memKB * 1024
	used := (total * uint64(n.used) / 100) &^ 1023
	avail := total - used
	sys := v["memory"].(map[string]any)["system"].(map[string]any)
	sys["total_bytes"], sys["total"] = jsonInt(total), corpus.HumanBytes(total)
	sys["used_bytes"], sys["used"] = jsonInt(used), corpus.HumanBytes(used)
	sys["available_bytes"], sys["available"] = jsonInt(avail), corpus.HumanBytes(avail)
	sys["capacity"] = fmt.Sprintf("%.2f%%", float64(used)/float64(total)*100)
	v["memorysize"], v["memorysize_mb"] = corpus.HumanBytes(total), jsonFloat(float64(total)/(1<<20))
	v["memoryfree"], v["memoryfree_mb"] = corpus.HumanBytes(avail), jsonFloat(float64(avail)/(1<<20))

	// Load at recording time.
	la := v["load_averages"].(map[string]any)
	h := hash(n.host)
	la["1m"] = jsonFloat(float64(h%(uint64(n.cpus)*90)+3) / 100)
	la["5m"] = jsonFloat(float64(h/7%(uint64(n.cpus)*70)+2) / 100)
	la["15m"] = jsonFloat(float64(h/11%(uint64(n.cpus)*50)+1) / 100)

	// Mountpoints: the recording sandbox's tool mount is not a real node's;
	// tmpfs sizes follow the memory size; / is an ext4 on the 256 GiB vda
	// with 5% reserved blocks.
	mps := v["mountpoints"].(map[string]any)
	for name := range mps {
		if strings.HasPrefix(name, "/mnt/sandboxing/") {
			delete(mps, name)
		}
	}
	for _, name := range []string{"/dev", "/dev/shm", "/sys/fs/cgroup"} {
		mp := mps[name].(map[string]any)
		size := scale(mustInt(mp["size_bytes"]), total, oldTotal) &^ 4095
		setMount(mp, size, size, 0)
		opts := mp["options"].([]any)
		for i, o := range opts {
			s := o.(string)
			if k, val, ok := strings.Cut(s, "="); ok && (k == "size" || k == "nr_inodes") {
				digits, unit := strings.TrimSuffix(val, "k"), ""
				if digits != val {
					unit = "k"
				}
				num, _ := strconv.ParseUint(digits, 10, 64)
				opts[i] = k + "=" + strconv.FormatUint(scale(num, total, oldTotal), 10) + unit
			}
		}
	}
	root := mps["/"].(map[string]any)
	rootSize := uint64(mustInt(root["size_bytes"]))
	rootUsed := (n.rootGB<<30 + hash(n.host+"/")%(1<<30)) &^ 4095
	reserved := rootSize / 20 &^ 4095
	setMount(root, rootSize, rootSize-reserved-rootUsed, rootUsed)

	// Debian point release.
	if n.minor != "" {
		full := "12." + n.minor
		for _, rel := range []map[string]any{
			v["os"].(map[string]any)["release"].(map[string]any),
			v["os"].(map[string]any)["distro"].(map[string]any)["release"].(map[string]any),
		} {
			rel["full"], rel["minor"] = full, n.minor
		}
		v["lsbdistrelease"], v["operatingsystemrelease"], v["lsbminordistrelease"] = full, full, n.minor
	}

	// The host keys of sshd, as facter 4 reports them (the recording
	// machine ran no sshd): saz-ssh exports them as Sshkey resources that
	// every node collects.
	sshFacts(v, n.host)

	// Uptime, as facter 4 reports it on Linux.
	secs := n.uptime
	hours, days := secs/3600, secs/86400
	text := corpus.UptimeText(secs)
	v["system_uptime"] = map[string]any{
		"days": jsonInt(days), "hours": jsonInt(hours), "seconds": jsonInt(secs), "uptime": text,
	}
	v["uptime"] = text
	v["uptime_days"], v["uptime_hours"], v["uptime_seconds"] = jsonInt(days), jsonInt(hours), jsonInt(secs)
}

// sshFacts sets the ssh host key facts of host: the structured ssh fact
// and the legacy sshKEYkey and sshfp_KEY facts, for an RSA, an ECDSA and an
// Ed25519 key. The keys are well-formed OpenSSH public key blobs whose key
// material is fixed per host (not real keys: nobody holds their private
// halves); the fingerprints are computed from the blobs as facter does.
func sshFacts(v map[string]any, host string) {
	material := func(what string, n int) []byte {
		var out []byte
		for i := 0; len(out) < n; i++ {
			h := sha256.Sum256([]byte(fmt.Sprintf("%s/%s/%d", host, what, i)))
			out = append(out, h[:]...)
		}
		return out[:n]
	}
	str := func(b []byte) []byte {
		return append(binary.BigEndian.AppendUint32(nil, uint32(len(b))), b...)
	}
	rsaN := append([]byte{0}, material("rsa", 384)...)
	rsaN[1] |= 0x80
	ecPoint := append([]byte{4}, material("ecdsa", 64)...)
	keys := []struct {
		name, typ string
		sshfp     int
		blob      []byte
	}{
		{"rsa", "ssh-rsa", 1, slices.Concat(str([]byte("ssh-rsa")), str([]byte{1, 0, 1}), str(rsaN))},
		{"ecdsa", "ecdsa-sha2-nistp256", 3, slices.Concat(str([]byte("ecdsa-sha2-nistp256")), str([]byte("nistp256")), str(ecPoint))},
		{"ed25519", "ssh-ed25519", 4, slices.Concat(str([]byte("ssh-ed25519")), str(material("ed25519", 32)))},
	}
	ssh := map[string]any{}
	for _, k := range keys {
		key := base64.StdEncoding.EncodeToString(k.blob)
		s1, s256 := sha1.Sum(k.blob), sha256.Sum256(k.blob)
		fp1 := fmt.Sprintf("SSHFP %d 1 %x", k.sshfp, s1)
		fp256 := fmt.Sprintf("SSHFP %d 2 %x", k.sshfp, s256)
		ssh[k.name] = map[string]any{
			"fingerprints": map[string]any{"sha1": fp1, "sha256": fp256},
			"key":          key,
			"type":         k.typ,
		}
		v["ssh"+k.name+"key"] = key
		v["sshfp_"+k.name] = fp1 + "\n" + fp256
	}
	v["ssh"] = ssh
}

// setMount sets a mountpoint's sizes as facter computes them.
func setMount(mp map[string]any, size, avail, used uint64) {
	mp["size_bytes"], mp["size"] = jsonInt(size), corpus.HumanBytes(size)
	mp["available_bytes"], mp["available"] = jsonInt(avail), corpus.HumanBytes(avail)
	mp["used_bytes"], mp["used"] = jsonInt(used), corpus.HumanBytes(used)
	switch total := used + avail; {
	case used == total:
		mp["capacity"] = "100%"
	case used > 0:
		mp["capacity"] = fmt.Sprintf("%.2f%%", float64(used)/float64(total)*100)
	default:
		mp["capacity"] = "0%"
	}
}

// scale is n * to / from, rounded.
func scale(n, to, from uint64) uint64 {
	return uint64(math.Round(float64(n) * float64(to) / float64(from)))
}

func mustInt(v any) uint64 {
	u, err := strconv.ParseUint(string(v.(json.Number)), 10, 64)
	if err != nil {
		log.Fatalf("not an integer: %v", v)
	}
	return u
}

func jsonInt(n uint64) json.Number { return json.Number(strconv.FormatUint(n, 10)) }

// jsonFloat writes f as Ruby prints a Float: always with a decimal point.
func jsonFloat(f float64) json.Number {
	s := strconv.FormatFloat(f, 'f', -1, 64)
	if !strings.Contains(s, ".") {
		s += ".0"
	}
	return json.Number(s)
}

// mysqlServerID is the mysql module's mysql_server_id fact.
func mysqlServerID(mac string) uint64 {
	var id uint64
	for _, p := range strings.Split(mac, ":")[2:] {
		b, _ := strconv.ParseUint(p, 16, 8)
		id = id<<6 + b
	}
	return id
}

// eui64LinkLocal is the fe80:: address the kernel derives from a MAC.
func eui64LinkLocal(mac string) string {
	var m [6]byte
	for i, p := range strings.Split(mac, ":") {
		b, _ := strconv.ParseUint(p, 16, 8)
		m[i] = byte(b)
	}
	a := [16]byte{0: 0xfe, 1: 0x80, 8: m[0] ^ 2, 9: m[1], 10: m[2], 11: 0xff, 12: 0xfe, 13: m[3], 14: m[4], 15: m[5]}
	return netip.AddrFrom16(a).String()
}

// randomMAC is a locally administered MAC, fixed per key.
func randomMAC(key string) string {
	h := hash(key)
	b := make([]string, 6)
	for i := range b {
		b[i] = fmt.Sprintf("%02x", byte(h>>(8*i)))
	}
	first, _ := strconv.ParseUint(b[0], 16, 8)
	b[0] = fmt.Sprintf("%02x", byte(first)&^1|2)
	return strings.Join(b, ":")
}

func hash(s string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(s))
	return h.Sum64()
}

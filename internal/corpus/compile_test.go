package corpus

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/compilefarm/compilefarm/pkg/catalog"
	"github.com/compilefarm/compilefarm/pkg/compiler"
	"github.com/compilefarm/compilefarm/pkg/compiler/puppet"
)

// roleResources are resources each role's catalog must hold: a type, or a
// Type[title] reference. baseResources are every node's.
var (
	baseResources = []string{
		"Class[Ssh::Server]", "Class[Ssh::Client]", "Class[Apt]", "Apt::Source", "Class[Rsyslog]",
		"Logrotate::Rule", "File[/etc/logrotate.d/puppet-agent]", "Concat_fragment[motd-banner]",
		"Concat_fragment[motd-node]", "Host", "Sshkey", "Ssh_authorized_key", "Cron",
		"File[/etc/inventory/node.json]",
	}
	roleResources = map[string][]string{
		"web":          {"Class[Apache]", "Apache::Vhost", "File[/etc/logrotate.d/apache-sites]"},
		"app":          {"Class[Apache]", "Apache::Vhost", "Logrotate::Rule[shop-access]", "File[/etc/default/shop]"},
		"db_mysql":     {"Class[Mysql::Server]", "Mysql::Db", "Mysql_database", "Mysql_grant"},
		"db_postgres":  {"Class[Postgresql::Server]", "Postgresql::Server::Db", "Postgresql_conf[shared_buffers]"},
		"loadbalancer": {"Class[Haproxy]", "Haproxy::Frontend", "Haproxy::Backend", "Haproxy::Balancermember", "Haproxy::Listen"},
		"cache":        {"Class[Memcached]", "File[/etc/memcached.conf]", "Class[Redis]", "Redis::Instance"},
		"ntp_server":   {"Class[Chrony]", "File[/etc/chrony/chrony.conf]"},
		"log_server":   {"Class[Rsyslog::Server]", "Rsyslog::Snippet[server]", "Firewall", "Logrotate::Rule[remote-hosts]"},
		"bastion":      {"Class[Firewall]", "Firewall[100 ssh from anywhere]", "Ssh_authorized_key[jump-alice]"},
		"mirror":       {"Class[Rsync::Server]", "Rsync::Server::Module", "Xinetd::Service[rsync]"},
		"monitoring":   {"Class[Collectd]", "Collectd::Plugin", "Collectd::Plugin::Network::Listener"},
		"backup":       {"Rsync::Get", "Cron[backup-web01-www]", "Logrotate::Rule[backup]"},
	}
	// Every node but the NTP server is an ntpd client.
	notNTPClient = map[string]bool{"ntp_server": true}
)

// describeDiff says which resources differ between two catalogs.
func describeDiff(a, b []byte) string {
	d, err := catalog.Compare(a, b)
	if err != nil {
		return err.Error()
	}
	var out []string
	for _, r := range d.Resources {
		out = append(out, r.Change+" "+r.Ref)
	}
	return strings.Join(out, ", ")
}

func testLogger() *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// TestCompileEveryNode compiles every node of the corpus with real Puppet:
// each catalog holds its role's resources, churning the volatile facts
// (Churn) leaves the catalog byte for byte the same, and UsedChange
// changes it.
func TestCompileEveryNode(t *testing.T) {
	if testing.Short() {
		t.Skip("needs Ruby Puppet and Debian's puppet modules; skipped with -short")
	}
	envpath, err := Build(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	e, err := puppet.New(ctx, puppet.Options{Workers: 2, WorkDir: t.TempDir(), Logger: testLogger()})
	if err != nil {
		t.Fatalf("start puppet engine: %v (ruby and puppet are needed; run scripts/install-deps.sh)", err)
	}
	t.Cleanup(func() {
		if err := e.Close(); err != nil {
			t.Errorf("close engine: %v", err)
		}
	})
	nodes := loadNodes(t)
	start := time.Now()
	t.Cleanup(func() {
		t.Logf("%d nodes, 3 compiles each, in %v", len(nodes), time.Since(start).Round(time.Millisecond))
	})

	compile := func(t *testing.T, n Node, values map[string]any) []byte {
		t.Helper()
		res, err := e.Compile(t.Context(), compiler.Request{
			Certname:        n.Certname,
			Environment:     Environment,
			CodeID:          "corpus",
			EnvironmentPath: envpath,
			Facts:           values,
		})
		if err != nil {
			t.Fatalf("compile: %v", err)
		}
		// Sealed, equal content is equal bytes (version and catalog_uuid
		// follow from the content).
		sealed, _, err := catalog.Seal(res.Catalog, "corpus")
		if err != nil {
			t.Fatal(err)
		}
		return sealed
	}

	t.Run("nodes", func(t *testing.T) {
		for _, n := range nodes {
			t.Run(n.Certname, func(t *testing.T) {
				t.Parallel()
				began := time.Now()
				base := compile(t, n, n.Facts)
				took := time.Since(began)
				checkResources(t, n, base)

				churned := compile(t, n, Churn(n.Facts, 1))
				if !bytes.Equal(base, churned) {
					t.Errorf("volatile facts changed the catalog: %s", describeDiff(base, churned))
				}

				path, value := UsedChange(n)
				changed := compile(t, n, With(n.Facts, path, value))
				if bytes.Equal(base, changed) {
					t.Errorf("UsedChange %s = %v left the catalog the same", strings.Join(path, "."), value)
				}
				t.Logf("%s (%s): %d bytes, first compile %v", n.Certname, n.Role, len(base), took.Round(time.Millisecond))
			})
		}
	})
}

// checkResources requires the role's (and the base profile's) resources in
// the catalog.
func checkResources(t *testing.T, n Node, catalog []byte) {
	t.Helper()
	var cat struct {
		Resources []struct {
			Type  string `json:"type"`
			Title string `json:"title"`
		} `json:"resources"`
	}
	if err := json.Unmarshal(catalog, &cat); err != nil {
		t.Fatalf("decode catalog: %v", err)
	}
	have := map[string]bool{}
	for _, r := range cat.Resources {
		have[r.Type] = true
		have[r.Type+"["+r.Title+"]"] = true
	}
	want, ok := roleResources[n.Role]
	if !ok {
		t.Fatalf("no expected resources for role %s", n.Role)
	}
	want = append(append([]string(nil), want...), baseResources...)
	if notNTPClient[n.Role] {
		if have["Class[Ntp]"] {
			t.Error("the NTP server also runs the ntpd client")
		}
	} else {
		want = append(want, "Class[Ntp]", "File[/etc/ntp.conf]")
	}
	want = append(want, fmt.Sprintf("Class[Role::%s]", capitalize(n.Role)))
	for _, w := range want {
		if !have[w] {
			t.Errorf("catalog of %s (%s) has no %s", n.Certname, n.Role, w)
		}
	}
}

// capitalize is Puppet's name for a class in a reference: each segment
// capitalised (role::db_mysql -> Role::Db_mysql).
func capitalize(s string) string {
	return strings.ToUpper(s[:1]) + s[1:]
}

package corpus

import (
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/compilefarm/compilefarm/pkg/facts"
)

// usedChange is, for one role, a fact the role's code really reads and how
// to change it so that the catalog changes.
type usedChange struct {
	path   []string
	change func(n Node, old any) any
	why    string // where the role reads it, and what changes
}

// usedChanges is UsedChange's table, by role.
var usedChanges = map[string]usedChange{
	"web": {[]string{"networking", "domain"}, func(n Node, _ any) any { return "dmz.example.test" },
		"profile::web makes webmaster@ the domain apache's ServerAdmin"},
	"app": {[]string{"processors", "count"}, func(_ Node, old any) any { return scaleInt(old, 2) },
		"profile::app sizes gunicorn's workers in /etc/default/shop (EPP) from it"},
	"db_mysql": {[]string{"memory", "system", "total_bytes"}, func(_ Node, old any) any { return scaleInt(old, 2) },
		"profile::mysql sets innodb_buffer_pool_size to 60% of it (mysql::server's my.cnf)"},
	"db_postgres": {[]string{"memorysize_mb"}, func(_ Node, old any) any { return scaleFloat(old, 2) },
		"profile::postgresql sets shared_buffers to a quarter of it (postgresql_conf)"},
	"loadbalancer": {[]string{"networking", "ip"}, func(n Node, _ any) any { return "10.20.1.200" },
		"profile::haproxy binds the www frontend and the stats listener to it"},
	"cache": {[]string{"memorysize"}, func(_ Node, _ any) any { return "15.61 GiB" },
		"saz-memcached's memcached::max_memory() reads it for -m in memcached.conf"},
	"ntp_server": {[]string{"networking", "interfaces", "eth0", "network"}, func(_ Node, _ any) any { return "10.21.0.0" },
		"profile::ntp_server allows each interface's network in chrony.conf"},
	"log_server": {[]string{"networking", "network"}, func(_ Node, _ any) any { return "10.21.0.0" },
		"profile::log_server opens syslog's ports to its own network (firewall rules)"},
	"bastion": {[]string{"ipaddress"}, func(_ Node, _ any) any { return "10.20.0.99" },
		"Hiera's %{::ipaddress} is sshd's ListenAddress; profile::bastion's firewall rule matches it"},
	"mirror": {[]string{"processorcount"}, func(_ Node, old any) any { return scaleInt(old, 4) },
		"profile::mirror derives the rsync modules' max connections from $::processorcount"},
	"monitoring": {[]string{"networking", "ip"}, func(n Node, _ any) any { return "10.20.0.99" },
		"profile::monitoring makes collectd's network plugin listen on it"},
	"backup": {[]string{"disks", "vda", "size_bytes"}, func(_ Node, _ any) any { return json.Number("2199023255552") },
		"profile::backup keeps 60 days instead of 14 on a disk of 1 TiB or more (cron, logrotate)"},
}

// UsedChange returns, for n's role, the path of a fact the role's code
// really reads and a new value for it that changes the node's catalog and
// nothing the node exports (ssh host keys are titled and aliased by fqdn,
// hostname and addresses: changing those recompiles every collector too;
// see
// usedChanges for where each role reads its fact). It returns nil, nil for
// a role the corpus does not have.
//
//	role          fact                                   read by
//	web           networking.domain                      profile::web (apache's ServerAdmin)
//	app           processors.count                       profile::app (gunicorn workers)
//	db_mysql      memory.system.total_bytes              profile::mysql (innodb_buffer_pool_size)
//	db_postgres   memorysize_mb                          profile::postgresql (shared_buffers)
//	loadbalancer  networking.ip                          profile::haproxy (bind addresses)
//	cache         memorysize                             memcached::max_memory (-m)
//	ntp_server    networking.interfaces.eth0.network     profile::ntp_server (chrony allow)
//	log_server    networking.network                     profile::log_server (firewall)
//	bastion       ipaddress                              Hiera %{::ipaddress} (sshd ListenAddress)
//	mirror        processorcount                         profile::mirror (rsync max connections)
//	monitoring    networking.ip                          profile::monitoring (collectd network listener)
//	backup        disks.vda.size_bytes                   profile::backup (retention)
func UsedChange(n Node) (path []string, value any) {
	u, ok := usedChanges[n.Role]
	if !ok {
		return nil, nil
	}
	old, _ := facts.Lookup(n.Facts, u.path)
	return append([]string(nil), u.path...), u.change(n, old)
}

func scaleInt(old any, by uint64) any {
	n, ok := num(old)
	if !ok {
		panic(fmt.Sprintf("corpus: %v is not an integer", old))
	}
	return intLike(old, n*by)
}

func scaleFloat(old any, by float64) any {
	f, err := strconv.ParseFloat(fmt.Sprint(old), 64)
	if err != nil {
		panic(fmt.Sprintf("corpus: %v is not a number", old))
	}
	return floatLike(old, f*by)
}

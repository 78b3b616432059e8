# HAProxy for the web tier: a frontend on this node's address, the web
# servers as backend members (listed in Hiera: the load balancers do not
# collect exported members), and a stats page.
class profile::haproxy (
  Array[Hash] $web_servers,
  String $stats_network,
) {
  class { 'haproxy':
    global_options   => {
      'log'      => '127.0.0.1 local0',
      'chroot'   => '/var/lib/haproxy',
      'user'     => 'haproxy',
      'group'    => 'haproxy',
      'daemon'   => '',
      'maxconn'  => '20000',
      'nbthread' => String($facts['processors']['count']),
    },
    defaults_options => {
      'log'     => 'global',
      'mode'    => 'http',
      'option'  => ['httplog', 'dontlognull', 'forwardfor'],
      'timeout' => ['connect 5s', 'client 30s', 'server 30s'],
    },
  }

  haproxy::frontend { 'www':
    ipaddress        => $facts['networking']['ip'],
    ports            => '80',
    mode             => 'http',
    collect_exported => false,
    options          => {
      'default_backend' => 'web',
      'option'          => ['httplog'],
    },
  }
  haproxy::backend { 'web':
    mode             => 'http',
    collect_exported => false,
    options          => {
      'balance' => 'roundrobin',
      'option'  => ['httpchk GET /health'],
    },
  }
  $web_servers.each |Hash $s| {
    haproxy::balancermember { $s['name']:
      listening_service => 'web',
      server_names      => $s['name'],
      ipaddresses       => $s['ip'],
      ports             => '80',
      options           => 'check inter 5s',
    }
  }
  haproxy::listen { 'stats':
    ipaddress        => $facts['networking']['ip'],
    ports            => '9000',
    collect_exported => false,
    options          => {
      'mode'  => 'http',
      'stats' => ['enable', 'uri /', 'refresh 10s', 'admin if LOCALHOST'],
      'acl'   => "internal src ${stats_network}",
    },
  }
}

# A default-deny iptables policy: established traffic and ssh are allowed,
# the rest is dropped; roles add their own accept rules (100-899).
class profile::firewall (
  Array[String] $admin_networks = [],
) {
  include firewall

  firewall { '000 accept related established':
    proto  => 'all',
    state  => ['RELATED', 'ESTABLISHED'],
    action => 'accept',
  }
  firewall { '001 accept icmp':
    proto  => 'icmp',
    action => 'accept',
  }
  firewall { '002 accept loopback':
    proto   => 'all',
    iniface => 'lo',
    action  => 'accept',
  }
  $admin_networks.each |$net| {
    firewall { "010 ssh from ${net}":
      dport  => 22,
      proto  => 'tcp',
      source => $net,
      action => 'accept',
    }
  }
  firewall { '999 drop all':
    proto  => 'all',
    action => 'drop',
  }
}

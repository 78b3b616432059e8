# /etc/motd, assembled from fragments: the site's banner (ERB), the node's
# description (EPP), and whatever roles add.
class profile::motd (
  String $banner,
  String $latest_point_release,
  String $contact = "ops@${facts['networking']['domain']}",
) {
  concat { '/etc/motd':
    owner => 'root',
    group => 'root',
    mode  => '0644',
  }
  concat::fragment { 'motd-banner':
    target  => '/etc/motd',
    content => template('profile/motd.erb'),
    order   => '01',
  }
  $up_to_date = versioncmp($facts['os']['release']['full'], $latest_point_release) >= 0
  concat::fragment { 'motd-node':
    target  => '/etc/motd',
    content => epp('profile/motd.epp', {
      'contact'    => $contact,
      'up_to_date' => $up_to_date,
      'latest'     => $latest_point_release,
    }),
    order   => '10',
  }

  # Interfaces with an address, one line each.
  $lines = $facts['networking']['interfaces'].filter |$name, $iface| {
    $name != 'lo' and $iface['ip'] != undef
  }.map |$name, $iface| {
    "  ${name}: ${iface['ip']} (${iface['mac']})"
  }
  concat::fragment { 'motd-interfaces':
    target  => '/etc/motd',
    content => "Interfaces:\n${join($lines, "\n")}\n",
    order   => '20',
  }
}

# The local Debian mirror, served over rsync (from xinetd) to the site.
class profile::mirror (
  Array[String] $hosts_allow,
  Stdlib::Absolutepath $root = '/srv/mirror',
) {
  class { 'rsync::server':
    use_xinetd => true,
    address    => $facts['networking']['ip'],
    use_chroot => 'yes',
  }
  $max = $::processorcount * 25
  rsync::server::module { 'debian':
    path            => "${root}/debian",
    comment         => 'Debian archive',
    read_only       => 'yes',
    list            => 'yes',
    max_connections => String($max),
    hosts_allow     => $hosts_allow,
  }
  rsync::server::module { 'debian-security':
    path            => "${root}/debian-security",
    comment         => 'Debian security archive',
    read_only       => 'yes',
    max_connections => String($max),
    hosts_allow     => $hosts_allow,
  }
  cron { 'ftpsync':
    command => '/usr/local/bin/ftpsync sync:all',
    user    => 'mirror',
    minute  => fqdn_rand(60, 'ftpsync'),
    hour    => '*/6',
  }
}

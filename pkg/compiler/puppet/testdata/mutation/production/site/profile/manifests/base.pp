# A profile over real Debian modules (ntp, apache + vhost, apt, mysql, concat,
# inifile, cron_core, logrotate, stdlib) that reads facts in every way a
# manifest can: $facts[...], $::x, unqualified $x, defined(), fqdn_rand, ERB
# and EPP templates, scope.to_hash (logrotate's rule template), iteration,
# Hiera interpolation and automatic parameter lookup.
class profile::base (
  String $motd_owner,
  Array[String] $ntp_servers,
  String $banner,
) {
  class { 'ntp':
    servers => $ntp_servers,
  }
  class { 'apache':
    default_vhost => false,
  }
  apache::vhost { $facts['networking']['fqdn']:
    port    => 80,
    docroot => "/var/www/${facts['networking']['hostname']}",
  }
  include apt
  class { 'mysql::server':
    root_password => 'secret',
  }
  concat { '/etc/motd':
    owner => $motd_owner,
  }
  concat::fragment { 'motd-erb':
    target  => '/etc/motd',
    content => template('profile/motd.erb'),
    order   => '01',
  }
  concat::fragment { 'motd-epp':
    target  => '/etc/motd',
    content => epp('profile/info.epp', { 'banner' => $banner }),
    order   => '02',
  }
  ini_setting { 'cf-memory':
    ensure  => present,
    path    => '/etc/cf.ini',
    section => 'memory',
    setting => 'total',
    value   => $facts['memory']['system']['total'],
  }
  if defined('$is_virtual') {
    notify { 'virtual': message => "virtual=${is_virtual}" }
  }
  cron { 'cf-report':
    command => '/usr/local/bin/cf-report',
    minute  => fqdn_rand(60),
  }
  # Hash + Hash is Ruby's C-level Hash#merge reading the fact hash argument.
  $release = { 'codename' => 'none' } + $facts['os']['distro']['release']
  notify { 'release': message => "release ${release['full']} (${release['codename']})" }
  $mounts = $facts['mountpoints'].filter |$m, $info| { $info['filesystem'] == 'ext4' }
  notify { 'mounts': message => join(keys($mounts), ',') }
  # Iterating a hash of scalars reveals them all.
  notify { 'cpu': message => $facts['processors'].map |$k, $v| { "${k}=${v}" } }
  # puppet-logrotate's rule template looks variables up in scope.to_hash.
  logrotate::rule { 'cf':
    path         => "/var/log/${facts['networking']['hostname']}.log",
    rotate       => '5',
    rotate_every => 'week',
    compress     => true,
  }
}

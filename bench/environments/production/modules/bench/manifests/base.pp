# @summary Packages, sysctl settings and a few system files.
#
# @param packages Packages every node has.
# @param sysctls How many sysctl drop-in files to manage.
class bench::base (
  Array[String[1]] $packages,
  Integer[0] $sysctls = 40,
) {
  $root = $bench::root
  $fqdn = $facts['networking']['fqdn']

  file { [$root, "${root}/etc", "${root}/etc/sysctl.d", "${root}/etc/profile.d", "${root}/var", "${root}/var/log"]:
    ensure => directory,
    owner  => 'root',
    group  => 'root',
    mode   => '0755',
  }

  package { $packages:
    ensure => installed,
  }

  file { "${root}/etc/motd":
    ensure  => file,
    owner   => 'root',
    group   => 'root',
    mode    => '0644',
    content => epp('bench/motd.epp', {
      'fqdn'   => $fqdn,
      'os'     => $facts['os'],
      'cpus'   => $facts['processors']['count'],
      'memory' => $facts['memory']['system']['total'],
    }),
  }

  $sysctls.each |Integer $i| {
    $n = sprintf('%02d', $i)
    file { "${root}/etc/sysctl.d/${n}-bench.conf":
      ensure  => file,
      owner   => 'root',
      group   => 'root',
      mode    => '0644',
      content => "# Managed by Puppet (bench::base)\nnet.core.somaxconn = ${1024 + $i * 64}\nvm.swappiness = ${$i % 60}\n",
      notify  => Exec['bench-sysctl-reload'],
    }
  }

  exec { 'bench-sysctl-reload':
    command     => "/sbin/sysctl --load=${root}/etc/sysctl.d",
    refreshonly => true,
  }

  service { ['chrony', 'rsyslog', 'ssh', 'cron']:
    ensure => running,
    enable => true,
  }
}

# Central syslog: rsyslog receiving over TCP and UDP into one directory per
# host, kept for a year; only the site's networks may send.
class profile::log_server (
  Array[String] $client_networks,
  String $log_dir = '/srv/log/',
) {
  class { 'rsyslog::server':
    enable_tcp    => true,
    enable_udp    => true,
    server_dir    => $log_dir,
    custom_config => '',
    port          => '514',
  }

  logrotate::rule { 'remote-hosts':
    path          => "${log_dir}*/*.log",
    rotate        => '365',
    rotate_every  => 'day',
    compress      => true,
    delaycompress => true,
    missingok     => true,
    sharedscripts => true,
    dateext       => true,
    postrotate    => '/usr/lib/rsyslog/rsyslog-rotate',
  }

  include profile::firewall
  $own_network = "${facts['networking']['network']}/24"
  ([$own_network] + $client_networks).unique.each |$net| {
    firewall { "100 syslog tcp from ${net}":
      dport  => 514,
      proto  => 'tcp',
      source => $net,
      action => 'accept',
    }
    firewall { "101 syslog udp from ${net}":
      dport  => 514,
      proto  => 'udp',
      source => $net,
      action => 'accept',
    }
  }
}

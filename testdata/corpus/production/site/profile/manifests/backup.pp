# The backup server pulls each node's data over rsync every night, at a
# time fqdn_rand spreads out; how long it keeps backups depends on the
# size of its disk.
class profile::backup (
  Hash $sources = {},
  Stdlib::Absolutepath $root = '/srv/backup',
) {
  include rsync

  $disk_bytes = $facts['disks'].dig('vda', 'size_bytes')
  $keep_days = $disk_bytes ? {
    undef   => 7,
    default => $disk_bytes >= 1099511627776 ? { true => 60, default => 14 },
  }

  file { $root:
    ensure => directory,
    mode   => '0700',
  }
  $sources.each |String $name, Hash $src| {
    rsync::get { "${root}/${name}":
      source    => "rsync://${src['host']}/${src['module']}/",
      recursive => true,
      links     => true,
      times     => true,
      purge     => true,
      require   => File[$root],
    }
    cron { "backup-${name}":
      command => "/usr/local/sbin/snapshot ${root}/${name} --keep ${keep_days}",
      user    => 'root',
      hour    => fqdn_rand(5, $name),
      minute  => fqdn_rand(60, $name),
    }
  }
  logrotate::rule { 'backup':
    path         => '/var/log/backup.log',
    rotate       => String($keep_days),
    rotate_every => 'day',
    compress     => true,
    missingok    => true,
  }
}

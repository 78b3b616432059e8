# Nightly jobs every node runs, spread over the night with fqdn_rand so
# they do not all hit the mirror and the backup server at once.
class profile::housekeeping (
  Hash $jobs = {},
) {
  cron { 'apt-autoclean':
    command => '/usr/bin/apt-get -qq autoclean',
    user    => 'root',
    hour    => 2 + fqdn_rand(3, 'apt-autoclean'),
    minute  => fqdn_rand(60, 'apt-autoclean'),
  }
  cron { 'puppet-report-cleanup':
    command => '/usr/bin/find /var/lib/puppet/reports -type f -mtime +14 -delete',
    user    => 'root',
    hour    => 4,
    minute  => fqdn_rand(60),
  }
  $jobs.each |String $name, Hash $job| {
    cron { $name:
      user   => 'root',
      minute => fqdn_rand(60, $name),
      *      => delete($job, 'minute'),
    }
  }
}

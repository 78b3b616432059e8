# @summary Monitoring checks, one file each, and the agent that runs them.
#
# @param checks How many checks.
class bench::monitoring (
  Integer[0] $checks = 80,
) {
  $root = $bench::root

  file { "${root}/etc/checks.d":
    ensure  => directory,
    mode    => '0755',
    purge   => true,
    recurse => true,
  }

  $kinds = ['disk', 'load', 'http', 'process', 'tcp']
  $checks.each |Integer $i| {
    $kind = $kinds[$i % 5]
    bench::check { sprintf('%s_%03d', $kind, $i):
      kind     => $kind,
      interval => 30 + ($i % 4) * 15,
      warning  => 70 + $i % 10,
      critical => 90 + $i % 5,
    }
  }

  service { 'bench-monitor':
    ensure => running,
    enable => true,
  }
}

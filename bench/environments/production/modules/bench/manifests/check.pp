# @summary One monitoring check file.
#
# @param kind     What the check looks at.
# @param interval Seconds between runs.
# @param warning  Warning threshold (percent).
# @param critical Critical threshold (percent).
define bench::check (
  Enum['disk', 'load', 'http', 'process', 'tcp'] $kind,
  Integer $interval,
  Integer $warning,
  Integer $critical,
) {
  file { "${bench::root}/etc/checks.d/${title}.cfg":
    ensure  => file,
    mode    => '0640',
    content => epp('bench/check.cfg.epp', {
      'name'     => $title,
      'kind'     => $kind,
      'interval' => $interval,
      'warning'  => $warning,
      'critical' => $critical,
      'host'     => $facts['networking']['fqdn'],
    }),
    notify  => Service['bench-monitor'],
  }
}

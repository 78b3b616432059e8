# @summary A web server with many virtual sites.
#
# @param sites How many sites.
class bench::web (
  Integer[0] $sites = 60,
) {
  $root = $bench::root

  file { ["${root}/www", "${root}/etc/nginx", "${root}/etc/nginx/sites-enabled"]:
    ensure => directory,
    mode   => '0755',
  }

  service { 'nginx':
    ensure  => running,
    enable  => true,
    require => Package['nginx'],
  }

  $sites.each |Integer $i| {
    bench::site { sprintf('site%03d', $i):
      port    => 8000 + $i,
      aliases => ["www${i}.${facts['networking']['fqdn']}", "s${i}.example.test"],
    }
  }
}

# @summary One virtual site: document root, index page, nginx config and log
#   directory.
#
# @param port    Listen port.
# @param aliases Server names besides the title.
define bench::site (
  Integer $port,
  Array[String[1]] $aliases = [],
) {
  $root = $bench::root
  $docroot = "${root}/www/${title}"

  file { [$docroot, "${root}/var/log/${title}"]:
    ensure => directory,
    mode   => '0755',
  }

  file { "${docroot}/index.html":
    ensure  => file,
    mode    => '0644',
    content => "<!doctype html>\n<html><head><title>${title}</title></head>\n<body><h1>${title}</h1><p>Served by ${facts['networking']['fqdn']} on port ${port}.</p></body></html>\n",
  }

  file { "${root}/etc/nginx/sites-enabled/${title}.conf":
    ensure  => file,
    mode    => '0644',
    content => epp('bench/site.conf.epp', {
      'name'    => $title,
      'port'    => $port,
      'aliases' => $aliases,
      'docroot' => $docroot,
      'logdir'  => "${root}/var/log/${title}",
    }),
    notify  => Service['nginx'],
  }
}

# The site's application (a WSGI app run by gunicorn) behind a local
# Apache reverse proxy, with its own logs rotated.
class profile::app (
  String $app_name,
  Stdlib::Port $app_port = 8000,
  Hash $env = {},
) {
  class { 'apache':
    default_vhost => false,
    mpm_module    => 'event',
  }
  include apache::mod::proxy
  include apache::mod::proxy_http

  apache::vhost { "${app_name}.${facts['networking']['domain']}":
    port                => 80,
    docroot             => "/srv/${app_name}/static",
    proxy_preserve_host => true,
    proxy_pass          => [
      { 'path' => '/static', 'url' => '!' },
      { 'path' => '/', 'url' => "http://127.0.0.1:${app_port}/" },
    ],
  }

  # gunicorn's rule of thumb: two workers per core, plus one.
  $workers = $facts['processors']['count'] * 2 + 1
  file { "/etc/default/${app_name}":
    ensure  => file,
    owner   => 'root',
    group   => 'root',
    mode    => '0644',
    content => epp('profile/app-default.epp', {
      'name'    => $app_name,
      'port'    => $app_port,
      'workers' => $workers,
      'env'     => $env,
    }),
  }

  logrotate::rule { $app_name:
    path         => "/var/log/${app_name}/*.log",
    rotate       => '30',
    rotate_every => 'day',
    compress     => true,
    copytruncate => true,
    missingok    => true,
    dateext      => true,
  }
  logrotate::rule { "${app_name}-access":
    path         => "/var/log/${app_name}/access/*.log",
    rotate       => '90',
    rotate_every => 'day',
    compress     => true,
    create       => true,
    create_mode  => '0640',
    create_owner => 'www-data',
    create_group => 'adm',
    postrotate   => "/bin/systemctl kill -s HUP ${app_name}.service",
  }
}

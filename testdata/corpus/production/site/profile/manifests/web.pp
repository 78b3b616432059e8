# Apache serving the site's virtual hosts, one per entry in Hiera.
class profile::web (
  Hash $vhosts = {},
  Hash $vhost_defaults = {},
  Stdlib::Absolutepath $docroot_base = '/srv/www',
) {
  class { 'apache':
    default_vhost => false,
    mpm_module    => 'event',
    serveradmin   => "webmaster@${facts['networking']['domain']}",
    server_tokens => 'Prod',
  }
  include apache::mod::status
  include apache::mod::headers

  $vhosts.each |String $site, Hash $v| {
    apache::vhost { $site:
      *       => $vhost_defaults + $v,
      docroot => "${docroot_base}/${site}",
    }
  }

  logrotate::rule { 'apache-sites':
    path          => '/var/log/apache2/*.log',
    rotate        => '14',
    rotate_every  => 'day',
    compress      => true,
    delaycompress => true,
    sharedscripts => true,
    postrotate    => '/usr/sbin/apachectl graceful > /dev/null',
  }
}

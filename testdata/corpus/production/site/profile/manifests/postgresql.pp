# PostgreSQL with the site's databases; shared_buffers is a quarter of the
# memory, and the app network may connect.
class profile::postgresql (
  String $version,
  Hash $databases = {},
  Array[String] $client_networks = [],
) {
  class { 'postgresql::globals':
    version             => $version,
    manage_package_repo => false,
    encoding            => 'UTF8',
    locale              => 'en_US.UTF-8',
  }
  class { 'postgresql::server':
    listen_addresses => "localhost,${facts['networking']['ip']}",
    ipv4acls         => $client_networks.map |$net| { "host all all ${net} scram-sha-256" },
  }

  $shared_buffers_mb = Integer($facts['memorysize_mb'] / 4)
  postgresql::server::config_entry { 'shared_buffers':
    value => "${shared_buffers_mb}MB",
  }
  postgresql::server::config_entry { 'max_connections':
    value => 200,
  }

  $databases.each |String $db, Hash $d| {
    postgresql::server::db { $db:
      user     => $d['user'],
      password => postgresql::postgresql_password($d['user'], $d['password']),
    }
  }
}

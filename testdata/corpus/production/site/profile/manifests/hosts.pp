# /etc/hosts: this node under all its names, and the site's fixed hosts
# from Hiera.
class profile::hosts (
  Hash $entries = {},
) {
  $fqdn_name = $facts['networking']['fqdn']
  host { $fqdn_name:
    ensure       => present,
    ip           => $facts['networking']['ip'],
    host_aliases => [$facts['networking']['hostname']],
  }
  host { 'localhost':
    ensure       => present,
    ip           => '127.0.0.1',
    host_aliases => ['localhost.localdomain'],
  }

  # Every other addressed interface gets a name of its own.
  $facts['networking']['interfaces'].each |String $ifname, Hash $iface| {
    if $ifname != 'lo' and $ifname != $facts['networking']['primary'] and $iface['ip'] {
      host { "${hostname}-${ifname}.${facts['networking']['domain']}":
        ip => $iface['ip'],
      }
    }
  }

  create_resources('host', delete($entries, $fqdn_name))
}

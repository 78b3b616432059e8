# A small inventory record other tools read (CMDB sync, the backup server's
# job list): a few chosen facts, as JSON and as YAML.
class profile::inventory (
  Hash $extra = {},
) {
  $os = $facts['os']
  $codename = dig($os, 'distro', 'codename')
  $record = merge({
    'certname' => $trusted['certname'],
    'fqdn'     => $facts['networking']['fqdn'],
    'domain'   => $domain,
    'role'     => $facts['role'],
    'os'       => "${os['name']} ${os['release']['full']} (${codename})",
    'cpus'     => $facts['processors']['count'],
    'memory'   => $facts['memory']['system']['total'],
    'kernel'   => $::kernelrelease,
    'timezone' => pick($facts['timezone'], 'UTC'),
  }, $extra)

  file { '/etc/inventory':
    ensure => directory,
    mode   => '0755',
  }
  file { '/etc/inventory/node.json':
    ensure  => file,
    mode    => '0644',
    content => to_json_pretty($record),
  }
  file { '/etc/inventory/node.yaml':
    ensure  => file,
    mode    => '0644',
    content => to_yaml(delete($record, ['certname'])),
  }
  # The release, field by field, for the CMDB's shell importer; the distro
  # entry with defaults for what older facter versions leave out.
  $release = $facts['os']['release'].map |$k, $v| { "os_release_${k}=${v}" }
  $distro = { 'id' => 'unknown', 'codename' => 'unknown' } + $facts['os']['distro']
  file { '/etc/inventory/os.env':
    ensure  => file,
    mode    => '0644',
    content => "${join($release, "\n")}\nos_distro=${distro['id']} ${distro['codename']}\n",
  }

  $virtual = defined('$is_virtual') ? {
    true    => $is_virtual,
    default => !empty($facts['hypervisors']),
  }
  if $virtual {
    file { '/etc/inventory/virtual':
      ensure  => file,
      content => "${join(keys($facts['hypervisors']), ',')}\n",
    }
  }
}

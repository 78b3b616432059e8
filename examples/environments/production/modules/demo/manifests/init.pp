# @summary Files that show what a compile farm catalog carries.
#
# Everything lives under one base directory: $root (Hiera: demo::root,
# /tmp/compilefarm-demo), or the node's cf_root fact when it has one, so a
# test agent can run with FACTER_cf_root=/some/tmp/dir. With the facts
# cf_export_ip and cf_collect_hosts, nodes export host entries and collect
# them into ${base}/hosts.
#
# @param role     The node's role, shown in role.txt.
# @param root     The base directory when the node has no cf_root fact.
# @param greeting Shown in motd.txt and role.txt (Hiera, per role).
# @param features Listed in role.txt (Hiera).
class demo (
  String[1] $role = 'base',
  Pattern[/\A\/./] $root = '/tmp/compilefarm-demo',
  String[1] $greeting = 'Hello',
  Array[String[1]] $features = [],
) {
  $base = $facts['cf_root'] ? {
    Pattern[/\A\/./] => regsubst($facts['cf_root'], '/+\z', ''),
    default          => regsubst($root, '/+\z', ''),
  }

  file { $base:
    ensure => directory,
    mode   => '0755',
  }

  # A static file served by the farm's content service.
  file { "${base}/static.txt":
    ensure => file,
    source => 'puppet:///modules/demo/static.txt',
    mode   => '0644',
  }

  # A recursive directory copy.
  file { "${base}/tree":
    ensure  => directory,
    source  => 'puppet:///modules/demo/tree',
    recurse => true,
  }

  # ERB: reads facts and class variables.
  file { "${base}/motd.txt":
    ensure  => file,
    mode    => '0644',
    content => template('demo/motd.erb'),
  }

  # EPP: takes typed parameters.
  file { "${base}/role.txt":
    ensure  => file,
    mode    => '0644',
    content => epp('demo/role.epp', {
      'role'     => $role,
      'greeting' => $greeting,
      'features' => $features,
    }),
  }

  # Facts that reach the node through pluginsync (a custom fact from
  # lib/facter and an external fact from facts.d).
  $plugin_fact = $facts['cf_demo_plugin'] ? {
    String  => $facts['cf_demo_plugin'],
    default => 'absent',
  }
  $external_fact = $facts['cf_demo_external'] ? {
    String  => $facts['cf_demo_external'],
    default => 'absent',
  }
  file { "${base}/facts.txt":
    ensure  => file,
    mode    => '0644',
    content => "custom fact cf_demo_plugin: ${plugin_fact}\nexternal fact cf_demo_external: ${external_fact}\n",
  }

  # Exported resources, which the farm keeps in place of PuppetDB. A node
  # with the fact cf_export_ip exports its host entry; a node whose
  # cf_collect_hosts fact is 'true' collects the entries every node exports
  # (its own too) into ${base}/hosts, never /etc/hosts. Nodes without these
  # facts are unaffected. (The host type comes with this module: see
  # lib/puppet/type/host.rb.)
  $export_ip = $facts['cf_export_ip']
  if $export_ip =~ String[1] {
    @@host { $trusted['certname']:
      ip  => $export_ip,
      tag => 'cf_demo',
    }
  }
  if $facts['cf_collect_hosts'] in [true, 'true'] {
    file { "${base}/hosts":
      ensure => file,
      mode   => '0644',
    }
    File["${base}/hosts"] -> Host <<| tag == 'cf_demo' |>> {
      target => "${base}/hosts",
    }
  }
}

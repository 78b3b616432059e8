# What PuppetDB keeps of a catalog and of a run, each once: resource
# defaults, a directory and files (content from a template, a source from
# the module), a contained class with every kind of relationship (require,
# before, notify, subscribe, ->, ~>), a defined type, a virtual resource
# realized, exported resources (one the node collects itself, one nobody
# collects), a notify on the first run only, and an exec that fails until
# the test creates ${root}/fixed, with a file that needs it (skipped
# meanwhile).
class reference (
  String $root = $facts['cf_root'],
  String $role = $facts['cf_role'],
) {
  File {
    mode => '0644',
  }

  file { $root:
    ensure => directory,
  }

  file { "${root}/motd":
    ensure  => file,
    content => epp('reference/motd.epp', { 'role' => $role, 'os' => $facts['os'] }),
  }

  file { "${root}/static.txt":
    ensure => file,
    source => 'puppet:///modules/reference/static.txt',
  }

  class { 'reference::service':
    role => $role,
  }
  contain reference::service

  File["${root}/motd"] -> Class['reference::service']

  reference::member { 'self':
    address => $facts['networking']['ip'],
  }

  @@reference::member { "exported-${trusted['certname']}":
    address => $facts['networking']['ip'],
    owner   => $trusted['certname'],
    tag     => ['reference_export'],
  }
  @@file { "${root}/never-collected":
    ensure  => file,
    content => "exported by ${trusted['certname']}\n",
    tag     => ['reference_uncollected'],
  }
  Reference::Member <<| owner == $trusted['certname'] |>>

  @file { "${root}/virtual":
    ensure  => file,
    content => "realized\n",
  }
  realize(File["${root}/virtual"])

  exec { 'check-fixed':
    command => "/bin/sh -c 'echo not fixed yet >&2; exit 3'",
    unless  => "/usr/bin/test -f ${root}/fixed",
    require => File[$root],
  }
  file { "${root}/after-check":
    ensure  => file,
    content => "checked\n",
    require => Exec['check-fixed'],
  }

  if $role == 'web' {
    notify { 'first role':
      message => "role ${role} with ${facts['processors']['count']} processors",
    }
  }
}

# @summary One operator account: group, user, home and authorized keys.
#
# @param uid  User and group id.
# @param home Home directory.
define bench::account (
  Integer $uid,
  String[1] $home,
) {
  group { $title:
    ensure => present,
    gid    => $uid,
  }

  user { $title:
    ensure     => present,
    uid        => $uid,
    gid        => $uid,
    home       => $home,
    shell      => '/bin/bash',
    comment    => "Operator ${title}",
    managehome => false,
    require    => Group[$title],
  }

  file { [$home, "${home}/.ssh"]:
    ensure => directory,
    owner  => $title,
    group  => $title,
    mode   => '0700',
  }

  $key = sprintf('AAAAC3NzaC1lZDI1NTE5AAAAI%040x', $uid * 7919)
  file { "${home}/.ssh/authorized_keys":
    ensure  => file,
    owner   => $title,
    group   => $title,
    mode    => '0600',
    content => "# Managed by Puppet (bench::account)\nssh-ed25519 ${key} ${title}@bench\n",
  }
}

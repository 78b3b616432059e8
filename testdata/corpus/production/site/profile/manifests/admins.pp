# The admins' accounts and keys, and the host keys of the machines the
# admins' tools connect to.
class profile::admins (
  Hash $users = {},
  Hash $known_hosts = {},
) {
  $users.each |String $user, Hash $u| {
    user { $user:
      ensure     => present,
      uid        => $u['uid'],
      groups     => pick($u['groups'], ['sudo']),
      shell      => pick($u['shell'], '/bin/bash'),
      managehome => true,
    }
    ssh_authorized_key { "${user}@${u['key_comment']}":
      ensure => present,
      user   => $user,
      type   => $u['key_type'],
      key    => $u['key'],
    }
  }
  notice("${size($users)} admin accounts: ${join(keys($users), ', ')}")

  create_resources('sshkey', $known_hosts, { 'ensure' => 'present', 'target' => '/etc/ssh/ssh_known_hosts' })
}

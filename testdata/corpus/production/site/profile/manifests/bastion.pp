# The jump host: sshd listens on its address only, with tighter options
# (added in data/roles/bastion.yaml), everyone else is firewalled off, and
# the admins' keys are installed for the jump account.
class profile::bastion (
  Hash $jump_keys = {},
) {
  include profile::firewall
  firewall { '100 ssh from anywhere':
    dport       => 22,
    proto       => 'tcp',
    destination => $::ipaddress,
    action      => 'accept',
  }

  user { 'jump':
    ensure     => present,
    shell      => '/bin/bash',
    managehome => true,
  }
  $jump_keys.each |String $name, Hash $k| {
    ssh_authorized_key { "jump-${name}":
      user    => 'jump',
      type    => $k['type'],
      key     => $k['key'],
      options => ['no-X11-forwarding', 'no-agent-forwarding'],
    }
  }
}

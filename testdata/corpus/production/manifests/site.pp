# Every node gets its role from the external fact "role"
# (/etc/facter/facts.d/role.txt, written when the node is provisioned).
node default {
  # saz-rsyslog 2.2.1 (Debian's) renders rsyslog.conf from rsyslog::config
  # with @modules, a parameter of class rsyslog: it relied on Puppet 2.7's
  # dynamic scoping. Classes still see node-scope variables, so the list
  # lives here.
  $modules = [
    '$ModLoad imuxsock # provides support for local system logging',
    '$ModLoad imklog   # provides kernel logging support',
  ]

  $node_role = $facts['role']
  if $node_role =~ String[1] and $node_role =~ /\A[a-z][a-z0-9_]*\z/ {
    include "role::${node_role}"
  } else {
    fail("${trusted['certname']} has no usable role fact (got '${node_role}')")
  }
}

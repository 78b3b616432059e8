# @summary Picks the node's role: the pp_role extension of its certificate
# (csr_attributes.yaml's extension_requests, signed into the certificate),
# else its cf_role fact.
#
# A node with neither, or with a role that has no class, gets role::base.
#
# @param default_role The role of nodes without a usable pp_role or cf_role.
class role (
  String[1] $default_role = 'base',
) {
  $requested = $trusted['extensions']['pp_role'] ? {
    String[1] => $trusted['extensions']['pp_role'],
    default   => $facts['cf_role'],
  }
  $wanted = $requested ? {
    Pattern[/\A[a-z][a-z0-9_]*\z/] => $requested,
    default                         => $default_role,
  }
  $selected = defined("role::${wanted}") ? {
    true    => $wanted,
    default => $default_role,
  }
  include "role::${selected}"
}

# @summary Picks the node's role from its cf_role fact.
#
# A node without the fact, or with a role that has no class, gets role::base.
#
# @param default_role The role of nodes without a usable cf_role fact.
class role (
  String[1] $default_role = 'base',
) {
  $wanted = $facts['cf_role'] ? {
    Pattern[/\A[a-z][a-z0-9_]*\z/] => $facts['cf_role'],
    default                         => $default_role,
  }
  $selected = defined("role::${wanted}") ? {
    true    => $wanted,
    default => $default_role,
  }
  include "role::${selected}"
}

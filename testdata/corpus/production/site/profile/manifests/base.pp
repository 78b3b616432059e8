# What every node gets, whatever its role.
class profile::base {
  include profile::apt
  include profile::ssh
  include profile::time
  include profile::logging
  include profile::hosts
  include profile::admins
  include profile::motd
  include profile::inventory
  include profile::housekeeping
}

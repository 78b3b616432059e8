# Local Debian mirror served over rsync.
class role::mirror {
  include profile::base
  include profile::mirror
}

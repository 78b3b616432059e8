# SSH jump host: the only way in from the outside.
class role::bastion {
  include profile::base
  include profile::bastion
}

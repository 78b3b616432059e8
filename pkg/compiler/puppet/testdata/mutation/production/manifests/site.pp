node default {
  include profile::base
}

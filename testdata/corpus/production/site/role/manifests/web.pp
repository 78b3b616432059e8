# Public web server: Apache with the site's virtual hosts.
class role::web {
  include profile::base
  include profile::web
}

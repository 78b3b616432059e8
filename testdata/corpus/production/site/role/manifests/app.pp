# Application server: the app behind a local Apache reverse proxy.
class role::app {
  include profile::base
  include profile::app
}

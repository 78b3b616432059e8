# Central syslog server.
class role::log_server {
  include profile::base
  include profile::log_server
}

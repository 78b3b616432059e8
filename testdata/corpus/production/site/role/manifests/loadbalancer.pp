# HAProxy in front of the web servers.
class role::loadbalancer {
  include profile::base
  include profile::haproxy
}

# Metrics collection (collectd server).
class role::monitoring {
  include profile::base
  include profile::monitoring
}

# collectd: the usual system plugins on the node's own interfaces, and a
# network server the other nodes send their metrics to.
class profile::monitoring (
  Stdlib::Port $port = 25826,
) {
  class { 'collectd':
    manage_repo     => false,
    # Name the node in collectd.conf instead of resolving it at start.
    fqdnlookup      => false,
    purge           => true,
    recurse         => true,
    purge_config    => true,
    minimum_version => '5.12',
  }
  include collectd::plugin::cpu
  include collectd::plugin::load
  include collectd::plugin::memory
  include collectd::plugin::swap
  include collectd::plugin::uptime
  class { 'collectd::plugin::df':
    mountpoints    => ['/', '/srv'],
    ignoreselected => false,
  }
  $ifaces = $facts['networking']['interfaces'].keys.filter |$i| { $i != 'lo' }
  class { 'collectd::plugin::interface':
    interfaces     => $ifaces,
    ignoreselected => false,
  }
  class { 'collectd::plugin::network':
    listeners => {
      $facts['networking']['ip'] => { 'port' => $port },
    },
  }
  class { 'collectd::plugin::rrdtool':
    datadir => '/srv/collectd/rrd',
  }
}

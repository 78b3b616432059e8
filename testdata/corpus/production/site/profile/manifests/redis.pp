# Redis for sessions: bound to the private address, no persistence to
# speak of.
class profile::redis (
  String $maxmemory = '1gb',
) {
  class { 'redis':
    bind             => "127.0.0.1 ${facts['networking']['ip']}",
    maxmemory        => $maxmemory,
    maxmemory_policy => 'allkeys-lru',
    save_db_to_disk  => false,
    manage_repo      => false,
    # Debian's unit sets LimitNOFILE; the module would set it with augeas,
    # a type Debian's Puppet 7 does not ship.
    ulimit           => false,
  }
}

# memcached for the web tier: half the memory, listening on the private
# address.
class profile::memcached {
  class { 'memcached':
    max_memory      => '50%',
    listen_ip       => $facts['networking']['ip'],
    max_connections => 4096,
  }
}

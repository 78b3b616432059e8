# Shared caches: memcached for the web tier, Redis for sessions.
class role::cache {
  include profile::base
  include profile::memcached
  include profile::redis
}

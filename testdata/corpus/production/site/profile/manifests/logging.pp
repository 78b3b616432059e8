# rsyslog: forward everything to the log server; rotate the local logs
# the site adds (logrotate rules from Hiera).
class profile::logging (
  String $server,
  Boolean $forward = true,
  String $port = '514',
  Hash $rules = {},
) {
  if $forward {
    class { 'rsyslog::client':
      server        => $server,
      port          => $port,
      remote_type   => 'tcp',
      log_local     => true,
      # The module compares with '' to pick its own template; undef does
      # not match '' under Puppet 4 and later.
      custom_config => '',
    }
  } else {
    include rsyslog
  }

  create_resources('logrotate::rule', $rules)
}

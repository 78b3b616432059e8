# MariaDB (Debian's MySQL) with the site's databases. The buffer pool
# gets 60% of the memory.
class profile::mysql (
  Hash $databases = {},
  String $root_password = 'change-me',
) {
  $total_mb = $facts['memory']['system']['total_bytes'] / (1024 * 1024)
  $buffer_pool_mb = Integer($total_mb * 0.6)

  class { 'mysql::server':
    root_password           => $root_password,
    remove_default_accounts => true,
    override_options        => {
      'mysqld' => {
        'bind-address'            => '0.0.0.0',
        'server-id'               => $facts['mysql_server_id'],
        'innodb_buffer_pool_size' => "${buffer_pool_mb}M",
        'max_connections'         => 300,
        'log-bin'                 => 'mysql-bin',
      },
    },
  }
  create_resources('mysql::db', $databases, { 'charset' => 'utf8mb4', 'collate' => 'utf8mb4_unicode_ci' })
}

# MySQL database server.
class role::db_mysql {
  include profile::base
  include profile::mysql
}

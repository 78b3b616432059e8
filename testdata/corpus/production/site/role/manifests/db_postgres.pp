# PostgreSQL database server.
class role::db_postgres {
  include profile::base
  include profile::postgresql
}

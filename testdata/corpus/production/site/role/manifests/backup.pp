# Backup server: pulls the other nodes' data with rsync every night.
class role::backup {
  include profile::base
  include profile::backup
}

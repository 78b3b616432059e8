# Site NTP server (chrony) that the other nodes sync from.
class role::ntp_server {
  include profile::base
  include profile::ntp_server
}

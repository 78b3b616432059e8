# Time sync: every node but the NTP servers themselves is an ntpd client of
# the site's NTP servers.
class profile::time (
  Array[String] $servers,
  Boolean $client = true,
) {
  if $client {
    class { 'ntp':
      servers    => $servers,
      restrict   => [
        'default kod nomodify notrap nopeer noquery',
        '-6 default kod nomodify notrap nopeer noquery',
        '127.0.0.1',
        '-6 ::1',
      ],
      # A client has no business answering on other addresses.
      interfaces => ['127.0.0.1', $::ipaddress],
    }
  }
}

# The site's NTP server: chrony syncing from the pool and serving the
# networks this node is on (and the ones listed in Hiera).
class profile::ntp_server (
  Hash[String, Array[String]] $upstream,
  Array[String] $extra_networks = [],
) {
  $local_networks = $facts['networking']['interfaces'].filter |$name, $iface| {
    $name != 'lo' and $iface['network'] != undef
  }.map |$name, $iface| {
    "${iface['network']}/24"
  }

  class { 'chrony':
    servers       => $upstream,
    queryhosts    => $local_networks + $extra_networks,
    port          => 123,
    local_stratum => 10,
  }
}

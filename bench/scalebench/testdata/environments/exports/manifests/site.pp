# Each node exports its own host entry, a hosts file fragment with its
# certname, IP address and host name, and collects the entries of the nodes
# of its "rack": the 16 addresses of its /28 (scalebench numbers nodes
# consecutively in 10.0.0.0/8, and a changed address keeps the rack). Every
# node exports File and collects File: the farm finds exporters and
# collectors by type, so a changed entry queues every collector, and each
# collector's compile is given every exported File; Puppet keeps the rack's.
node default {
  $ip = $facts['networking']['ip']
  $host = $facts['networking']['hostname']
  $octets = split($ip, '[.]')
  $rack = "${octets[2]}_${Integer($octets[3]) / 16}"
  @@file { "/etc/scalebench-hosts.d/${trusted['certname']}":
    ensure  => file,
    content => "${ip} ${trusted['certname']} ${host}\n",
    tag     => ['scalebench', "scalebench_rack_${rack}"],
  }
  File <<| tag == "scalebench_rack_${rack}" |>>
}

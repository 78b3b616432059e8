# A member of something, as a load balancer's list would hold it. Its file
# holds only the address: the same on both sides' nodes, so the events'
# content digests are too.
define reference::member (
  String $address,
  String $owner = 'none',
) {
  file { "${reference::root}/member-${title}":
    ensure  => file,
    content => "${address}\n",
  }
}

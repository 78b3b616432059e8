# A service's files and its reload: notify, subscribe, before and ~>.
class reference::service (
  String $role,
) {
  $root = $reference::root

  file { "${root}/service.conf":
    ensure  => file,
    content => "role=${role}\n",
    notify  => Exec['reload-service'],
  }
  file { "${root}/service.state":
    ensure    => file,
    content   => "managed\n",
    subscribe => File["${root}/service.conf"],
    before    => Exec['reload-service'],
  }
  exec { 'reload-service':
    command     => '/bin/true',
    refreshonly => true,
  }
  exec { 'reloaded':
    command     => '/bin/true',
    refreshonly => true,
  }
  Exec['reload-service'] ~> Exec['reloaded']
}

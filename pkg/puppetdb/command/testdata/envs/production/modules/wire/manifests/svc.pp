# A defined type that nodes export and collect.
define wire::svc(Integer $port = 80) {
  notify { "svc ${title}": message => "${title}:${port}" }
}

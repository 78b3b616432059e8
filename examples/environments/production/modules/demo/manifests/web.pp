# @summary A static site under the demo base directory (role web).
#
# @param port Shown on the page (Hiera: demo::web::port).
class demo::web (
  Integer[1, 65535] $port = 80,
) {
  require demo

  file { "${demo::base}/www":
    ensure => directory,
    mode   => '0755',
  }

  file { "${demo::base}/www/index.html":
    ensure  => file,
    mode    => '0644',
    content => epp('demo/index.html.epp', {
      'greeting' => $demo::greeting,
      'port'     => $port,
    }),
  }
}

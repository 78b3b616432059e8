# @summary The web role: the demo files plus a static site.
class role::web {
  class { 'demo':
    role => 'web',
  }
  include demo::web
}

# @summary The base role: the demo files.
class role::base {
  class { 'demo':
    role => 'base',
  }
}

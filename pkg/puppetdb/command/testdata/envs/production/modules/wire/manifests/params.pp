# A class with rich parameters.
class wire::params(Hash $settings) {
  notify { 'params': message => $settings }
}

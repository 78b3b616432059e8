# Nodes that make the compile fail, or the worker misbehave, in one way each.
node 'ok.example.test' {
  notify { 'ok': message => "hello ${trusted['certname']} from ${server_facts['environment']}" }
}
node 'fail.example.test' {
  fail('deliberate failure')
}
node 'unknown-class.example.test' {
  include no_such_class
}
node 'ruby-error.example.test' {
  $x = behave::raise('from a ruby function')
}
node 'crash.example.test' {
  $x = behave::crash()
}
node 'hang.example.test' {
  $x = behave::hang()
}
node 'exported.example.test' {
  @@notify { 'exported': }
  @notify { 'virtual': }
  notify { 'real': }
}
node default {
  notify { "default node ${trusted['certname']}": }
}

# The reference test's catalogs (see ../../../reference_test.go): every
# construct the catalog terminus treats specially, compiled by the farm's
# engine and by Puppet itself.

# Top scope: contained by Class[main].
@@notify { "top ${trusted['certname']}": message => 'exported at top scope' }

# The reference test's node, and the PuppetDB test's (a name of its own
# each run).
node /^wire-exports(-[0-9a-f]+)?\.test$/ {
  include wire::exporter
  class { 'wire::params':
    settings => { 'a' => [1, 2.5, true], 'b' => undef, 'c' => { 'd' => 'e' } },
  }
  stage { 'pre': before => Stage['main'] }
  class { 'wire::early': stage => 'pre' }

  wire::svc { 'local': port => 1 }
  @@wire::svc { "remote-${trusted['certname']}": port => 8080, tag => ['web', 'Svc'] }

  file { 'motd': path => '/etc/motd', content => 'hi', before => Notify['n1'] }
  file { '/tmp/wire/': ensure => directory }
  file { '/tmp/wire/a': ensure => file, require => File['/tmp/wire//'] }
  notify { 'n1':
    message => 'x',
    require => [File['/tmp/wire'], File['motd']],
    tag     => ['zeta', 'alpha'],
    alias   => ['n1-alias', 'another'],
  }
  notify { 'n2': message => Sensitive('secret'), subscribe => File['/etc/motd'] }
  notify { 'n3': require => Notify['n1-alias'], notify => [Notify['n2'], Notify['n1']] }
  notify { 'Not a tag!': name => 'a different name' }
  exec { 'e1': command => '/bin/true', path => '/bin', unless => '/bin/false' }
  package { 'p': ensure => present, name => 'p-real' }
  sshkey { 'host.example.test@ssh-rsa': key => 'AAAA' }
  Notify['n1'] -> Exec['e1'] ~> Notify['n3']

  notify { 'rich':
    message => {
      1         => 'one',
      'list'    => [default, undef, 3.5, 1e20, /re+g\/ex/, Binary('aGVsbG8=')],
      'time'    => Timestamp('2021-01-01T00:00:00Z'),
      'span'    => Timespan(3600),
      'version' => SemVer('1.2.3'),
      'range'   => SemVerRange('>=1.0.0'),
      'uri'     => URI('http://example.com/x'),
      'type'    => Integer[1, 2],
      'opt'     => Optional[String],
      'enum'    => Enum['a', 'b'],
      'later'   => Deferred('join', [[1, 2], ',']),
      'quote'   => Deferred('f', ["it's", "a\\b", "line\nbreak", 1.5, undef, { 'k' => [1, default] }]),
      'inner'   => Sensitive('inner'),
      '__ptype' => 'not rich',
    },
  }

  Notify <<| title == 'mine' |>>
  @@notify { 'mine': message => 'exported and collected by its exporter' }
  @@file { '/tmp/exported/': ensure => directory, mode => '0644' }
  @@host { $trusted['certname']:
    ip           => '10.0.0.1',
    host_aliases => ['b', 'a'],
    comment      => Sensitive('not for PuppetDB'),
  }
  @notify { 'virtual, never realized': }
}

node 'wire-apache.test' {
  class { 'ntp':
    servers => ['0.debian.pool.ntp.org', '1.debian.pool.ntp.org'],
  }
  class { 'apache': }
  apache::vhost { 'demo.example.test':
    port    => 80,
    docroot => '/var/www/demo',
  }
}

node default {
  notify { "default node ${trusted['certname']}": }
}

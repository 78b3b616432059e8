# OpenSSH client and server (saz-ssh). The server and client options come
# from Hiera, merged over every level (the module looks up
# ssh::server_options itself); roles add theirs in data/roles/. Host keys
# are exported and collected into ssh_known_hosts.
class profile::ssh (
  String $banner_text = "Authorized use only.\n",
) {
  include ssh

  file { '/etc/ssh/banner':
    ensure  => file,
    owner   => 'root',
    group   => 'root',
    mode    => '0644',
    content => $banner_text,
    before  => Class['ssh::server::service'],
  }
}

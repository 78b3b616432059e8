# Debian sources: the local mirror for the main archive and the security
# archive (it mirrors both), and the site's own repository.
class profile::apt (
  Hash $sources = {},
  Hash $source_defaults = {},
) {
  class { 'apt':
    purge  => {
      'sources.list'   => true,
      'sources.list.d' => true,
    },
    update => {
      'frequency' => 'daily',
    },
  }

  create_resources('apt::source', $sources, $source_defaults)

  apt::pin { 'site-repository':
    priority => 700,
    origin   => "apt.${facts['networking']['domain']}",
  }
}

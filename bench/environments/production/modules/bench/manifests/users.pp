# @summary Operator accounts, each with a group, a home and an SSH key file.
#
# @param count How many operator accounts.
class bench::users (
  Integer[0] $count = 40,
) {
  $root = $bench::root

  file { "${root}/home":
    ensure => directory,
    mode   => '0755',
  }

  $count.each |Integer $i| {
    $name = sprintf('op%03d', $i)
    bench::account { $name:
      uid  => 2000 + $i,
      home => "${root}/home/${name}",
    }
  }
}

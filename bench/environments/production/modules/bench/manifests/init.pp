# @summary The benchmark profile: base system, users, web sites and
#   monitoring checks: about 600 resources, ~300 KB of catalog JSON.
#
# @param root Directory under which every managed file lives.
class bench (
  Pattern[/\A\//] $root = '/srv/bench',
) {
  contain bench::base
  contain bench::users
  contain bench::web
  contain bench::monitoring

  Class['bench::base'] -> Class['bench::users'] -> Class['bench::web']
  Class['bench::base'] -> Class['bench::monitoring']
}

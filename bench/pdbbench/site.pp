# pdbbench's site manifest (bench/pdbbench, embedded in the command): every
# node gets the benchmark profile (with the herd's counts: ~84 resources),
# and the nodes pdbbench uploads facts for also ask PuppetDB, as manifests
# do with puppetdb_query():
#  - pdbbench_group: the node's group; the node lists its group's members
#    as PuppetDB knows them (one distinct query per group, however many
#    nodes are in it: the refresh-cost phase);
#  - pdbbench_watch: another node's certname; the node writes the value
#    PuppetDB has for that node's pdbbench_value fact (the fact-change
#    phase);
#  - pdbbench_value (and pdbbench_tick): read by the node's own catalog
#    too, as a node's role or address usually is. The farm writes a node's
#    facts, and sends them to PuppetDB, when they change what its own
#    catalog read; other changes wait for its facts refresh (30 minutes in
#    broker dev, --facts-refresh in serve).
# The agents of bench/agentsim have none of these facts and make no query.
node default {
  include bench

  $group = $facts['pdbbench_group']
  if $group {
    $members = puppetdb_query("inventory[certname] { facts.pdbbench_group = '${group}' }").map |$r| { $r['certname'] }
    file { '/srv/bench/pdbbench-members':
      ensure  => file,
      content => "${sort($members).join("\n")}\n",
    }
  }

  $value = $facts['pdbbench_value']
  if $value {
    file { '/srv/bench/pdbbench-value':
      ensure  => file,
      content => "${value} ${facts['pdbbench_tick']}\n",
    }
  }

  $watched = $facts['pdbbench_watch']
  if $watched {
    $values = puppetdb_query("facts[value] { certname = '${watched}' and name = 'pdbbench_value' }").map |$r| { $r['value'] }
    file { '/srv/bench/pdbbench-watched':
      ensure  => file,
      content => "${values.join(',')}\n",
    }
  }
}

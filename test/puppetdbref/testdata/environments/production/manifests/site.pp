# test/puppetdbref's site: the same code runs on Puppet Server and on the
# farm, and PuppetDB must end up holding the same for both.
node default {
  include reference
}

# A custom fact, delivered to agents by pluginsync.
Facter.add(:cf_demo_plugin) do
  setcode { 'pluginsynced' }
end

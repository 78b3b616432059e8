# Kills the Ruby process compiling the catalog, as a segfault would.
Puppet::Functions.create_function(:'behave::crash') do
  def crash
    Process.kill('KILL', Process.pid)
    sleep 60
  end
end

# Never returns, as a function stuck on the network would.
Puppet::Functions.create_function(:'behave::hang') do
  def hang
    sleep 3600
  end
end

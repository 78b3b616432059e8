# Raises a Ruby error, as a buggy custom function would.
Puppet::Functions.create_function(:'behave::raise') do
  dispatch :fail_with do
    param 'String', :msg
  end
  def fail_with(msg)
    raise ArgumentError, msg
  end
end

# frozen_string_literal: true

require 'ipaddr'

# A line of a hosts file, for the demo's exported host entries.
#
# Puppet 7 moved its host type into the puppetlabs-host_core module, which
# Debian's puppet-agent does not include. This is a small type of the same
# name and attributes (ensure, ip, host_aliases, comment, target), so the
# demo compiles and applies with Debian's Puppet alone: agents receive it
# through pluginsync. Where host_core is installed on an agent, its type is
# found first and takes the same attributes.
Puppet::Type.newtype(:host) do
  @doc = 'A host entry: a line "ip name aliases # comment" of a hosts file (target).'

  ensurable

  newparam(:name, namevar: true) do
    desc 'The host name.'

    validate do |value|
      unless value.is_a?(String) && value.match?(/\A[[:alnum:]]([[:alnum:]._-]*[[:alnum:]])?\z/)
        raise ArgumentError, "Invalid host name #{value.inspect}"
      end
    end
  end

  newproperty(:ip) do
    desc 'The IPv4 or IPv6 address.'

    validate do |value|
      valid = value.is_a?(String) && !value.include?('/') &&
              begin
                IPAddr.new(value)
              rescue ArgumentError
                false
              end
      raise ArgumentError, "Invalid IP address #{value.inspect}" unless valid
    end
  end

  newproperty(:host_aliases, array_matching: :all) do
    desc 'Other names of the host.'

    validate do |value|
      raise ArgumentError, "Invalid host alias #{value.inspect}" unless value.is_a?(String) && value.match?(/\A[^\s#]+\z/)
    end

    def is_to_s(value) # rubocop:disable Naming/PredicateName
      Array(value).join(' ')
    end

    def should_to_s(value)
      Array(value).join(' ')
    end
  end

  newproperty(:comment) do
    desc 'A comment after the entry.'

    validate do |value|
      raise ArgumentError, 'A host comment is one line' if value.to_s.include?("\n")
    end
  end

  newproperty(:target) do
    desc 'The hosts file. Default: the provider default target (/etc/hosts).'

    defaultto do
      provider = @resource.class.defaultprovider
      provider.default_target if provider.respond_to?(:default_target)
    end

    validate do |value|
      raise ArgumentError, "A hosts file must be an absolute path, not #{value.inspect}" unless Puppet::Util.absolute_path?(value.to_s)
    end
  end
end

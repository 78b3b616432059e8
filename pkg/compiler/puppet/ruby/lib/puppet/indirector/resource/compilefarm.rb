# frozen_string_literal: true

require 'puppet/indirector/code'

# The storeconfigs backend for exported resources (see
# lib/compilefarm/exports.rb). It lives where Puppet's autoloader looks for
# the terminus named by storeconfigs_backend: the worker puts lib on
# $LOAD_PATH and never requires this file itself.
class Puppet::Resource::Compilefarm < Puppet::Indirector::Code
  desc 'Exported resources of the other nodes, from the compile farm request (in place of PuppetDB).'

  def search(request)
    ctx = $cf_exports
    raise Puppet::Error, 'Exported resources can only be collected while the compile farm compiles a catalog' unless ctx

    scope = request.options[:scope]
    ctx.search(request.key.to_s, request.options[:host].to_s, request.options[:filter]).map do |res|
      raw = res['parameters'] || {}
      values = raw.empty? ? {} : Puppet::Pops::Serialization::FromDataConverter.convert(raw)
      params = values.map { |name, value| Puppet::Parser::Resource::Param.new(name: name, value: value) }
      t = res['type']
      t = Puppet::Pops::Evaluator::Runtime3ResourceSupport.find_resource_type(scope, t) unless %w[class node].include?(t.downcase)
      result = Puppet::Parser::Resource.new(t, res['title'], { parameters: params, scope: scope })
      result.collector_id = "#{res['certname']}|#{res['type']}|#{res['title']}"
      result
    end
  end

  def find(_request)
    nil
  end

  def save(request)
    raise Puppet::Error, "The compile farm does not store resources (#{request.key})"
  end

  def destroy(request)
    raise Puppet::Error, "The compile farm does not store resources (#{request.key})"
  end
end

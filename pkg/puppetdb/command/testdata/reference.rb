# frozen_string_literal: true
#
# The reference for pkg/puppetdb/command's tests: what Puppet Server 7 with
# puppet-terminus-puppetdb sends PuppetDB for the same input, computed by
# the termini themselves (Puppet::Node::Facts::Puppetdb#save,
# Puppet::Resource::Catalog::Puppetdb#save, the puppetdb report
# processor), with only the HTTP submission replaced: each command's payload
# is taken from Puppet::Util::Puppetdb::Command, as it would be posted.
#
# Protocol: one JSON request per line on stdin, one JSON answer per line on
# stdout ({"payload":"<the command's body>"} or {"error":"..."}).
#   {"facts":"<facts document as the agent sent it, Base64>","certname":"n",
#    "extensions":{...},"environment":"production"}
#   {"report":"<report as the agent sent it, Base64>"}
#   {"catalog":{"envpath":"/dir","environment":"production","certname":"n",
#    "facts":{...},"extensions":{...},"code_id":"c","transaction_uuid":"t",
#    "job_id":"j"}}
#     compiles the catalog as Puppet Server's catalog endpoint does and
#     saves it (unfiltered) to the PuppetDB terminus.
#   {"types":["<module>/lib",...]}
#     answers, as its payload, what add_namevar_aliases asks of each
#     resource type of Puppet and of the modules: {"file":{"key_attributes":
#     ["path"],"isomorphic":true},...}
#
# Usage: ruby reference.rb WORKDIR

require 'json'
require 'base64'
require 'fileutils'

PROTO = IO.new(STDOUT.fileno).dup
PROTO.sync = true
STDOUT.reopen(STDERR)
$stdout = STDERR
Encoding.default_external = Encoding::UTF_8
STDIN.set_encoding(Encoding::BINARY)

require 'puppet'
require 'puppet/indirector/facts/puppetdb'
require 'puppet/indirector/catalog/puppetdb'
require 'puppet/reports'

workdir = File.expand_path(ARGV[0] || abort('usage: reference.rb WORKDIR'))
dirs = %w[conf var code log run].to_h { |d| [d, File.join(workdir, d)] }
dirs.each_value { |d| FileUtils.mkdir_p(d) }
empty_envs = File.join(dirs['code'], 'environments')
FileUtils.mkdir_p(empty_envs)
Puppet.settings.preferred_run_mode = :server
Puppet.initialize_settings(['--confdir', dirs['conf'], '--vardir', dirs['var'], '--codedir', dirs['code'],
                            '--logdir', dirs['log'], '--rundir', dirs['run'], '--environmentpath', empty_envs,
                            '--node_name_value', 'reference.producer.test'])
Puppet::Util::Log.close_all
Puppet::Util::Log.newdestination(:console)
Puppet::Util::Log.level = :err
Puppet::ApplicationSupport.push_application_context(Puppet::Util::RunMode[:server], :not_required)

# Captures the command a terminus would submit instead of posting it.
module Capture
  attr_reader :captured

  def submit_command(certname, command_name, version, producer_timestamp_utc)
    @captured = Puppet::Util::Puppetdb::Command.new(command_name, version, certname, producer_timestamp_utc, yield)
    nil
  end

  def submit_catalog_commands(certname, name, version, inputs_name, inputs_version, producer_timestamp_utc, &block)
    @captured, = generate_commands(certname, name, version, inputs_name, inputs_version, producer_timestamp_utc, &block)
    nil
  end
end

def trusted(certname, extensions)
  Puppet::Context::TrustedInformation.new('remote', certname, extensions || {}, {})
end

def utf8(s)
  s.dup.force_encoding(Encoding::UTF_8)
end

def facts_payload(req)
  certname = req['certname']
  facts = Puppet::Node::Facts.convert_from('json', utf8(Base64.strict_decode64(req['facts'])))
  terminus = Puppet::Node::Facts::Puppetdb.new.extend(Capture)
  env = Puppet::Node::Environment.remote(req['environment'])
  request = Puppet::Indirector::Request.new(:facts, :save, certname, facts, environment: env)
  Puppet.override(trusted_information: trusted(certname, req['extensions'])) { terminus.save(request) }
  terminus.captured.payload
end

def report_payload(req)
  report = Puppet::Transaction::Report.convert_from('json', utf8(Base64.strict_decode64(req['report'])))
  report.extend(Puppet::Reports.report(:puppetdb)).extend(Capture)
  report.process
  report.captured.payload
end

def catalog_payload(req)
  certname = req['certname']
  loader = Puppet::Environments::Directories.new(req['envpath'], [])
  Puppet.override(environments: loader, trusted_information: trusted(certname, req['extensions'])) do
    env = loader.get(req['environment']) or raise "no environment #{req['environment']}"
    Puppet.override(current_environment: env) do
      facts = Puppet::Node::Facts.from_data_hash({ 'name' => certname, 'values' => req['facts'] || {} })
      node = Puppet::Node.new(certname, environment: env)
      node.fact_merge(facts)
      node.trusted_data = Puppet.lookup(:trusted_information).to_h
      catalog = Puppet::Parser::Compiler.compile(node, req['code_id'])
      terminus = Puppet::Resource::Catalog::Puppetdb.new.extend(Capture)
      request = Puppet::Indirector::Request.new(:catalog, :save, certname, catalog, environment: env,
                                                transaction_uuid: req['transaction_uuid'], job_id: req['job_id'])
      terminus.save(request)
      terminus.captured.payload
    end
  end
end

def types_payload(libs)
  libs.each { |d| $LOAD_PATH.unshift(d) }
  # Puppet's own types are in puppet/type, beside puppet/metatype.
  dirs = [File.join(File.dirname(Puppet::Type.method(:type).source_location[0]), '..', 'type')] +
         libs.map { |d| File.join(d, 'puppet', 'type') }
  names = dirs.flat_map { |d| Dir.glob(File.join(d, '*.rb')) }.map { |f| File.basename(f, '.rb') }.uniq.sort
  names.to_h do |n|
    t = Puppet::Type.type(n.to_sym) or raise "type #{n} does not load"
    [n, { 'key_attributes' => t.key_attributes.map(&:to_s), 'isomorphic' => t.isomorphic? }]
  end.to_json
end

while (line = STDIN.gets)
  next if line.strip.empty?

  begin
    req = JSON.parse(utf8(line))
    payload = if req.key?('facts') && req.key?('certname') && !req.key?('catalog')
                facts_payload(req)
              elsif req.key?('report')
                report_payload(req)
              elsif req.key?('catalog')
                catalog_payload(req['catalog'])
              elsif req.key?('types')
                types_payload(req['types'])
              else
                raise ArgumentError, "unknown request #{req.keys}"
              end
    PROTO.write(JSON.generate({ 'payload' => payload.dup.force_encoding(Encoding::UTF_8).scrub }) << "\n")
  rescue Exception => e # rubocop:disable Lint/RescueException
    PROTO.write(JSON.generate({ 'error' => "#{e.class}: #{e.message}", 'backtrace' => e.backtrace&.first(8) }) << "\n")
  end
end

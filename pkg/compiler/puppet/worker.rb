# frozen_string_literal: true
#
# compilefarm puppet compile worker.
#
# One long-lived process: loads Puppet once, then compiles catalogs on
# request, one at a time, the way Puppet Server's v3 catalog endpoint does
# (Puppet::Resource::Catalog::Compiler#find, rendered as
# application/vnd.puppet.rich+json).
#
# Protocol (one JSON document per line):
#   stdout, once after start-up:
#     {"ready":true,"puppet_version":"7.23.0","ruby_version":"3.1.2","pid":123}
#   stdin, one request per line:
#     {"id":1,"certname":"n1","environment":"production","code_id":"...",
#      "environmentpath":"/dir","facts":{...}}
#   stdout, one response per request:
#     {"id":1,"ok":true,"catalog":{...}}
#     {"id":1,"ok":false,"error":{"kind":"compile","message":"...","file":"...","line":3,"column":1}}
#   "kind" is "compile" (the code failed; retrying cannot help), "invalid"
#   (the request was malformed) or "internal" (the worker failed; it should
#   be restarted).
#   stderr: Puppet's log as JSON lines {"level","msg","source","file","line"},
#   and anything else Ruby prints.
#
# Usage: ruby worker.rb WORKDIR
# WORKDIR holds this worker's confdir, vardir, codedir, logdir and rundir.
# The process exits when stdin is closed.

require 'json'
require 'fileutils'

# Keep stdout for the protocol only: anything else that writes to fd 1
# (puts, C extensions, Puppet's console log) goes to stderr.
PROTO = IO.new(STDOUT.fileno).dup
PROTO.sync = true
PROTO.binmode
STDOUT.reopen(STDERR)
$stdout = STDERR
STDERR.sync = true
# Requests, manifests and templates are UTF-8 whatever the locale says
# (Puppet Server's JRuby runs with UTF-8 too).
Encoding.default_external = Encoding::UTF_8
STDIN.set_encoding(Encoding::UTF_8)

# The certname being compiled, for log lines.
$cf_node = nil

def emit(obj)
  PROTO.write(JSON.generate(obj) << "\n")
end

def emit_raw(line)
  PROTO.write(line << "\n")
end

def log_json(level, msg, extra = {})
  entry = { 'level' => level.to_s, 'msg' => msg.to_s }
  entry['node'] = $cf_node if $cf_node
  STDERR.write(JSON.generate(entry.merge(extra)) << "\n")
rescue StandardError
  nil
end

workdir = ARGV[0] or abort('usage: worker.rb WORKDIR')
workdir = File.expand_path(workdir)

begin
  require 'puppet'
  require 'puppet/pops'
rescue LoadError => e
  log_json(:err, "cannot load puppet: #{e.message}")
  exit 3
end

module CompileFarm
  # Worker compiles catalogs for one process.
  class Worker
    ENV_CACHE_SIZE = 4

    def initialize(workdir)
      @workdir = workdir
      @loaders = {} # environmentpath => Puppet::Environments::Cached, oldest first
      @last_env_key = nil
    end

    def setup
      dirs = {}
      %w[conf var code log run].each do |d|
        dirs[d] = File.join(@workdir, d)
        FileUtils.mkdir_p(dirs[d], mode: 0o750)
      end
      @empty_envpath = File.join(dirs['code'], 'environments')
      @basemodulepath = File.join(dirs['code'], 'modules')
      [@empty_envpath, @basemodulepath].each { |d| FileUtils.mkdir_p(d, mode: 0o750) }

      # As Puppet Server does (Puppet::Server::PuppetConfig): run mode server,
      # settings from "command line" flags. Nothing outside WORKDIR is used:
      # the confdir has no puppet.conf, so no global hiera.yaml either.
      Puppet.settings.preferred_run_mode = :server
      Puppet.initialize_settings([
        '--confdir', dirs['conf'],
        '--vardir', dirs['var'],
        '--codedir', dirs['code'],
        '--logdir', dirs['log'],
        '--rundir', dirs['run'],
        '--publicdir', File.join(dirs['var'], 'public'),
        '--environmentpath', @empty_envpath,
        '--basemodulepath', @basemodulepath,
        '--environment_timeout', 'unlimited',
      ])
      Puppet[:trace] = false
      Puppet[:always_retry_plugins] = false
      app_defaults = Puppet::Settings.app_defaults_for_run_mode(Puppet::Util::RunMode[:server])
                                     .merge({ name: 'server', facts_terminus: 'json' })
      Puppet.settings.initialize_app_defaults(app_defaults)

      Puppet::Util::Log.newdesttype :compilefarm do
        def handle(msg)
          extra = { 'source' => msg.source.to_s }
          extra['file'] = msg.file if msg.file
          extra['line'] = msg.line if msg.line
          log_json(msg.level, msg.message, extra)
        end
      end
      Puppet::Util::Log.close_all
      Puppet::Util::Log.newdestination(:compilefarm)
      Puppet::Util::Log.level = :notice

      Puppet::ApplicationSupport.push_application_context(Puppet::Util::RunMode[:server], :not_required)
      @server_facts = server_facts
    end

    # Puppet::Resource::Catalog::Compiler#set_server_facts
    def server_facts
      facts = { 'serverversion' => Puppet.version.to_s }
      facter = Puppet.runtime[:facter]
      { 'servername' => 'fqdn', 'serverip' => 'ipaddress', 'serverip6' => 'ipaddress6' }.each do |var, fact|
        value = facter.value(fact)
        facts[var] = value unless value.nil?
      end
      if facts['servername'].nil?
        host = facter.value(:hostname)
        domain = facter.value(:domain)
        facts['servername'] = domain ? [host, domain].join('.') : host if host
      end
      facts
    rescue StandardError => e
      log_json(:warning, "could not resolve server facts: #{e.message}")
      { 'serverversion' => Puppet.version.to_s }
    end

    # The environments loader of one environmentpath, kept in a small LRU.
    # A code snapshot's environmentpath never changes, so its environments
    # never expire (environment_timeout unlimited) while the loader is cached.
    def loader_for(envpath)
      loader = @loaders.delete(envpath)
      unless loader
        dirs = Puppet::Environments::Directories.new(envpath, [@basemodulepath])
        loader = Puppet::Environments::Cached.new(dirs)
      end
      @loaders[envpath] = loader
      while @loaders.size > ENV_CACHE_SIZE
        old_path, old = @loaders.first
        @loaders.delete(old_path)
        Puppet.override({ environments: old }, 'evict environments') { old.clear_all }
      end
      loader
    end

    def compile(req)
      certname = req['certname'].to_s
      envname = req['environment'].to_s
      envpath = req['environmentpath'].to_s
      raise BadRequest, 'certname is required' if certname.empty?
      raise BadRequest, 'environment is required' if envname.empty?
      raise BadRequest, 'environmentpath must be an absolute path' unless envpath.start_with?('/')

      loader = loader_for(envpath)
      trusted = Puppet::Context::TrustedInformation.new('remote', certname, {}, {})
      Puppet.override({ environments: loader, trusted_information: trusted }, 'compilefarm compile') do
        # Settings cached per environment name (Puppet.settings.values(env))
        # may belong to another snapshot of an environment of the same name.
        env_key = [envpath, envname]
        if @last_env_key != env_key
          Puppet.settings.clear_environment_settings(envname)
          @last_env_key = env_key
        end

        env = loader.get(envname)
        if env.nil?
          # Puppet::Environments::EnvironmentNotFound, naming the snapshot's path.
          raise Puppet::Error, "Could not find a directory environment named '#{envname}' anywhere in the path: #{envpath}. Does the directory exist?"
        end
        env = env.override_from_commandline(Puppet.settings)

        Puppet.override({ current_environment: env }, 'compilefarm environment') do
          catalog = compile_in(env, loader, certname, req)
          render(catalog, env)
        end
      end
    end

    # Puppet::Resource::Catalog::Compiler#find and #compile, with the node
    # the plain node terminus would return.
    def compile_in(env, loader, certname, req)
      values = req['facts'].is_a?(Hash) ? req['facts'] : {}
      facts = Puppet::Node::Facts.from_data_hash({ 'name' => certname, 'values' => values })
      node = Puppet::Node.new(certname, environment: env)
      node.fact_merge(facts)
      node.add_server_facts(@server_facts)
      node.trusted_data = Puppet.lookup(:trusted_information).to_h

      catalog = nil
      env.with_text_domain do
        loader.guard(env.name)
        begin
          code_id = req['code_id'].to_s
          catalog = Puppet::Parser::Compiler.compile(node, code_id.empty? ? nil : code_id)
        ensure
          loader.unguard(env.name)
          Puppet::Type.clear_misses unless Puppet[:always_retry_plugins]
        end
      end
      # Puppet::Indirector::Indirection#find filters through the terminus:
      # virtual and exported resources are not sent to agents.
      catalog.filter { |r| r.virtual? }
    end

    # The body Puppet Server sends for Accept: application/vnd.puppet.rich+json
    # (falling back to plain JSON when the environment turned rich_data off).
    def render(catalog, env)
      if env.rich_data?
        Puppet.override({ rich_data: true }, 'rich_data_json') { catalog.to_json }
      else
        catalog.to_json
      end
    end
  end

  # BadRequest: the request itself is malformed (a bug on the Go side).
  class BadRequest < StandardError; end

  # error_info describes a failed compile as Puppet Server would report it.
  def self.error_info(err)
    info = { 'message' => err.message.to_s }
    located = err
    while located
      if located.respond_to?(:file) && located.file && !located.file.to_s.empty?
        info['file'] = located.file.to_s
        info['line'] = located.line.to_i if located.respond_to?(:line) && located.line
        info['column'] = located.pos.to_i if located.respond_to?(:pos) && located.pos
        break
      end
      located = located.cause
    end
    info
  end
end

worker = CompileFarm::Worker.new(workdir)
begin
  worker.setup
rescue Exception => e # rubocop:disable Lint/RescueException
  log_json(:err, "puppet worker setup failed: #{e.class}: #{e.message}", 'backtrace' => e.backtrace&.first(10))
  exit 4
end

emit({ 'ready' => true, 'puppet_version' => Puppet.version.to_s, 'ruby_version' => RUBY_VERSION, 'pid' => Process.pid })

while (line = STDIN.gets)
  line = line.strip
  next if line.empty?

  id = nil
  begin
    req = JSON.parse(line)
    id = req['id']
  rescue JSON::ParserError => e
    emit({ 'id' => nil, 'ok' => false, 'error' => { 'kind' => 'invalid', 'message' => "bad request: #{e.message}" } })
    next
  end

  begin
    $cf_node = req['certname'].to_s
    catalog_json = worker.compile(req)
    emit_raw(+'{"id":' << JSON.generate(id) << ',"ok":true,"catalog":' << catalog_json << '}')
  rescue NoMemoryError, SignalException, SystemExit => e
    emit({ 'id' => id, 'ok' => false, 'error' => { 'kind' => 'internal', 'message' => "#{e.class}: #{e.message}" } })
    exit 5
  rescue CompileFarm::BadRequest => e
    emit({ 'id' => id, 'ok' => false, 'error' => { 'kind' => 'invalid', 'message' => "bad request: #{e.message}" } })
  rescue Exception => e # rubocop:disable Lint/RescueException
    # Puppet::Parser::Compiler.compile turns every StandardError into a
    # Puppet::Error; a Ruby syntax error or deep recursion in the code under
    # compilation is just as deterministic.
    log_json(:debug, "compile failed: #{e.class}: #{e.message}", 'backtrace' => e.backtrace&.first(20))
    emit({ 'id' => id, 'ok' => false, 'error' => CompileFarm.error_info(e).merge('kind' => 'compile') })
  ensure
    $cf_node = nil
  end
end

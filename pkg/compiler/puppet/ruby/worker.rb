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
#     {"ready":true,"puppet_version":"7.23.0","ruby_version":"3.1.2","pid":123,
#      "recording":true,"hooks":["facts",...]}
#   stdin, one request per line:
#     {"id":1,"certname":"n1","environment":"production","code_id":"...",
#      "environmentpath":"/dir","facts":{...},
#      "exported":[{"certname":"n2","type":"Host","title":"n2","tags":[...],
#                   "parameters":{...},"file":"...","line":3},...]}
#   with, when the farm knows them, "trusted_extensions":{"pp_role":"web",...}
#   ($trusted['extensions'], named as Puppet Server names them), and the
#   external node classifier's "classes" (a list of names, or a hash of name
#   to parameters) and "parameters" (top-scope variables that win over facts
#   of the same name; not fact reads).
#   "exported" are the resources the other nodes export, which exported
#   collectors (<<| |>>) collect from (see lib/compilefarm/exports.rb). In
#   tests only, "disable_hooks":["topscope"] switches recording hooks off
#   for that compile (as --disable-hooks does for all).
#   stdout, one response per request:
#     {"id":1,"ok":true,"catalog":{...},"reads":{"reads":[{"path":["os","family"],
#      "kind":"value","value":"Debian"},...],"always_recompile":true,"why":"..."}}
#   with, when there are any, "exports":[{"type":"Host","title":"n1",
#   "tags":[...],"parameters":{...},"file":"...","line":3},...] (the
#   resources this node exports, taken before the catalog is filtered;
#   parameters as rich data) and "collects":[{"type":"Host",
#   "matched":["n2",...]},...] (one per exported collector evaluated, with
#   the nodes whose resources it collected).
#   and, when the compile queried PuppetDB, "queries":[{"query":"nodes {...}",
#   "result":[...]},...] (each distinct query with PuppetDB's answer; see
#   lib/compilefarm/puppetdb.rb).
#   "reads" lists the facts the compile read (see lib/compilefarm/reads.rb);
#   kind is value, hash, present or keys; value is what the read observed
#   (the value, keys sorted; true/false for hash and present; the sorted key
#   list for keys), or "missing":true when the path is absent.
#     {"id":1,"ok":false,"error":{"kind":"compile","message":"...","file":"...","line":3,"column":1}}
#   "kind" is "compile" (the code failed; retrying cannot help), "invalid"
#   (the request was malformed), "unavailable" (no PuppetDB answered a
#   query: retrying may help) or "internal" (the worker failed; it should
#   be restarted).
#   stderr: Puppet's log as JSON lines {"level","msg","source","file","line"},
#   and anything else Ruby prints.
#
# Usage: ruby worker.rb WORKDIR [--disable-hooks=NAME,...] [--eyaml-keys=DIR]
#          [--puppetdb [--puppetdb-certname=NAME] [--storeconfigs=puppetdb]]
# WORKDIR holds this worker's confdir, vardir, codedir, logdir and rundir.
# --puppetdb: conf/puppetdb.conf in WORKDIR names a PuppetDB for
# puppetdb_query(); --puppetdb-certname: the client certificate to present
# is WORKDIR/puppetdb-ssl/{cert,key}.pem, PuppetDB's CA ca.pem there;
# --storeconfigs=puppetdb: exported collectors read PuppetDB.
# --eyaml-keys is where the keys of encrypted Hiera data are (see
# lib/compilefarm/eyaml.rb).
# --disable-hooks switches fact-read recording hooks off (tests only: they
# prove that the mutation test notices a missing hook); "all" turns
# recording off altogether. The process exits when stdin is closed.

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
# The CompileFarm::Exports::Context of the compile in progress, if any.
$cf_exports = nil
# The CompileFarm::Reads::Recorder of the compile in progress, if any.
$cf_reads = nil
# The CompileFarm::PuppetDB::Recorder of the compile in progress, if any.
$cf_queries = nil

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

workdir = ARGV[0] or abort('usage: worker.rb WORKDIR [--disable-hooks=NAME,...] [--eyaml-keys=DIR]')
workdir = File.expand_path(workdir)
disabled_hooks = []
eyaml_keys = nil
puppetdb = nil
storeconfigs = 'compilefarm'
ARGV[1..].each do |arg|
  case arg
  when /\A--disable-hooks=(.*)\z/ then disabled_hooks.concat(Regexp.last_match(1).split(',').map(&:strip).reject(&:empty?))
  when /\A--eyaml-keys=(.*)\z/ then eyaml_keys = Regexp.last_match(1)
  when '--puppetdb' then puppetdb ||= {}
  when /\A--puppetdb-certname=(.+)\z/ then (puppetdb ||= {})[:certname] = Regexp.last_match(1)
  when /\A--storeconfigs=(.+)\z/ then storeconfigs = Regexp.last_match(1)
  else abort("worker.rb: unknown argument #{arg}")
  end
end

begin
  require 'puppet'
  require 'puppet/pops'
  require 'puppet/parser'
  require 'puppet/parser/templatewrapper'
  require 'puppet/util/profiler'
  require 'puppet/util/execution'
rescue LoadError => e
  log_json(:err, "cannot load puppet: #{e.message}")
  exit 3
end

# The rest of the worker, one file per concern, under lib/ next to this
# file. lib is on the load path for Puppet's autoloader, which loads the
# exported-resources terminus (lib/puppet/indirector/resource/compilefarm.rb)
# when storeconfigs first asks for its backend.
$LOAD_PATH.push(File.join(__dir__, 'lib'))
require_relative 'lib/compilefarm/reads'
require_relative 'lib/compilefarm/exports'
require_relative 'lib/compilefarm/eyaml'
require_relative 'lib/compilefarm/puppetdb'

module CompileFarm
  # Worker compiles catalogs for one process.
  class Worker
    ENV_CACHE_SIZE = 4

    def initialize(workdir, storeconfigs)
      @workdir = workdir
      @storeconfigs = storeconfigs
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
      CompileFarm::Exports.install(@storeconfigs)
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

    # SnapshotBaseModulepath makes a directories loader take each
    # environment's global module directories ($basemodulepath) from its
    # code snapshot, <env>/.basemodulepath/0, 1, ... (see pkg/code), for the
    # default modulepath and for $basemodulepath in environment.conf alike:
    # no compile reads a module outside the snapshot. An environment
    # without them keeps @basemodulepath, an empty directory.
    module SnapshotBaseModulepath
      VARS = ['$basemodulepath', '${basemodulepath}'].freeze

      def self.dirs(envdir)
        root = File.join(envdir, '.basemodulepath')
        return [] unless File.directory?(root)

        Dir.children(root).grep(/\A\d+\z/).sort_by(&:to_i).map { |n| File.join(root, n) }
      end

      def get_conf(name)
        conf = super
        base = conf && SnapshotBaseModulepath.dirs(conf.path_to_env)
        return conf if base.nil? || base.empty?

        Conf.new(conf.path_to_env, conf.section, base)
      end

      # Conf replaces an entry $basemodulepath of the modulepath setting
      # with the snapshot's directories, as pkg/code does (Puppet would
      # interpolate the global basemodulepath setting).
      class Conf < Puppet::Settings::EnvironmentConf
        def modulepath
          super.split(File::PATH_SEPARATOR).flat_map { |p| VARS.include?(p) ? @global_module_path : [p] }.join(File::PATH_SEPARATOR)
        end
      end
    end

    # The environments loader of one environmentpath, kept in a small LRU.
    # A code snapshot's environmentpath never changes, so its environments
    # never expire (environment_timeout unlimited) while the loader is cached.
    def loader_for(envpath)
      loader = @loaders.delete(envpath)
      unless loader
        dirs = Puppet::Environments::Directories.new(envpath, [@basemodulepath]).extend(SnapshotBaseModulepath)
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

      exports = CompileFarm::Exports.context(certname, req['exported'])
      loader = loader_for(envpath)
      exts = req['trusted_extensions'].is_a?(Hash) ? req['trusted_extensions'] : {}
      trusted = Puppet::Context::TrustedInformation.new('remote', certname, exts, {})
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
          $cf_exports = exports
          begin
            (catalog_json, exported), reads, queries = recorded(req) do
              catalog, exported = compile_in(env, loader, certname, req)
              [render(catalog, env), exported]
            end
          ensure
            $cf_exports = nil
          end
          # Collectors that read PuppetDB are tracked by their queries.
          collects = @storeconfigs == 'puppetdb' ? [] : exports.collects
          { catalog: catalog_json, reads: reads, queries: queries, exports: exported, collects: collects }
        end
      end
    end

    # recorded runs the block (compile and render) while recording the facts
    # it reads and the PuppetDB queries it makes, and returns [its result,
    # the reads or nil, the queries or nil].
    def recorded(req)
      off = Array(req['disable_hooks']).map(&:to_s)
      begin
        CompileFarm::Reads.check(off)
      rescue ArgumentError => e
        raise BadRequest, e.message
      end
      return [yield, nil, nil] if !CompileFarm::Reads.recording? || off.include?('all')

      rec = CompileFarm::Reads::Recorder.new(req['facts'], off, req['parameters'])
      queries = CompileFarm::PuppetDB::Recorder.new if CompileFarm::Reads.hook?('queries') && !off.include?('queries')
      $cf_reads = rec
      $cf_queries = queries
      begin
        out = yield
      ensure
        $cf_reads = nil
        $cf_queries = nil
      end
      [out, rec.finish, queries]
    end

    # Puppet::Resource::Catalog::Compiler#find and #compile, with the node
    # Puppet's exec node terminus would return: the classifier's classes and
    # parameters, then the facts (which do not override a parameter).
    # Returns the catalog for the agent and the resources the node exports.
    def compile_in(env, loader, certname, req)
      # A shallow copy: Puppet deletes '_timestamp' from the values and
      # sanitizes them in place; the request's own hash is what reads are
      # observed in.
      values = req['facts'].is_a?(Hash) ? req['facts'].dup : {}
      facts = Puppet::Node::Facts.from_data_hash({ 'name' => certname, 'values' => values })
      params = req['parameters'].is_a?(Hash) ? req['parameters'].dup : {}
      node = Puppet::Node.new(certname, environment: env, parameters: params, classes: req['classes'])
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
      # What the node exports, as PuppetDB would store it from the whole
      # catalog (still inside recording: a fact in an exported parameter is
      # read here, and a change of it changes the exports).
      exported = catalog.resources.select(&:exported?).map { |r| CompileFarm::Exports.describe(r, catalog) }
      # Puppet::Indirector::Indirection#find filters through the terminus:
      # virtual and exported resources are not sent to agents.
      [catalog.filter { |r| r.virtual? }, exported]
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

# setup_step runs one step of the worker's set-up. When it fails the worker
# logs what failed and why (with where, unless the error is an operator's to
# act on: a wrong eyaml key says all there is to say) and exits 4, before it
# ever says ready.
def setup_step(what, backtrace: true)
  yield
rescue Exception => e # rubocop:disable Lint/RescueException
  log_json(:err, "puppet worker: #{what}: #{e.class}: #{e.message}", backtrace ? { 'backtrace' => e.backtrace&.first(10) } : {})
  exit 4
end

worker = CompileFarm::Worker.new(workdir, storeconfigs)
setup_step('setup failed') { worker.setup }
setup_step('cannot install fact-read recording') { CompileFarm::Reads.install(disabled_hooks) }
setup_step('cannot set up encrypted Hiera data', backtrace: false) { CompileFarm::Eyaml.install(eyaml_keys) }
setup_step('cannot set up PuppetDB', backtrace: false) do
  raise ArgumentError, '--storeconfigs=puppetdb needs --puppetdb' if storeconfigs == 'puppetdb' && !puppetdb

  puppetdb[:storeconfigs] = storeconfigs if puppetdb
  CompileFarm::PuppetDB.install(puppetdb, File.join(workdir, 'puppetdb-ssl'))
end

emit({ 'ready' => true, 'puppet_version' => Puppet.version.to_s, 'ruby_version' => RUBY_VERSION, 'pid' => Process.pid,
       'recording' => CompileFarm::Reads.recording?, 'hooks' => CompileFarm::Reads.enabled })

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
    out = worker.compile(req)
    line = +'{"id":' << JSON.generate(id) << ',"ok":true,"catalog":' << out[:catalog]
    line << ',"reads":' << JSON.generate(out[:reads]) if out[:reads]
    line << ',"queries":[' << out[:queries].to_json_list.join(',') << ']' if out[:queries] && !out[:queries].empty?
    line << ',"exports":' << JSON.generate(out[:exports]) unless out[:exports].empty?
    line << ',"collects":' << JSON.generate(out[:collects]) unless out[:collects].empty?
    emit_raw(line << '}')
  rescue NoMemoryError, SignalException, SystemExit => e
    emit({ 'id' => id, 'ok' => false, 'error' => { 'kind' => 'internal', 'message' => "#{e.class}: #{e.message}" } })
    exit 5
  rescue CompileFarm::BadRequest => e
    emit({ 'id' => id, 'ok' => false, 'error' => { 'kind' => 'invalid', 'message' => "bad request: #{e.message}" } })
  rescue Exception => e # rubocop:disable Lint/RescueException
    # Puppet::Parser::Compiler.compile turns every StandardError into a
    # Puppet::Error; a Ruby syntax error or deep recursion in the code under
    # compilation is just as deterministic. A PuppetDB that did not answer
    # is not.
    log_json(:debug, "compile failed: #{e.class}: #{e.message}", 'backtrace' => e.backtrace&.first(20))
    kind = CompileFarm::PuppetDB.unavailable?(e) ? 'unavailable' : 'compile'
    emit({ 'id' => id, 'ok' => false, 'error' => CompileFarm.error_info(e).merge('kind' => kind) })
  ensure
    $cf_node = nil
  end
end

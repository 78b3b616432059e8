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
#   collectors (<<| |>>) collect from (see CompileFarm::Exports below). In
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
#   "reads" lists the facts the compile read (see CompileFarm::Reads below);
#   kind is value, hash, present or keys; value is what the read observed
#   (the value, keys sorted; true/false for hash and present; the sorted key
#   list for keys), or "missing":true when the path is absent.
#     {"id":1,"ok":false,"error":{"kind":"compile","message":"...","file":"...","line":3,"column":1}}
#   "kind" is "compile" (the code failed; retrying cannot help), "invalid"
#   (the request was malformed) or "internal" (the worker failed; it should
#   be restarted).
#   stderr: Puppet's log as JSON lines {"level","msg","source","file","line"},
#   and anything else Ruby prints.
#
# Usage: ruby worker.rb WORKDIR [--disable-hooks=NAME,...] [--eyaml-keys=DIR]
# WORKDIR holds this worker's confdir, vardir, codedir, logdir and rundir.
# --eyaml-keys is where the keys of encrypted Hiera data are (see
# CompileFarm::Eyaml below).
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
ARGV[1..].each do |arg|
  case arg
  when /\A--disable-hooks=(.*)\z/ then disabled_hooks.concat(Regexp.last_match(1).split(',').map(&:strip).reject(&:empty?))
  when /\A--eyaml-keys=(.*)\z/ then eyaml_keys = Regexp.last_match(1)
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

# ---------------------------------------------------------------------------
# Recording the facts a compile reads.
#
# Facts enter the compiler in one place: Puppet::Parser::Compiler
# #set_node_parameters, which sets the top-scope variables from the node's
# parameters (fact values by reference) and $facts (deep-frozen in place).
# There, and only while a compile is being recorded, every Hash of the facts
# is replaced by a copy that includes FactHash: still an instance_of?(Hash)
# (its class is Hash; only its singleton class differs), but each method
# notes what it reveals, by key path: [] / fetch / dig the value (or, for a
# nested hash, only that it is a hash: what is done with it is recorded by
# that hash), key? presence, size / keys the key set; iterating (each, map,
# select, values, ...) the key set, every value that is not a hash, and
# that each hash value is a hash (the block gets the recording copy, whose
# own reads record what the block does with it); anything else (==, merge,
# to_s, hash, to_json, ...) the whole value.
# Top-scope variables ($::x, an unqualified $x that falls through to top
# scope, defined('$x')) are recorded by hooks on the top scope's symbol
# table and on Scope#lookup_qualified_variable; missing names are recorded
# too. Scope#to_hash returns a recording hash too (ScopeHash): looking up a
# key that holds a top-scope variable reads that variable, a local variable
# is no read. ERB templates see variables as instance variables, which
# Ruby cannot observe: their compiled Ruby is lexed for @names, which are
# resolved through the scope. Runtime3Converter's deep copies (3.x function
# arguments, resource parameters) keep recording under the same path; Ruby's
# C-level Hash methods that read an argument hash without calling its methods
# (merge, update, replace, ==, eql?, <=, ...) count a fact hash argument as a
# whole read. Recording stays open until the catalog has been rendered (a
# fact hash in a resource parameter is only walked then). Non-deterministic
# functions mark the compile "always recompile".
#
# Each hook has a name (HOOKS) so that tests can switch one off (for the
# process with --disable-hooks=NAME,..., for one compile with the request's
# "disable_hooks") and prove that the mutation test notices.
# ---------------------------------------------------------------------------
require 'ripper'

module CompileFarm
  module Reads
    VALUE = 1
    HASH = 2
    PRESENT = 4
    KEYS = 8
    KIND_NAMES = [[VALUE, 'value'], [HASH, 'hash'], [PRESENT, 'present'], [KEYS, 'keys']].freeze

    # Hook names, for --disable-hooks.
    HOOKS = %w[facts topscope qualified tohash iterate erb convert hashargs nondet].freeze

    # Top-scope names that never come from facts.
    RESERVED = %w[facts trusted server_facts environment module_name caller_module_name].to_h { |n| [n, true] }.freeze
    NUMERIC = /\A\d+\z/.freeze

    EMPTY_PATH = [].freeze
    H_KEYP = Hash.instance_method(:key?)
    H_AREF = Hash.instance_method(:[])
    H_EACH_PAIR = Hash.instance_method(:each_pair)
    H_REPLACE = Hash.instance_method(:replace)
    K_CLONE = Kernel.instance_method(:clone)

    # Functions whose result is not a function of facts and code (keyed by
    # name as String and Symbol: Puppet's profiler gets either).
    NONDET_FUNCTIONS = {
      'generate' => 'generate() runs a command',
      'time' => 'time() reads the clock',
      'shuffle' => 'shuffle() is random',
      'str2saltedsha512' => 'str2saltedsha512() uses a random salt',
    }.flat_map { |k, v| [[k, v], [k.to_sym, v]] }.to_h.freeze
    # Those of them that only read the current time.
    CLOCK_FUNCTIONS = %w[time].flat_map { |k| [[k, true], [k.to_sym, true]] }.to_h.freeze

    class << self
      attr_reader :enabled

      # install installs the hooks not named in disabled. "all" disables
      # recording altogether.
      def install(disabled)
        check(disabled)
        @enabled = disabled.include?('all') ? [] : HOOKS - disabled
        @recording = !disabled.include?('all')
        return unless @recording

        Puppet::Parser::Compiler.prepend(CompilerHook) if hook?('facts') || hook?('topscope')
        hook?('facts') && Puppet::Pops::Types::PHashType.prepend(HashTypeHook)
        hook?('qualified') && Puppet::Parser::Scope.prepend(QualifiedHook)
        hook?('tohash') && Puppet::Parser::Scope.prepend(ToHashHook)
        hook?('erb') && Puppet::Parser::TemplateWrapper.prepend(TemplateHook)
        hook?('convert') && Puppet::Pops::Evaluator::Runtime3Converter.prepend(ConvertHook)
        if hook?('hashargs')
          Hash.prepend(HashArgs)
          Hash.singleton_class.prepend(HashCreate)
        end
        if hook?('nondet')
          Puppet::Util::Profiler.singleton_class.prepend(ProfileHook)
          Puppet::Pops::Time::Timestamp.singleton_class.prepend(TimestampHook)
          Puppet::Util::Execution.singleton_class.prepend(ExecuteHook)
        end
      end

      def check(names)
        unknown = names - HOOKS - ['all']
        raise ArgumentError, "unknown recording hooks #{unknown.join(', ')} (known: #{HOOKS.join(', ')}, all)" unless unknown.empty?
      end

      def recording?
        @recording
      end

      def hook?(name)
        @enabled.include?(name)
      end
    end

    # Recorder collects one compile's reads. raw is the request's fact values
    # exactly as decoded from JSON (never given to Puppet): what a read
    # observed is computed from it, so that it equals what the Go side
    # computes from the same facts.
    class Recorder
      # off names hooks switched off for this compile only (tests); params
      # are the node's classifier parameters, top-scope variables that are
      # not facts (the farm tracks them with the classification).
      def initialize(raw, off = [], params = nil)
        @raw = raw.is_a?(Hash) ? raw : {}
        @params = params.is_a?(Hash) ? params : {}
        # path => kind bits, by identity: every path is either precomputed
        # (a fact's, when it was wrapped) or interned.
        @reads = {}.compare_by_identity
        @interned = {}
        @suspended = 0
        @why = []
        @clock = []
        @top_paths = {} # top-level fact name => path
        @top_hash = {} # top-level fact names whose value is a recording hash
        on = ->(name) { CompileFarm::Reads.hook?(name) && !off.include?(name) }
        @facts_on = on['facts']
        @topscope_on = on['topscope']
        @qualified_on = on['qualified']
        @tohash_on = on['tohash']
        @iterate_on = on['iterate']
        @erb_on = on['erb']
        @convert_on = on['convert']
        @hashargs_on = on['hashargs']
        @nondet_on = on['nondet']
      end

      attr_reader :facts_on, :topscope_on, :qualified_on, :tohash_on, :iterate_on, :erb_on, :convert_on, :hashargs_on, :nondet_on
      # top_symbols is the top scope's own variable table (name => value),
      # set once the top scope holds the facts.
      attr_accessor :top_symbols

      def suspended?
        @suspended > 0
      end

      def note(path, bit)
        return if @suspended > 0

        r = @reads
        old = r[path]
        r[path] = old ? (old | bit) : bit
      end

      # child notes a read of key k of the recording hash whose meta is m.
      def child(m, k, bit)
        return unless k.is_a?(String) # fact keys are strings: any other key is never found

        note(m[1][k] || intern(m[0] + [k]), bit)
      end

      # intern returns the one path object for a path that is not a fact's.
      def intern(path)
        @interned[path] ||= path.map { |k| k.frozen? ? k : k.dup.freeze }.freeze
      end

      def whole(o)
        m = o.instance_variable_get(:@__cf)
        note(m[0], VALUE) if m && !m[2]
      end

      # top notes a read of the top-scope variable name; bit nil means "its
      # value" (for a recording hash: only that it is a hash).
      def top(name, bit)
        return if @suspended > 0 || RESERVED[name] || NUMERIC.match?(name) || @params.key?(name)

        path = @top_paths[name] || intern([name])
        note(path, bit || (@top_hash[name] ? HASH : VALUE))
      end

      # shallow notes what iterating the recording hash h (meta m) reveals:
      # its key set, each value that is not a hash, and that each hash value
      # is a hash (that value is a recording hash, whose own reads record
      # what is done with it).
      def shallow(h, m)
        return if @suspended > 0 || !@iterate_on

        path = m[0]
        kp = m[1]
        note(path, KEYS)
        H_EACH_PAIR.bind_call(h) do |k, v|
          next unless k.is_a?(String)

          note(kp[k] || intern(path + [k]), FactHash === v ? HASH : VALUE)
        end
      end

      # nondet marks the compile as depending on more than facts and code;
      # clock: true when that is only the current time (the farm reuses
      # such a catalog for a while, see compiler.FactReads.Clock).
      def nondet(why, clock: false)
        return unless @nondet_on

        list = clock ? @clock : @why
        list << why unless list.include?(why)
      end

      def suspend
        @suspended += 1
        yield
      ensure
        @suspended -= 1
      end

      # wrap returns a recording copy of the plain fact hash h at path.
      def wrap(h, path)
        out = {}
        kp = {}
        h.each_pair do |k, v|
          if k.is_a?(String)
            cp = (path + [k.frozen? ? k : k.dup.freeze]).freeze
            kp[k] = cp
            v = wrap(v, cp) if v.instance_of?(Hash)
          end
          out[k] = v
        end
        CompileFarm::Reads.fact_hash(out, [path, kp.freeze, false])
      end

      def wrap_root(values)
        root = wrap(values, EMPTY_PATH)
        kp = root.instance_variable_get(:@__cf)[1]
        @top_paths = kp
        H_EACH_PAIR.bind_call(root) { |k, v| @top_hash[k] = true if FactHash === v }
        root
      end

      # Resolves the ERB template's @names through scope (recording the
      # top-scope ones) and notes dynamic variable access.
      def erb(scope, source, file)
        info = ErbInfo.for(source)
        nondet("template #{File.basename(file.to_s)} uses #{info.nondet}", clock: info.clock) if info.nondet && @nondet_on
        if info.dynamic
          note(EMPTY_PATH, VALUE)
          return
        end
        info.names.each do |name|
          resolved = catch(:unevaluated_parameter) do
            catch(:undefined_variable) { scope.lookupvar(name) }
            true
          end
          # A parameter not yet evaluated (a template in a parameter
          # default) is not among the template's variables: a top-scope
          # variable of that name is.
          top(name, nil) unless resolved == true
        end
      end

      def observe(path)
        cur = @raw
        path.each do |k|
          return [false, nil] unless cur.is_a?(Hash) && cur.key?(k)

          cur = cur[k]
        end
        [true, cur]
      end

      def canonical(v)
        case v
        when Hash then v.keys.sort.each_with_object({}) { |k, h| h[k] = canonical(v[k]) }
        when Array then v.map { |e| canonical(e) }
        else v
        end
      end

      # finish returns what the worker reports: the reads, deduplicated (a
      # value read covers every other read of its path and below it; a
      # positive observation below a path implies that the path is a present
      # hash), each with what it observed.
      def finish
        value_paths = {}
        @reads.each { |p, b| value_paths[p] = true if b & VALUE != 0 }
        kept = []
        @reads.each do |p, b|
          next if (0...p.length).any? { |i| value_paths.key?(p[0, i]) }

          kept << [p, b & VALUE != 0 ? VALUE : b]
        end
        implied = {}
        kept.each do |p, b|
          next if p.empty?

          present, v = observe(p)
          next unless present && (b & (VALUE | PRESENT) != 0 || v.is_a?(Hash))

          (0...p.length).each { |i| implied[p[0, i]] = true }
        end
        out = []
        kept.sort_by { |p, _| p }.each do |p, b|
          present, v = observe(p)
          # A positive read below p, or of the key set of p, implies that p
          # is a present hash; a hash read of a hash implies presence.
          b &= ~(HASH | PRESENT) if implied.key?(p) || (b & KEYS != 0 && v.is_a?(Hash))
          b &= ~PRESENT if b & HASH != 0 && v.is_a?(Hash)
          KIND_NAMES.each do |bit, kind|
            next if b & bit == 0

            r = { 'path' => p, 'kind' => kind }
            case bit
            when VALUE
              r['value'] = canonical(v) if present
              r['missing'] = !present
            when HASH
              r['value'] = present && v.is_a?(Hash)
              r['missing'] = false
            when PRESENT
              r['value'] = present
              r['missing'] = false
            when KEYS
              r['value'] = v.keys.sort if present && v.is_a?(Hash)
              r['missing'] = !(present && v.is_a?(Hash))
            end
            out << r
          end
        end
        res = { 'reads' => out }
        unless @why.empty?
          res['always_recompile'] = true
          res['why'] = @why.join('; ')
        end
        unless @clock.empty?
          res['clock'] = true
          res['clock_why'] = @clock.join('; ')
        end
        res
      end
    end

    # What an ERB template's compiled Ruby reveals, cached by source.
    class ErbInfo
      DYNAMIC = %w[instance_variable_get instance_variables instance_variable_defined? eval instance_eval
                   instance_exec binding send __send__ public_send method].to_h { |n| [n, true] }.freeze
      NONDET_CONSTS = %w[Time Date DateTime Random SecureRandom].to_h { |n| [n, true] }.freeze
      CLOCK_CONSTS = %w[Time Date DateTime].to_h { |n| [n, true] }.freeze
      NONDET_IDENTS = %w[rand srand system spawn exec fork].to_h { |n| [n, true] }.freeze
      CACHE_MAX = 512
      @cache = {}

      # nondet names the first non-deterministic thing the template uses;
      # clock is true when everything it found only reads the clock.
      attr_reader :names, :dynamic, :nondet, :clock

      def self.for(source)
        info = @cache[source]
        return info if info

        @cache.shift while @cache.size >= CACHE_MAX
        @cache[source.frozen? ? source : source.dup.freeze] = new(source)
      end

      def initialize(source)
        names = {}
        @dynamic = false
        @nondet = nil
        @clock = true
        found = {}
        Ripper.lex(Puppet::Util.create_erb(source).src).each do |(_, type, tok, _)|
          case type
          when :on_ivar
            name = tok[1..]
            names[name] = true unless name.start_with?('__')
          when :on_ident
            @dynamic = true if DYNAMIC[tok]
            if NONDET_IDENTS[tok]
              found["#{tok}()"] = true
              @clock = false
            end
          when :on_const
            if NONDET_CONSTS[tok]
              found[tok] = true
              @clock &&= CLOCK_CONSTS.key?(tok)
            end
          when :on_backtick
            found['a command'] = true
            @clock = false
          end
        end
        @nondet = found.keys.join(', ') unless found.empty?
        @names = names.keys.freeze
      end
    end

    # FactHash is extended into each recording copy of a fact hash. Its
    # state is @__cf = [path, {key => child path}, detached].
    module FactHash
      # noting defines each of names to note a read of kind (a constant's
      # name) of the whole hash, unless it is detached, then do what Hash
      # does.
      def self.noting(names, kind)
        names.each do |name|
          module_eval <<~RUBY, __FILE__, __LINE__ + 1
            def #{name}(...)
              if (r = $cf_reads) && !(m = @__cf)[2]
                r.note(m[0], #{kind})
              end
              super
            end
          RUBY
        end
      end

      def [](k)
        v = super
        if (r = $cf_reads) && !(m = @__cf)[2]
          r.child(m, k, FactHash === v ? HASH : VALUE)
        end
        v
      end

      def fetch(k, *rest, &blk)
        if (r = $cf_reads) && !(m = @__cf)[2]
          r.child(m, k, H_KEYP.bind_call(self, k) && FactHash === H_AREF.bind_call(self, k) ? HASH : VALUE)
        end
        super
      end

      def dig(k, *rest)
        v = self[k]
        return v if rest.empty? || v.nil?
        raise TypeError, "#{v.class} does not have #dig method" unless v.respond_to?(:dig)

        v.dig(*rest)
      end

      %i[key? has_key? include? member?].each do |name|
        module_eval <<~RUBY, __FILE__, __LINE__ + 1
          def #{name}(k)
            if (r = $cf_reads) && !(m = @__cf)[2]
              r.child(m, k, PRESENT)
            end
            super
          end
        RUBY
      end

      %i[values_at fetch_values slice].each do |name|
        module_eval <<~RUBY, __FILE__, __LINE__ + 1
          def #{name}(*ks, &blk)
            if (r = $cf_reads) && !(m = @__cf)[2]
              ks.each { |k| r.child(m, k, H_KEYP.bind_call(self, k) && FactHash === H_AREF.bind_call(self, k) ? HASH : VALUE) }
            end
            super
          end
        RUBY
      end

      def assoc(k)
        if (r = $cf_reads) && !(m = @__cf)[2]
          r.child(m, k, H_KEYP.bind_call(self, k) && FactHash === H_AREF.bind_call(self, k) ? HASH : VALUE)
        end
        super
      end

      noting(%i[size length empty? keys each_key], :KEYS)

      %i[count any?].each do |name|
        module_eval <<~RUBY, __FILE__, __LINE__ + 1
          def #{name}(*args, &blk)
            if (r = $cf_reads) && !(m = @__cf)[2]
              args.empty? && blk.nil? ? r.note(m[0], KEYS) : r.shallow(self, m)
            end
            super
          end
        RUBY
      end

      def to_h(&blk)
        if blk && (r = $cf_reads) && !(m = @__cf)[2]
          r.shallow(self, m)
        end
        super
      end

      # Iterating reveals the key set and each value, and a value that is a
      # hash is a recording hash itself: what the block does with it records
      # as its own reads (Recorder#shallow). So $facts['mountpoints'].each
      # reading each mount's filesystem does not read its usage.
      SHALLOW = %i[all? chunk chunk_while collect collect_concat compact cycle detect drop drop_while each
                   each_cons each_entry each_pair each_slice each_value each_with_index each_with_object
                   entries except filter filter_map find find_all find_index first flat_map flatten grep
                   grep_v group_by has_value? inject invert key map max max_by min min_by minmax minmax_by
                   none? one? partition rassoc reduce reject reverse_each select slice_after slice_before
                   slice_when sort sort_by sum take take_while tally to_a transform_keys transform_values
                   uniq value? values zip].freeze
      SHALLOW.each do |name|
        module_eval <<~RUBY, __FILE__, __LINE__ + 1
          def #{name}(...)
            if (r = $cf_reads) && !(m = @__cf)[2]
              r.shallow(self, m)
            end
            super
          end
        RUBY
      end

      # Comparisons reveal the whole hash, unless the other side is not a
      # hash at all (then the answer is known from hash-ness alone).
      %i[== eql? < <= > >=].each do |name|
        module_eval <<~RUBY, __FILE__, __LINE__ + 1
          def #{name}(other)
            if (r = $cf_reads) && (other.is_a?(Hash) || other.respond_to?(:to_hash))
              r.whole(self)
              r.whole(other) if FactHash === other
            end
            super
          end
        RUBY
      end

      def dup
        m = @__cf
        CompileFarm::Reads.fact_hash(super, [m[0], m[1], m[2]])
      end

      def clone(...)
        c = super
        m = @__cf
        c.instance_variable_set(:@__cf, [m[0], m[1], m[2]]) unless c.frozen?
        c
      end

      # A copy that is changed (a 3.x function's own argument) stops
      # recording, once it has counted as read whole.
      MUTATORS = %i[[]= store delete delete_if keep_if select! filter! reject! compact! clear replace
                    merge! update shift transform_values! transform_keys! default= default_proc=
                    rehash compare_by_identity].freeze
      MUTATORS.each do |name|
        module_eval <<~RUBY, __FILE__, __LINE__ + 1
          def #{name}(...)
            unless frozen?
              m = @__cf
              if (r = $cf_reads) && !m[2]
                r.note(m[0], VALUE)
              end
              m[2] = true
            end
            super
          end
        RUBY
      end

      PASS = %i[! != !~ =~ === <=> __id__ __send__ class class_def daemonize define_singleton_method display
                enum_for to_enum equal? extend freeze frozen? instance_eval instance_exec instance_of?
                instance_variable_defined? instance_variable_get instance_variable_set instance_variables
                is_a? itself kind_of? meta_def meta_eval meta_undef method methods nil? object_id
                private_methods protected_methods public_method public_methods public_send respond_to?
                send singleton_class singleton_method singleton_methods taint tainted? tap then trust
                untaint untrust untrusted? yield_self remove_instance_variable default default_proc
                compare_by_identity? lazy chain to_hash].freeze

      # Every other method of Hash (iteration, values, merge, to_s, inspect,
      # hash, to_json, to_a, sort, ...) reveals the whole hash.
      noting(Hash.public_instance_methods(true) - instance_methods(false) - PASS - MUTATORS, :VALUE)
    end

    # A recording hash to clone: cloning copies the singleton class, which is
    # several times faster than extending a fresh hash.
    FACT_TEMPLATE = {}.extend(FactHash)

    # fact_hash returns a recording hash with plain's contents and meta.
    def self.fact_hash(plain, meta)
      h = K_CLONE.bind_call(FACT_TEMPLATE)
      H_REPLACE.bind_call(h, plain)
      h.instance_variable_set(:@__cf, meta)
      h
    end

    module CompilerHook
      def set_node_parameters
        r = $cf_reads
        return super unless r

        facts = node.facts
        values = facts&.values
        if r.facts_on && values.instance_of?(Hash)
          root = r.wrap_root(values)
          facts.values = root
          params = node.parameters
          values.each_pair do |k, v|
            params[k] = H_AREF.bind_call(root, k) if params.key?(k) && params[k].equal?(v)
          end
        end
        r.suspend { super }
        symtable = @topscope.instance_variable_get(:@symtable)
        r.top_symbols = symtable.instance_variable_get(:@symbols)
        symtable.extend(TopTable) if r.topscope_on
        # Ruby code may read node.parameters (facts by name) directly.
        node.parameters.extend(NodeParams) if r.facts_on
      end
    end

    # NodeParams is extended into node.parameters once the top scope is set.
    module NodeParams
      def [](name)
        r = $cf_reads and r.top(name.to_s, nil)
        super
      end

      def fetch(name, *rest, &blk)
        r = $cf_reads and r.top(name.to_s, nil)
        super
      end

      %i[key? has_key? include? member?].each do |name|
        module_eval <<~RUBY, __FILE__, __LINE__ + 1
          def #{name}(k)
            r = $cf_reads and r.top(k.to_s, PRESENT)
            super
          end
        RUBY
      end

      (Hash.public_instance_methods(true) - instance_methods(false) - FactHash::PASS - FactHash::MUTATORS).each do |name|
        module_eval <<~RUBY, __FILE__, __LINE__ + 1
          def #{name}(...)
            r = $cf_reads and r.note(EMPTY_PATH, VALUE)
            super
          end
        RUBY
      end
    end

    # TopTable is extended into the top scope's symbol table: every
    # unqualified variable lookup that reaches top scope ends here, as do
    # defined('$x') (include?) and assignments at top scope (bound?).
    # scope.to_hash is ToHashHook's.
    module TopTable
      def [](name)
        r = $cf_reads and r.top(name, nil)
        super
      end

      def include?(name)
        r = $cf_reads and r.top(name, PRESENT)
        super
      end

      def bound?(name)
        r = $cf_reads and r.top(name, PRESENT)
        super
      end
    end

    # Scope#to_hash gives every variable visible in a scope, top-scope
    # variables (the facts) included: templates call scope.to_hash['x']
    # (puppet-logrotate's rule template does so forty times) to read a few
    # of them. The hash it returns records as the top scope would: a key
    # that holds the top scope's own value, or that is absent, is a read of
    # that top-scope variable; a local variable is no read at all; what
    # reveals every key (size, keys) reads the facts' key set, and what
    # reveals every value (iteration, comparison, to_s) reads all facts.
    module ToHashHook
      def to_hash(*args)
        r = $cf_reads
        # The outermost call only (to_hash recurses through enclosing
        # scopes); a suspended recorder (binding a template's variables)
        # wants the plain hash.
        return super if r.nil? || !r.tohash_on || r.suspended? || r.top_symbols.nil?

        h = r.suspend { super }
        CompileFarm::Reads.scope_hash(h, r.top_symbols)
      end
    end

    # ScopeHash is extended into each hash ToHashHook returns. Its state is
    # @__cfs, the top scope's variable table, or nil once the hash has
    # been changed (it then counted as read whole).
    module ScopeHash
      # __cf_var notes a read of variable k through this hash: bit nil for
      # its value, PRESENT for whether it is there.
      def __cf_var(k, bit)
        top = @__cfs
        return unless top && (r = $cf_reads) && k.is_a?(String)
        # A key held by a local variable of another value reads nothing.
        return if H_KEYP.bind_call(self, k) && !(top.key?(k) && H_AREF.bind_call(self, k).equal?(top[k]))

        r.top(k, bit)
      end

      def [](k)
        __cf_var(k, nil)
        super
      end

      def fetch(k, *rest, &blk)
        __cf_var(k, nil)
        super
      end

      def dig(k, *rest)
        __cf_var(k, nil)
        super
      end

      def assoc(k)
        __cf_var(k, nil)
        super
      end

      %i[values_at fetch_values slice].each do |name|
        module_eval <<~RUBY, __FILE__, __LINE__ + 1
          def #{name}(*ks, &blk)
            ks.each { |k| __cf_var(k, nil) }
            super
          end
        RUBY
      end

      %i[key? has_key? include? member?].each do |name|
        module_eval <<~RUBY, __FILE__, __LINE__ + 1
          def #{name}(k)
            __cf_var(k, PRESENT)
            super
          end
        RUBY
      end

      def self.noting(names, kind)
        names.each do |name|
          module_eval <<~RUBY, __FILE__, __LINE__ + 1
            def #{name}(...)
              if @__cfs && (r = $cf_reads)
                r.note(EMPTY_PATH, #{kind})
              end
              super
            end
          RUBY
        end
      end

      noting(%i[size length empty? keys each_key], :KEYS)

      def dup
        CompileFarm::Reads.scope_hash(super, @__cfs)
      end

      def clone(...)
        c = super
        c.instance_variable_set(:@__cfs, @__cfs) unless c.frozen?
        c
      end

      FactHash::MUTATORS.each do |name|
        module_eval <<~RUBY, __FILE__, __LINE__ + 1
          def #{name}(...)
            unless frozen?
              if @__cfs && (r = $cf_reads)
                r.note(EMPTY_PATH, VALUE)
              end
              @__cfs = nil
            end
            super
          end
        RUBY
      end

      noting(Hash.public_instance_methods(true) - instance_methods(false) - FactHash::PASS - FactHash::MUTATORS, :VALUE)
    end

    SCOPE_TEMPLATE = {}.extend(ScopeHash)

    # scope_hash returns a recording copy of Scope#to_hash's result h.
    def self.scope_hash(h, top)
      out = K_CLONE.bind_call(SCOPE_TEMPLATE)
      H_REPLACE.bind_call(out, h)
      out.instance_variable_set(:@__cfs, top)
      out
    end

    module QualifiedHook
      def lookup_qualified_variable(fqn, options)
        r = $cf_reads
        r.top(fqn, nil) if r&.qualified_on && !fqn.include?('::')
        super
      end
    end

    # Puppet::Parser::TemplateWrapper#result (Puppet 7.23), with the
    # variables bound without counting as reads and the template's @names
    # resolved through the scope instead.
    module TemplateHook
      def result(string = nil)
        r = $cf_reads
        return super unless r&.erb_on

        if string
          template_source = 'inline template'
        else
          string = Puppet::FileSystem.read_preserve_line_endings(@__file__)
          template_source = @__file__
        end
        escaped_template_source = template_source.gsub(/%/, '%%')
        benchmark(:debug, _('Bound template variables for %{template_source} in %%{seconds} seconds') % { template_source: escaped_template_source }) do
          r.suspend { scope.to_hash }.each do |name, value|
            realname = name.gsub(/[^\w]/, '_')
            instance_variable_set("@#{realname}", value)
          end
        end
        r.erb(scope, string, template_source)

        result = nil
        benchmark(:debug, _('Interpolated template %{template_source} in %%{seconds} seconds') % { template_source: escaped_template_source }) do
          template = Puppet::Util.create_erb(string)
          template.filename = @__file__
          result = template.result(binding)
        end
        result
      end
    end

    # Runtime3Converter#convert_Hash deep-copies hashes for 3.x functions
    # and resource parameters: the copy of a fact hash records as the
    # original (same path).
    module ConvertHook
      def convert_Hash(o, scope, undef_value)
        m = FactHash === o && $cf_reads&.convert_on && o.instance_variable_get(:@__cf)
        return super unless m && !m[2]

        result = {}
        ic = @inner_converter
        H_EACH_PAIR.bind_call(o) { |k, v| result[ic.convert(k, scope, undef_value)] = ic.convert(v, scope, undef_value) }
        CompileFarm::Reads.fact_hash(result, [m[0], m[1], false])
      end
    end

    # A fact hash matched against a Hash type whose values may be anything
    # (Hash, Hash[String, Any], a Hash parameter of keys(), ...) reveals
    # only its key set, though PHashType#instance? walks the values.
    module HashTypeHook
      def instance?(o, guard = nil)
        if FactHash === o && (r = $cf_reads)&.facts_on && @value_type.instance_of?(Puppet::Pops::Types::PAnyType)
          m = o.instance_variable_get(:@__cf)
          unless m[2]
            r.note(m[0], KEYS)
            return r.suspend { super }
          end
        end
        super
      end
    end

    # Ruby's C-level Hash methods read an argument hash's table directly.
    module HashArgs
      %i[merge merge! update].each do |name|
        module_eval <<~RUBY, __FILE__, __LINE__ + 1
          def #{name}(*others, &blk)
            if (r = $cf_reads)&.hashargs_on
              others.each { |o| r.whole(o) if FactHash === o }
            end
            super
          end
        RUBY
      end

      %i[replace == eql? < <= > >=].each do |name|
        module_eval <<~RUBY, __FILE__, __LINE__ + 1
          def #{name}(other)
            if (r = $cf_reads)&.hashargs_on && FactHash === other
              r.whole(other)
            end
            super
          end
        RUBY
      end
    end

    module HashCreate
      def [](*args)
        if (r = $cf_reads)&.hashargs_on
          args.each { |o| r.whole(o) if FactHash === o }
        end
        super
      end
    end

    module ProfileHook
      def profile(message, metric_id, &block)
        if (r = $cf_reads) && metric_id.is_a?(Array) && metric_id[0] == :functions &&
           (why = NONDET_FUNCTIONS[metric_id[1]])
          r.nondet(why, clock: CLOCK_FUNCTIONS.key?(metric_id[1]))
        end
        super
      end
    end

    module TimestampHook
      def now
        r = $cf_reads and r.nondet('Timestamp.now (Timestamp.new() or Timestamp()) reads the clock', clock: true)
        super
      end

      def format_time(format, time, timezone)
        if (r = $cf_reads) && caller_locations(1, 1).first&.label == 'legacy_strftime'
          r.nondet('strftime(format) formats the current time', clock: true)
        end
        super
      end
    end

    module ExecuteHook
      def execute(*args, **kw, &blk)
        r = $cf_reads and r.nondet('a function ran a command (generate() or Puppet::Util::Execution.execute)')
        super
      end
    end
  end
end

# ---------------------------------------------------------------------------
# Exported resources without PuppetDB.
#
# Puppet collects exported resources (Type <<| query |>>) in
# Puppet::Pops::Evaluator::Collectors::ExportedCollector#collect, which
# searches the Puppet::Resource indirection with the collector's type as key
# and :host (the node compiled), :filter (the query as nested arrays,
# [lhs, op, rhs] with op ==, !=, and, or) and :scope. With storeconfigs on,
# that indirection's terminus is :store_configs, which hands every request to
# the terminus named by storeconfigs_backend: normally :puppetdb (the
# PuppetDB terminus turns the filter into a PuppetDB query), here
# :compilefarm (Puppet::Resource::Compilefarm below), which evaluates the
# filter over the request's "exported" list, the resources the farm stores
# for the other nodes of the environment, exactly as the PuppetDB terminus
# does: resources of that type, exported by another node; tag compared
# case-insensitively, title and parameters exactly (a parameter that is an
# array also matches one of its elements); != is the negation of == (a
# resource without the parameter matches). Found resources become
# Puppet::Parser::Resource with the exporter's parameters and a collector_id
# "certname|Type|title", as the PuppetDB terminus builds them; the collector
# then adds them to the catalog as ordinary (not exported) resources. The
# node's own exported resources are collected from its own catalog, by
# Puppet itself.
#
# The storeconfigs setting also makes Puppet cache catalogs and facts in the
# storeconfigs backend (its hook sets the catalog and facts indirections'
# cache_class); Exports.install undoes that: the worker stores nothing.
#
# Exports.describe renders a resource of the node's own catalog that it
# exports (taken before the catalog is filtered for the agent), and Context
# records, per exported collector, the nodes whose resources it matched.
# ---------------------------------------------------------------------------
require 'puppet/indirector/code'

module CompileFarm
  module Exports
    PTYPE = Puppet::Pops::Serialization::PCORE_TYPE_KEY
    PVALUE = Puppet::Pops::Serialization::PCORE_VALUE_KEY
    SENSITIVE = Puppet::Pops::Serialization::PCORE_TYPE_SENSITIVE

    # QueryError: a query the farm does not evaluate; raised again with the
    # collector's location.
    class QueryError < Puppet::Error; end

    class << self
      # install switches storeconfigs on with this worker's terminus as its
      # backend, and nothing else.
      def install
        Puppet[:storeconfigs_backend] = 'compilefarm'
        Puppet[:storeconfigs] = true
        Puppet::Resource::Catalog.indirection.set_global_setting(:cache_class, nil)
        Puppet::Node::Facts.indirection.set_global_setting(:cache_class, nil)
        Puppet.settings.override_default(:catalog_cache_terminus, nil)
        Puppet::Pops::Evaluator::Collectors::ExportedCollector.prepend(CollectorHook)
        Puppet::Pops::Evaluator::CollectorTransformer.prepend(TransformHook)
        check
      end

      # check fails unless collection reaches this worker's terminus and
      # nothing is cached anywhere.
      def check
        resource = Puppet::Resource.indirection
        backend = resource.terminus(resource.terminus_class)
        backend = backend.target if backend.respond_to?(:target)
        raise "exported resources would be searched with #{backend.class}" unless backend.is_a?(Puppet::Resource::Compilefarm)

        [Puppet::Resource::Catalog, Puppet::Node::Facts, Puppet::Node].each do |model|
          cache = model.indirection.cache_class
          raise "#{model} would be cached with #{cache}" if cache
        end
        cache = Puppet[:catalog_cache_terminus]
        raise "catalogs would be cached with #{cache}" if cache
      end

      # context validates the request's exported resources.
      def context(certname, list)
        list = [] if list.nil?
        raise BadRequest, 'exported must be a list' unless list.is_a?(Array)

        list.each_with_index do |r, i|
          raise BadRequest, "exported[#{i}] is not an object" unless r.is_a?(Hash)

          %w[certname type title].each do |k|
            v = r[k]
            raise BadRequest, "exported[#{i}].#{k} must be a non-empty string" unless v.is_a?(String) && !v.empty?
          end
          raise BadRequest, "exported[#{i}].parameters must be an object" unless r['parameters'].nil? || r['parameters'].is_a?(Hash)
          raise BadRequest, "exported[#{i}].tags must be a list of strings" unless r['tags'].nil? || (r['tags'].is_a?(Array) && r['tags'].all?(String))
        end
        Context.new(certname, list)
      end

      # describe renders an exported resource of the catalog as the farm
      # stores it: parameters as rich data (a sensitive parameter stays
      # Sensitive), whatever the environment's rich_data setting.
      def describe(resource)
        data = Puppet.override({ rich_data: true }, 'compilefarm exports') { resource.to_data_hash }
        params = data['parameters']
        if params
          Array(data['sensitive_parameters']).each do |name|
            params[name] = { PTYPE => SENSITIVE, PVALUE => params[name] } if params.key?(name)
          end
        end
        out = { 'type' => data['type'], 'title' => data['title'], 'tags' => data['tags'] || [] }
        out['parameters'] = params if params && !params.empty?
        out['file'] = data['file'] if data['file']
        out['line'] = data['line'] if data['line']
        out
      end

      # compile turns a collector's filter into a predicate over exported
      # resources (the hashes of the request), or raises QueryError for what
      # the farm does not support.
      def compile(filter)
        return ->(_) { true } if filter.nil?
        raise QueryError, "Exported resource query #{filter.inspect} is not supported" unless filter.is_a?(Array) && filter.length == 3

        lhs, op, rhs = filter
        case op
        when 'and', 'or'
          l = compile(lhs)
          r = compile(rhs)
          op == 'and' ? ->(x) { l.call(x) && r.call(x) } : ->(x) { l.call(x) || r.call(x) }
        when '==', '!='
          p = predicate(lhs, op, rhs)
          op == '==' ? p : ->(x) { !p.call(x) }
        else
          # The PuppetDB terminus's own message.
          raise QueryError, "Operator #{op} in #{filter.inspect} not supported"
        end
      end

      def predicate(field, op, value)
        unless field.is_a?(String)
          raise QueryError, "Exported resource query: the left side of #{op} must be tag, title or a parameter name, not #{field.inspect}"
        end

        case field
        when 'tag'
          unless value.is_a?(String)
            raise QueryError, "Exported resource query: a tag must be compared with a string, not #{value.inspect}"
          end

          tag = value.downcase
          ->(r) { (t = r['tags']) ? t.any? { |x| x.casecmp?(tag) } : false }
        when 'title'
          unless value.is_a?(String)
            raise QueryError, "Exported resource query: title must be compared with a string, not #{value.inspect}"
          end

          ->(r) { r['title'] == value }
        else
          unless data?(value)
            what = value.nil? ? 'undef' : value.inspect
            raise QueryError, "Exported resource query: parameter #{field} cannot be compared with #{what} " \
                                 '(only strings, numbers, booleans, and arrays and hashes of them)'
          end

          lambda do |r|
            params = r['parameters']
            next false unless params&.key?(field)

            v = params[field]
            equal?(v, value) || (v.is_a?(Array) && !value.is_a?(Array) && v.any? { |e| equal?(e, value) })
          end
        end
      end

      # data? tells whether v is JSON data a stored parameter can equal.
      def data?(v)
        case v
        when String, Integer, Float, true, false then true
        when Array then v.all? { |e| data?(e) }
        when Hash then v.all? { |k, e| k.is_a?(String) && data?(e) }
        else false
        end
      end

      # equal? compares JSON values as PuppetDB does: no coercion between
      # strings, numbers and booleans; strings case-sensitively.
      def equal?(a, b)
        case a
        when Numeric then b.is_a?(Numeric) && a == b
        when String then b.is_a?(String) && a == b
        when true, false then a.equal?(b)
        when Array then b.is_a?(Array) && a.length == b.length && a.zip(b).all? { |x, y| equal?(x, y) }
        when Hash then b.is_a?(Hash) && a.length == b.length && a.all? { |k, x| b.key?(k) && equal?(x, b[k]) }
        else false
        end
      end
    end

    # Context is one compile's exported resources and collectors.
    class Context
      attr_reader :certname

      def initialize(certname, list)
        @certname = certname
        @by_type = list.group_by { |r| r['type'] }
        @collects = [] # [type, {certname => true}], in evaluation order
        @by_collector = {}.compare_by_identity
        @current = nil
      end

      # collecting runs the block (ExportedCollector#collect) with the
      # collector's entry current.
      def collecting(collector, type)
        entry = @by_collector[collector] ||= [type.to_s, {}].tap { |e| @collects << e }
        prev = @current
        @current = entry
        begin
          yield
        ensure
          @current = prev
        end
      end

      # search returns the exported resources of type, of nodes but host,
      # that filter matches.
      def search(type, host, filter)
        pred = Exports.compile(filter)
        found = (@by_type[type] || []).select { |r| r['certname'] != host && pred.call(r) }
        found.each { |r| @current[1][r['certname']] = true } if @current
        found
      end

      def collects
        @collects.map do |type, matched|
          c = { 'type' => type }
          c['matched'] = matched.keys.sort unless matched.empty?
          c
        end
      end
    end

    module CollectorHook
      def collect
        ctx = $cf_exports
        return super unless ctx

        ctx.collecting(self, @type) { super }
      rescue QueryError => e
        file, line, pos = @cf_where
        raise Puppet::ParseError.new(e.message, file, line, pos)
      end
    end

    # TransformHook notes where each exported collector is in the code.
    module TransformHook
      def transform(o, scope)
        coll = super
        if coll.is_a?(Puppet::Pops::Evaluator::Collectors::ExportedCollector)
          coll.instance_variable_set(:@cf_where, [o.file, o.line, o.pos])
        end
        coll
      end
    end
  end
end

# The storeconfigs backend for exported resources (see above).
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

# ---------------------------------------------------------------------------
# Encrypted Hiera data (hiera-eyaml).
#
# Puppet's own eyaml_lookup_key backend decrypts ENC[PKCS7,...] values with
# the key pair its hierarchy level names (options pkcs7_private_key and
# pkcs7_public_key; without them, hiera-eyaml has no key at all). Keys are
# never part of a code snapshot: they live in the directory --eyaml-keys=DIR
# names, and each key path is resolved when a value is decrypted (at
# Pkcs7.decrypt, once the function has set the level's options):
#   - a level that names no key gets DIR/private_key.pkcs7.pem and
#     DIR/public_key.pkcs7.pem (hiera-eyaml's file names);
#   - an absolute path that exists on this host is used as written, as
#     Puppet Server would;
#   - any other path (the /etc/puppetlabs/puppet/eyaml/... of a control repo
#     written for Puppet Server) is looked up by its file name in DIR.
# A key that the level reads from a set environment variable
# (pkcs7_private_key_env_var) is left to hiera-eyaml. A key that cannot be
# found, read or parsed, or that is not the one a value was encrypted for,
# fails the compile with an error naming the key file and the setting.
# Decrypting reads no fact.
# ---------------------------------------------------------------------------
module CompileFarm
  module Eyaml
    # Where an operator sets DIR, for error messages.
    SETTING = 'the eyaml keys directory (broker dev --eyaml-keys DIR; COMPILEFARM_EYAML_KEYS in the compile function)'
    # hiera-eyaml's file names for a PKCS7 key pair, by role.
    FILES = { 'private' => 'private_key.pkcs7.pem', 'public' => 'public_key.pkcs7.pem' }.freeze

    # Error is a key that cannot be used; its message says what to fix.
    class Error < StandardError; end

    class << self
      # install loads hiera-eyaml and hooks its PKCS7 decryption; dir is
      # DIR, or nil. Without hiera-eyaml, eyaml levels fail as in Puppet
      # Server, unless dir is set: then the worker cannot start.
      def install(dir)
        @dir = dir.nil? || dir.empty? ? nil : File.expand_path(dir)
        begin
          require 'hiera/backend/eyaml/parser/parser'
          require 'hiera/backend/eyaml/encryptors/pkcs7'
        rescue LoadError => e
          return unless @dir

          raise LoadError, "an eyaml keys directory is set (#{@dir}) but hiera-eyaml cannot be loaded (#{e.message}): " \
                           'install it (Debian: apt-get install hiera-eyaml; elsewhere: gem install hiera-eyaml -v 3.3.0)'
        end
        Hiera::Backend::Eyaml::Encryptors::Pkcs7.singleton_class.prepend(DecryptHook)
      end

      # decrypt resolves the level's keys, checks that the private key opens
      # ciphertext, and runs hiera-eyaml's decryption (the block).
      def decrypt(ciphertext)
        where = FILES.keys.to_h { |role| [role, resolve(role)] }
        begin
          opened = opens?(ciphertext)
          plain = yield if opened
        rescue SystemCallError => e
          raise Error, "cannot read an eyaml key (#{e.message}): make it readable by the compile worker (uid #{Process.euid}); " \
                       "keys are found through #{SETTING}"
        rescue OpenSSL::PKey::PKeyError => e
          raise Error, "eyaml private key #{where['private']} is not a PEM RSA private key without a passphrase (#{e.message}): " \
                       "put the private key of the pair (eyaml createkeys) where #{SETTING} finds it"
        rescue OpenSSL::X509::CertificateError => e
          raise Error, "eyaml public key #{where['public']} is not a PEM certificate (#{e.message}): " \
                       "put the public key of the pair (eyaml createkeys) where #{SETTING} finds it"
        rescue OpenSSL::PKCS7::PKCS7Error => e
          raise Error, wrong_key(where, "OpenSSL: #{e.message}")
        end
        raise Error, wrong_key(where, 'it does not open the session key') unless opened

        plain
      end

      # resolve points the level's option for the role's key at the file to
      # use and returns where the key comes from.
      def resolve(role)
        opts = Hiera::Backend::Eyaml::Options
        var = opts[:"pkcs7_#{role}_key_env_var"]
        return "from environment variable #{var}" if var && ENV[var.to_s]

        named = opts[:"pkcs7_#{role}_key"].to_s
        return named if named.start_with?('/') && File.exist?(named)

        file = named.empty? ? FILES[role] : File.basename(named)
        why = named.empty? ? "the hierarchy level names no pkcs7_#{role}_key" : "pkcs7_#{role}_key #{named} does not exist on the compile host"
        raise Error, "#{why}, and no eyaml keys directory is set to find #{file} in: set #{SETTING}" unless @dir

        path = File.join(@dir, file)
        unless File.file?(path)
          raise Error, "eyaml #{role} key #{path} does not exist (#{why}): put #{file} there, or set #{SETTING} to the directory that holds it"
        end

        opts[:"pkcs7_#{role}_key"] = path
        path
      end

      # opens? tells whether the private key decrypts the session key of
      # one of the value's recipients. Without this check a wrong key would
      # fail only 255 times in 256: PKCS#7 then goes on with a random
      # session key (OpenSSL's defence against timing attacks), whose
      # padding check the garbage passes by chance.
      def opens?(ciphertext)
        opts = Hiera::Backend::Eyaml::Options
        var = opts[:pkcs7_private_key_env_var]
        pem = var && ENV[var.to_s] ? ENV[var.to_s] : File.read(opts[:pkcs7_private_key].to_s)
        key = OpenSSL::PKey::RSA.new(pem, '') # '': never prompt for a passphrase
        OpenSSL::PKCS7.new(ciphertext).recipients.any? do |ri|
          key.private_decrypt(ri.enc_key)
          true
        rescue OpenSSL::PKey::PKeyError
          false
        end
      end

      def wrong_key(where, detail)
        "eyaml private key #{where['private']} cannot decrypt this value (#{detail}): it was encrypted for another key pair, or is damaged: " \
          "put the matching key pair where #{SETTING} finds it, or encrypt the value again with public key #{where['public']}"
      end
    end

    # DecryptHook is prepended to Pkcs7's singleton class.
    module DecryptHook
      def decrypt(ciphertext)
        CompileFarm::Eyaml.decrypt(ciphertext) { super }
      end
    end
  end
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
      CompileFarm::Exports.install
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
            (catalog_json, exported), reads = recorded(req) do
              catalog, exported = compile_in(env, loader, certname, req)
              [render(catalog, env), exported]
            end
          ensure
            $cf_exports = nil
          end
          { catalog: catalog_json, reads: reads, exports: exported, collects: exports.collects }
        end
      end
    end

    # recorded runs the block (compile and render) while recording the facts
    # it reads, and returns [its result, the reads or nil].
    def recorded(req)
      off = Array(req['disable_hooks']).map(&:to_s)
      begin
        CompileFarm::Reads.check(off)
      rescue ArgumentError => e
        raise BadRequest, e.message
      end
      return [yield, nil] if !CompileFarm::Reads.recording? || off.include?('all')

      rec = CompileFarm::Reads::Recorder.new(req['facts'], off, req['parameters'])
      $cf_reads = rec
      begin
        out = yield
      ensure
        $cf_reads = nil
      end
      [out, rec.finish]
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
      exported = catalog.resources.select(&:exported?).map { |r| CompileFarm::Exports.describe(r) }
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

worker = CompileFarm::Worker.new(workdir)
begin
  worker.setup
rescue Exception => e # rubocop:disable Lint/RescueException
  log_json(:err, "puppet worker setup failed: #{e.class}: #{e.message}", 'backtrace' => e.backtrace&.first(10))
  exit 4
end

begin
  CompileFarm::Reads.install(disabled_hooks)
rescue Exception => e # rubocop:disable Lint/RescueException
  log_json(:err, "puppet worker: cannot install fact-read recording: #{e.class}: #{e.message}", 'backtrace' => e.backtrace&.first(10))
  exit 4
end

begin
  CompileFarm::Eyaml.install(eyaml_keys)
rescue Exception => e # rubocop:disable Lint/RescueException
  log_json(:err, "puppet worker: cannot set up encrypted Hiera data: #{e.class}: #{e.message}")
  exit 4
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
    # compilation is just as deterministic.
    log_json(:debug, "compile failed: #{e.class}: #{e.message}", 'backtrace' => e.backtrace&.first(20))
    emit({ 'id' => id, 'ok' => false, 'error' => CompileFarm.error_info(e).merge('kind' => 'compile') })
  ensure
    $cf_node = nil
  end
end

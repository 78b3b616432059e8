# frozen_string_literal: true
#
# Recording the facts a compile reads: the Recorder that collects one
# compile's reads and turns them into what the worker reports.

module CompileFarm
  module Reads
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

      # child notes a read of key k of the recording hash whose FactMeta is m.
      def child(m, k, bit)
        return unless k.is_a?(String) # fact keys are strings: any other key is never found

        note(m.children[k] || intern(m.path + [k]), bit)
      end

      # intern returns the one path object for a path that is not a fact's.
      def intern(path)
        @interned[path] ||= path.map { |k| k.frozen? ? k : k.dup.freeze }.freeze
      end

      def whole(o)
        m = o.instance_variable_get(:@__cf_meta)
        note(m.path, VALUE) if m && !m.detached
      end

      # top notes a read of the top-scope variable name; bit nil means "its
      # value" (for a recording hash: only that it is a hash).
      def top(name, bit)
        return if @suspended > 0 || RESERVED[name] || NUMERIC.match?(name) || @params.key?(name)

        path = @top_paths[name] || intern([name])
        note(path, bit || (@top_hash[name] ? HASH : VALUE))
      end

      # shallow notes what iterating the recording hash h (FactMeta m) reveals:
      # its key set, each value that is not a hash, and that each hash value
      # is a hash (that value is a recording hash, whose own reads record
      # what is done with it).
      def shallow(h, m)
        return if @suspended > 0 || !@iterate_on

        path = m.path
        children = m.children
        note(path, KEYS)
        H_EACH_PAIR.bind_call(h) do |k, v|
          next unless k.is_a?(String)

          note(children[k] || intern(path + [k]), FactHash === v ? HASH : VALUE)
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
        children = {}
        h.each_pair do |k, v|
          if k.is_a?(String)
            cp = (path + [k.frozen? ? k : k.dup.freeze]).freeze
            children[k] = cp
            v = wrap(v, cp) if v.instance_of?(Hash)
          end
          out[k] = v
        end
        CompileFarm::Reads.fact_hash(out, FactMeta.new(path, children.freeze, false))
      end

      def wrap_root(values)
        root = wrap(values, EMPTY_PATH)
        @top_paths = root.instance_variable_get(:@__cf_meta).children
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
  end
end

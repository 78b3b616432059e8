# frozen_string_literal: true
#
# Recording the facts a compile reads: the recording copies of the fact
# hashes (FactHash), and the hooks that keep a copy recording (3.x
# conversion, Hash type checks) or count a fact hash that Ruby's C-level
# Hash methods read directly.

module CompileFarm
  module Reads
    # FactMeta is the state of a recording copy of a fact hash (its
    # @__cf_meta): path is its key path; children maps each String key to
    # that key's path (the very objects the recorder keys reads by, made
    # when the facts were wrapped); detached is true once this copy has
    # been changed, and no longer records.
    FactMeta = Struct.new(:path, :children, :detached)

    # FactHash is extended into each recording copy of a fact hash, whose
    # FactMeta is @__cf_meta.
    module FactHash
      # noting defines each of names to note a read of kind (a constant's
      # name) of the whole hash, unless it is detached, then do what Hash
      # does.
      def self.noting(names, kind)
        names.each do |name|
          module_eval <<~RUBY, __FILE__, __LINE__ + 1
            def #{name}(...)
              if (r = $cf_reads) && !(m = @__cf_meta).detached
                r.note(m.path, #{kind})
              end
              super
            end
          RUBY
        end
      end

      def [](k)
        v = super
        if (r = $cf_reads) && !(m = @__cf_meta).detached
          r.child(m, k, FactHash === v ? HASH : VALUE)
        end
        v
      end

      def fetch(k, *rest, &blk)
        if (r = $cf_reads) && !(m = @__cf_meta).detached
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
            if (r = $cf_reads) && !(m = @__cf_meta).detached
              r.child(m, k, PRESENT)
            end
            super
          end
        RUBY
      end

      %i[values_at fetch_values slice].each do |name|
        module_eval <<~RUBY, __FILE__, __LINE__ + 1
          def #{name}(*ks, &blk)
            if (r = $cf_reads) && !(m = @__cf_meta).detached
              ks.each { |k| r.child(m, k, H_KEYP.bind_call(self, k) && FactHash === H_AREF.bind_call(self, k) ? HASH : VALUE) }
            end
            super
          end
        RUBY
      end

      def assoc(k)
        if (r = $cf_reads) && !(m = @__cf_meta).detached
          r.child(m, k, H_KEYP.bind_call(self, k) && FactHash === H_AREF.bind_call(self, k) ? HASH : VALUE)
        end
        super
      end

      noting(%i[size length empty? keys each_key], :KEYS)

      %i[count any?].each do |name|
        module_eval <<~RUBY, __FILE__, __LINE__ + 1
          def #{name}(*args, &blk)
            if (r = $cf_reads) && !(m = @__cf_meta).detached
              args.empty? && blk.nil? ? r.note(m.path, KEYS) : r.shallow(self, m)
            end
            super
          end
        RUBY
      end

      def to_h(&blk)
        if blk && (r = $cf_reads) && !(m = @__cf_meta).detached
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
            if (r = $cf_reads) && !(m = @__cf_meta).detached
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
        CompileFarm::Reads.fact_hash(super, @__cf_meta.dup)
      end

      def clone(...)
        c = super
        c.instance_variable_set(:@__cf_meta, @__cf_meta.dup) unless c.frozen?
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
              m = @__cf_meta
              if (r = $cf_reads) && !m.detached
                r.note(m.path, VALUE)
              end
              m.detached = true
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

    FACT_TEMPLATE = {}.extend(FactHash)

    # fact_hash returns a recording hash with plain's contents and FactMeta
    # meta.
    def self.fact_hash(plain, meta)
      recording_copy(FACT_TEMPLATE, plain, :@__cf_meta, meta)
    end

    # Runtime3Converter#convert_Hash deep-copies hashes for 3.x functions
    # and resource parameters: the copy of a fact hash records as the
    # original (same path).
    module ConvertHook
      def convert_Hash(o, scope, undef_value)
        m = FactHash === o && $cf_reads&.convert_on && o.instance_variable_get(:@__cf_meta)
        return super unless m && !m.detached

        result = {}
        ic = @inner_converter
        H_EACH_PAIR.bind_call(o) { |k, v| result[ic.convert(k, scope, undef_value)] = ic.convert(v, scope, undef_value) }
        CompileFarm::Reads.fact_hash(result, FactMeta.new(m.path, m.children, false))
      end
    end

    # A fact hash matched against a Hash type whose values may be anything
    # (Hash, Hash[String, Any], a Hash parameter of keys(), ...) reveals
    # only its key set, though PHashType#instance? walks the values.
    module HashTypeHook
      def instance?(o, guard = nil)
        if FactHash === o && (r = $cf_reads)&.facts_on && @value_type.instance_of?(Puppet::Pops::Types::PAnyType)
          m = o.instance_variable_get(:@__cf_meta)
          unless m.detached
            r.note(m.path, KEYS)
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
  end
end

# frozen_string_literal: true
#
# Recording the facts a compile reads: where facts enter the compiler
# (CompilerHook) and the top-scope variable hooks (the top scope's symbol
# table, node parameters, qualified lookups, Scope#to_hash).

module CompileFarm
  module Reads
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
    # @__cf_top, the top scope's own variable table (name => value), or nil
    # once the hash has been changed (it then counted as read whole).
    module ScopeHash
      # __cf_var notes a read of variable k through this hash: bit nil for
      # its value, PRESENT for whether it is there.
      def __cf_var(k, bit)
        top = @__cf_top
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
              if @__cf_top && (r = $cf_reads)
                r.note(EMPTY_PATH, #{kind})
              end
              super
            end
          RUBY
        end
      end

      noting(%i[size length empty? keys each_key], :KEYS)

      def dup
        CompileFarm::Reads.scope_hash(super, @__cf_top)
      end

      def clone(...)
        c = super
        c.instance_variable_set(:@__cf_top, @__cf_top) unless c.frozen?
        c
      end

      FactHash::MUTATORS.each do |name|
        module_eval <<~RUBY, __FILE__, __LINE__ + 1
          def #{name}(...)
            unless frozen?
              if @__cf_top && (r = $cf_reads)
                r.note(EMPTY_PATH, VALUE)
              end
              @__cf_top = nil
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
      recording_copy(SCOPE_TEMPLATE, h, :@__cf_top, top)
    end

    module QualifiedHook
      def lookup_qualified_variable(fqn, options)
        r = $cf_reads
        r.top(fqn, nil) if r&.qualified_on && !fqn.include?('::')
        super
      end
    end
  end
end

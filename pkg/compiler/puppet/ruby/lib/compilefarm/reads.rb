# frozen_string_literal: true
#
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

module CompileFarm
  module Reads
    VALUE = 1
    HASH = 2
    PRESENT = 4
    KEYS = 8
    KIND_NAMES = [[VALUE, 'value'], [HASH, 'hash'], [PRESENT, 'present'], [KEYS, 'keys']].freeze

    # Hook names, for --disable-hooks.
    # "queries" records PuppetDB queries (see puppetdb.rb).
    HOOKS = %w[facts topscope qualified tohash iterate erb convert hashargs nondet queries].freeze

    # Top-scope names that never come from facts.
    RESERVED = %w[facts trusted server_facts environment module_name caller_module_name].to_h { |n| [n, true] }.freeze
    NUMERIC = /\A\d+\z/.freeze

    EMPTY_PATH = [].freeze
    H_KEYP = Hash.instance_method(:key?)
    H_AREF = Hash.instance_method(:[])
    H_EACH_PAIR = Hash.instance_method(:each_pair)
    H_REPLACE = Hash.instance_method(:replace)
    K_CLONE = Kernel.instance_method(:clone)

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

      # recording_copy returns a copy of template (a hash extended with a
      # recording module: FactHash, ScopeHash) holding hash's contents, with
      # its recording state state in the instance variable ivar. Cloning
      # the template copies its singleton class, several times faster than
      # extending a fresh hash.
      def recording_copy(template, hash, ivar, state)
        h = K_CLONE.bind_call(template)
        H_REPLACE.bind_call(h, hash)
        h.instance_variable_set(ivar, state)
        h
      end
    end
  end
end

# The recorder and the hooks, by what they observe.
require_relative 'reads/recorder'
require_relative 'reads/fact_hash'
require_relative 'reads/scope'
require_relative 'reads/templates'
require_relative 'reads/nondet'
